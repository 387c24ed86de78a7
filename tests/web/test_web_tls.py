"""TLS, mTLS and basic auth (exporter-toolkit web config) with real HTTPS clients; bad configs exit 2."""

from __future__ import annotations

import base64
import gzip
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request

import bcrypt
import ci_support
import pytest
import test_serve_support as h

pytestmark = ci_support.needs(shutil.which("openssl") is not None, "openssl CLI not available")


def _run(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    _run(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=test-ca", cwd=d
    )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", f"{name}.crt",
             "-days", "2", "-extfile", "san.ext", cwd=d)  # fmt: skip
    return d


@pytest.fixture
def serve(tmp_path):
    started: list[h.Serve] = []

    def start(*args: str) -> h.Serve:
        s = h.Serve(tmp_path, *args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()


def _wait_https(srv: h.Serve, ctx: ssl.SSLContext) -> None:
    def ok() -> bool:
        assert srv.proc.poll() is None, srv.stderr()
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{srv.port}/healthz", context=ctx, timeout=2):
                return True
        except (OSError, ssl.SSLError):
            return False

    h.wait_for(ok, what="https up")


def _client_ctx(certs, cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if cert:
        ctx.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    return ctx


def _get(url, ctx, auth=None, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_tls_and_basic_auth(serve, tmp_path, certs):
    log = tmp_path / "s.log"
    h.fsync_append(log, h.lines_blob(0, 5))
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    cfg = tmp_path / "web.yml"
    cfg.write_text(
        f"tls_server_config:\n  cert_file: {certs / 'server.crt'}\n  key_file: {certs / 'server.key'}\n  min_version: TLS12\n"
        f"basic_auth_users:\n  prom: '{hashed}'\n"
    )
    srv = serve("--log", str(log), "--from-beginning", "--web.config.file", str(cfg))
    ctx = _client_ctx(certs, cert=False)
    _wait_https(srv, ctx)
    base = f"https://127.0.0.1:{srv.port}"
    code, _, hdrs = _get(base + "/metrics", ctx)
    assert code == 401 and "Basic" in hdrs.get("WWW-Authenticate", "")
    assert _get(base + "/metrics", ctx, auth="prom:wrong")[0] == 401
    assert _get(base + "/metrics", ctx, auth="nobody:s3cret")[0] == 401
    h.wait_for(lambda: h.value(_get(base + "/metrics", ctx, auth="prom:s3cret")[1].decode(), h.DECODE) == 5, what="5 lines")
    for _ in range(3):  # cached check
        assert _get(base + "/metrics", ctx, auth="prom:s3cret")[0] == 200
    # gzip and OpenMetrics negotiation
    code, body, hdrs = _get(
        base + "/metrics",
        ctx,
        auth="prom:s3cret",
        headers={"Accept-Encoding": "gzip", "Accept": "application/openmetrics-text; version=1.0.0"},
    )
    assert code == 200 and hdrs.get("Content-Encoding") == "gzip"
    text = gzip.decompress(body).decode()
    assert "application/openmetrics-text" in hdrs["Content-Type"] and text.rstrip().endswith("# EOF")
    assert _get(base + "/healthz", ctx)[0] == 200  # probes need no credentials
    # plain HTTP on the TLS port fails
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/metrics", timeout=5).read()


def test_mtls_requires_client_cert(serve, tmp_path, certs):
    log = tmp_path / "s.log"
    log.touch()
    cfg = tmp_path / "web.yml"
    cfg.write_text(
        f"tls_server_config:\n  cert_file: {certs / 'server.crt'}\n  key_file: {certs / 'server.key'}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {certs / 'ca.crt'}\n"
    )
    srv = serve("--log", str(log), "--web.config.file", str(cfg))
    good = _client_ctx(certs, cert=True)
    _wait_https(srv, good)
    assert _get(f"https://127.0.0.1:{srv.port}/metrics", good)[0] == 200
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        _get(f"https://127.0.0.1:{srv.port}/metrics", _client_ctx(certs, cert=False))


BAD = [
    "nonsense_key: 1\n",
    "tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n",
    "tls_server_config:\n  cert_file: x.crt\n",
    "basic_auth_users:\n  prom: plaintext\n",
    "tls_server_config:\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
    "tls_server_config: [\n",
    "rate_limit:\n  interval: 1s\n",
]


@pytest.mark.parametrize("content", BAD + [None])
def test_bad_web_config_exits_2(tmp_path, content):
    cfg = tmp_path / "web.yml"
    if content is not None:
        cfg.write_text(content)
    p = subprocess.run(
        [str(h.EXE), "serve", "--log", str(tmp_path / "s.log"), "--listen", f"127.0.0.1:{h.free_port()}", "--web.config.file", str(cfg)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2, p.stderr
    assert "web config" in p.stderr


def test_readyz_and_landing(tmp_path):
    d = tmp_path / "adir"
    d.mkdir()
    log = tmp_path / "ok.log"
    log.touch()
    s = h.Serve(tmp_path, "--log", str(log), "--log", str(d))
    try:
        s.wait_up()
        h.wait_for(lambda: s.get("/readyz")[0] == 503, what="503 for a directory")
        assert "is a directory" in s.get("/readyz")[1]
        code, page = s.get("/")
        assert code == 200 and str(log) in page and "/metrics" in page
    finally:
        s.kill()
