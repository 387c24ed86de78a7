"""The web layer in-process with real sockets and real HTTP(S) clients: several listen addresses,
IPv6 and dual stack, the telemetry path, ``?name[]=`` filtering, and the web config reloaded
when its files change (certificate rotation across a swap, as exporter-toolkit does)."""

from __future__ import annotations

import base64
import http.client
import os
import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import bcrypt
import ci_support
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from exporter.exposition import web, webconfig

OPENSSL = shutil.which("openssl")


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def registry() -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    Gauge("hybrid_cache_kv_usage_ratio", "kv", ["source"], registry=reg).labels("a").set(0.5)
    Counter("hybrid_cache_decode_batches", "decode", ["source"], registry=reg).labels("a").inc(3)
    Gauge("hybrid_cache_mamba_usage_ratio", "mamba", ["source"], registry=reg).labels("a").set(0.9)
    return reg


class Running:
    def __init__(self, listens: list[str], cfg=None, telemetry_path: str = "/metrics") -> None:
        cfg = cfg if cfg is not None else webconfig.WebConfig()
        self.app = web.App(registry(), lambda: (True, []), lambda: [], cfg, telemetry_path, version="9.9.9")
        self.servers = web.make_servers(listens, self.app)
        self.threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True) for s in self.servers]
        for t in self.threads:
            t.start()

    def port(self, i: int = 0) -> int:
        return self.servers[i].server_address[1]

    def close(self) -> None:
        for s in self.servers:
            s.shutdown()
            s.server_close()


@pytest.fixture
def running():
    made: list[Running] = []

    def start(*a, **kw) -> Running:
        r = Running(*a, **kw)
        made.append(r)
        return r

    yield start
    for r in made:
        r.close()


def get(host: str, port: int, path: str, ctx: ssl.SSLContext | None = None, headers=None) -> tuple[int, str]:
    c = http.client.HTTPSConnection(host, port, context=ctx, timeout=10) if ctx else http.client.HTTPConnection(host, port, timeout=10)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def test_parse_listen_forms():
    assert web.parse_listen(":19833") == ("", 19833)
    assert web.parse_listen("[::1]:9") == ("::1", 9)
    assert web.parse_listen("[::]:0") == ("::", 0)
    assert web.parse_listen("127.0.0.1:80") == ("127.0.0.1", 80)
    for bad in ("::1:80", "[::1", "[::1]x", "host:port", "h:70000"):
        with pytest.raises(ValueError):
            web.parse_listen(bad)
    b = web.resolve_listen("127.0.0.1:0")
    assert (b.family, b.host, b.dual_stack) == (socket.AF_INET, "127.0.0.1", False)


def test_two_listen_addresses_serve_the_same_metrics(running):
    r = running(["127.0.0.1:0", "127.0.0.1:0"])
    bodies = [get("127.0.0.1", r.port(i), "/metrics")[1] for i in (0, 1)]
    assert bodies[0] == bodies[1] and "hybrid_cache_kv_usage_ratio" in bodies[0]


def test_second_address_in_use_closes_the_first():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        app = web.App(registry(), lambda: (True, []), lambda: [], webconfig.WebConfig())
        with pytest.raises(OSError):
            web.make_servers(["127.0.0.1:0", f"127.0.0.1:{busy.getsockname()[1]}"], app)


@pytest.mark.skipif(not _ipv6(), reason="no IPv6 loopback")
def test_ipv6_loopback_only(running):
    r = running(["[::1]:0"])
    assert r.servers[0].socket.family == socket.AF_INET6
    assert get("::1", r.port(), "/healthz") == (200, "ok\n")
    with pytest.raises(OSError):  # IPv6 only: nothing on 127.0.0.1 at that port
        get("127.0.0.1", r.port(), "/healthz")
    assert web.url_of(r.servers[0], False) == f"http://[::1]:{r.port()}"


@pytest.mark.skipif(not _ipv6(), reason="no IPv6 loopback")
@pytest.mark.parametrize("spec", ["[::]:0", ":0"])
def test_dual_stack_takes_ipv4_and_ipv6(running, spec):
    r = running([spec])
    s = r.servers[0].socket
    assert s.family == socket.AF_INET6
    assert s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
    assert get("127.0.0.1", r.port(), "/healthz")[0] == 200
    assert get("::1", r.port(), "/healthz")[0] == 200


def test_telemetry_path(running):
    r = running(["127.0.0.1:0"], telemetry_path="/custom/metrics")
    code, body = get("127.0.0.1", r.port(), "/custom/metrics")
    assert code == 200 and "hybrid_cache_kv_usage_ratio" in body
    assert get("127.0.0.1", r.port(), "/metrics")[0] == 404
    code, page = get("127.0.0.1", r.port(), "/")
    assert 'href="/custom/metrics"' in page and "9.9.9" in page
    for bad in ("metrics", "/", "/healthz", "/readyz", "/m?x=1"):
        with pytest.raises(ValueError):
            web.check_telemetry_path(bad)


def test_name_filter(running):
    r = running(["127.0.0.1:0"])
    port = r.port()
    full = get("127.0.0.1", port, "/metrics")[1]
    assert "hybrid_cache_mamba_usage_ratio" in full
    # a sample name, a family name, and two names at once
    body = get("127.0.0.1", port, "/metrics?name[]=hybrid_cache_kv_usage_ratio")[1]
    assert 'hybrid_cache_kv_usage_ratio{source="a"} 0.5' in body
    assert "mamba" not in body and "decode" not in body
    body = get("127.0.0.1", port, "/metrics?name[]=hybrid_cache_decode_batches_total&name%5B%5D=hybrid_cache_mamba_usage_ratio")[1]
    assert 'hybrid_cache_decode_batches_total{source="a"} 3.0' in body and "hybrid_cache_mamba_usage_ratio" in body
    assert "hybrid_cache_decode_batches_created" not in body and "kv_usage" not in body
    body = get("127.0.0.1", port, "/metrics?name[]=hybrid_cache_decode_batches")[1]
    assert "hybrid_cache_decode_batches_total" in body and "hybrid_cache_decode_batches_created" in body
    code, body = get("127.0.0.1", port, "/metrics?name[]=no_such_metric")
    assert code == 200 and body == ""
    # OpenMetrics keeps working with the filter
    code, body = get(
        "127.0.0.1", port, "/metrics?name[]=hybrid_cache_kv_usage_ratio", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert body.startswith("# HELP hybrid_cache_kv_usage_ratio") and body.rstrip().endswith("# EOF")


# --- the web config reloads -------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """One CA and two server certificates (CN one/two) for 127.0.0.1, EC keys (fast)."""
    ci_support.need(OPENSSL is not None, "openssl CLI not available")
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=test-ca", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name in ("one", "two"):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", f"{name}.crt",
                 "-days", "2", "-extfile", "san.ext", cwd=d)  # fmt: skip
    return d


def _install(src: Path, dst: Path) -> None:
    """Replace ``dst`` atomically with a copy of ``src`` (how cert-manager / kubelet swap secrets)."""
    tmp = dst.with_suffix(dst.suffix + ".tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _peer_cn(port: int, ctx: ssl.SSLContext) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        cert = s.getpeercert()
    return dict(x[0] for x in cert["subject"])["commonName"]


def test_certificate_rotation_reloads_per_connection(running, pki, tmp_path):
    live = tmp_path / "live"
    live.mkdir()
    _install(pki / "one.crt", live / "tls.crt")
    _install(pki / "one.key", live / "tls.key")
    cfg_path = tmp_path / "web.yml"
    cfg_path.write_text(f"tls_server_config:\n  cert_file: {live / 'tls.crt'}\n  key_file: {live / 'tls.key'}\n")
    rc = webconfig.ReloadingWebConfig(str(cfg_path))
    r = running(["127.0.0.1:0"], cfg=rc)
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    port = r.port()
    assert _peer_cn(port, ctx) == "one"
    # a keep-alive connection opened before the swap
    keep = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    keep.request("GET", "/metrics")
    assert keep.getresponse().read()

    # cert swapped before its key: that pair does not load; the old one stays in force
    _install(pki / "two.crt", live / "tls.crt")
    assert _peer_cn(port, ctx) == "one"
    assert rc.failing and rc.reloads == 0
    # the key follows: the next connection gets the new certificate, with no restart
    _install(pki / "two.key", live / "tls.key")
    assert _peer_cn(port, ctx) == "two"
    assert not rc.failing and rc.reloads == 1
    code, body = get("127.0.0.1", port, "/metrics", ctx)
    assert code == 200 and "hybrid_cache_kv_usage_ratio" in body
    # the open connection still works (it was set up with the old certificate)
    keep.request("GET", "/healthz")
    assert keep.getresponse().status == 200
    keep.close()
    # no change: no reload
    assert _peer_cn(port, ctx) == "two" and rc.reloads == 1


def test_web_config_reload_of_users_and_refused_tls_switch(running, tmp_path, pki):
    cfg_path = tmp_path / "web.yml"

    def users(pw: bytes) -> None:
        tmp = tmp_path / "web.yml.tmp"
        tmp.write_text(f"basic_auth_users:\n  prom: '{bcrypt.hashpw(pw, bcrypt.gensalt(4)).decode()}'\n")
        os.replace(tmp, cfg_path)

    users(b"old")
    rc = webconfig.ReloadingWebConfig(str(cfg_path))
    r = running(["127.0.0.1:0"], cfg=rc)
    port = r.port()

    def code(pw: str) -> int:
        return get("127.0.0.1", port, "/metrics", headers={"Authorization": "Basic " + base64.b64encode(f"prom:{pw}".encode()).decode()})[0]

    assert code("old") == 200 and code("new") == 401
    users(b"new")
    assert code("new") == 200 and code("old") == 401
    # a config that would turn TLS on is refused by a reload (restart for that); basic auth stays
    tmp = tmp_path / "web.yml.tmp"
    tmp.write_text(f"tls_server_config:\n  cert_file: {pki / 'one.crt'}\n  key_file: {pki / 'one.key'}\n")
    os.replace(tmp, cfg_path)
    assert code("new") == 200 and code("wrong") == 401
    assert rc.failing
    # broken YAML: refused too, the config in force stays
    cfg_path.write_text("basic_auth_users: [\n")
    assert code("new") == 200 and rc.failing


def test_serve_reloads_rotated_certificate(pki, tmp_path):
    """The same through a real ``serve`` process: --web.config.file, a cert-manager style swap of
    the Secret's files, the next HTTPS connection gets the new certificate, and the self-metric
    tells a change that does not load."""
    import test_serve_support as h

    live = tmp_path / "live"
    live.mkdir()
    _install(pki / "one.crt", live / "tls.crt")
    _install(pki / "one.key", live / "tls.key")
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {live / 'tls.crt'}\n  key_file: {live / 'tls.key'}\n")
    log = tmp_path / "s.log"
    log.touch()
    s = h.Serve(tmp_path, "--log", str(log), "--web.config.file", str(cfg))
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    try:

        def up() -> bool:
            assert s.proc.poll() is None, s.stderr()
            try:
                return _peer_cn(s.port, ctx) == "one"
            except OSError:
                return False

        h.wait_for(up, what="https up")

        def reload_ok() -> float:
            return h.value(get("127.0.0.1", s.port, "/metrics", ctx)[1], "hybrid_cache_exporter_web_config_last_reload_successful")

        assert reload_ok() == 1
        _install(pki / "two.key", live / "tls.key")  # the key first: does not match the old cert
        assert _peer_cn(s.port, ctx) == "one" and reload_ok() == 0
        _install(pki / "two.crt", live / "tls.crt")
        assert _peer_cn(s.port, ctx) == "two" and reload_ok() == 1
        assert "web config not reloaded" in s.stderr() and "reloaded (files changed)" in s.stderr()
    finally:
        s.kill()


def test_all_interfaces_without_ipv6(monkeypatch):
    """':PORT' on a host without IPv6 (ipv6.disable=1, some containers) falls back to IPv4;
    '[::]:PORT' asks for IPv6 and is refused with a clear message."""
    monkeypatch.setattr(web, "_ipv6_usable", lambda: False)
    b = web.resolve_listen(":0")
    assert (b.family, b.host, b.dual_stack) == (socket.AF_INET, "0.0.0.0", False)
    with pytest.raises(ValueError, match="no IPv6"):
        web.resolve_listen("[::]:0")
