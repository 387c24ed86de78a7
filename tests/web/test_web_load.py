"""Scrapes under concurrent clients (issue 23, item 3): a listen queue of 1024 instead of the
standard library's 5 (SYNs were dropped and retried after 1, 3, 7 s: p99 1.9 s with 50 clients,
timeouts at 200), a bounded pool of workers, and connections that send nothing (port scans, TCP
checks, a stalled TLS handshake) unable to hold the workers. Real ``serve`` processes, the load
generator of bench/scrapes.py; the figures of a longer run are in docs/reliability.md."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import ci_support
import pytest
import test_serve_support as h

from exporter.exposition import connections, web

sys.path.insert(0, str(h.ROOT / "bench"))
import scrapes  # noqa: E402  (bench/scrapes.py: the load generator)


def _demo(tmp_path):
    log = tmp_path / "demo.log"
    log.write_bytes((h.ROOT / "fixtures" / "demo" / "sglang-mamba-bound.log").read_bytes())
    return log


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.mark.serial  # timed bounds or a load of its own: run alone (Makefile's test target)
def test_listen_queue_and_bounded_workers_under_200_clients(serve, tmp_path):
    srv = serve("--log", str(_demo(tmp_path)), "--from-beginning")
    if shutil.which("ss"):
        out = subprocess.run(["ss", "-Hltn", f"sport = :{srv.port}"], capture_output=True, text=True).stdout.split()
        somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
        assert int(out[2]) == min(connections.LISTEN_BACKLOG, somaxconn), out  # Send-Q of a listening socket: its backlog
    most = [0]
    res = {}

    def run():
        res.update(scrapes.load(srv.port, 200, 4.0, keepalive=False))

    t = threading.Thread(target=run)
    t.start()
    while t.is_alive():
        most[0] = max(most[0], _threads(srv.proc.pid))
        time.sleep(0.1)
    assert res["errors"] == 0, res  # no request timed out (10 s, Prometheus' default) or failed
    assert res["requests"] > 200, res
    assert most[0] <= connections.MAX_WORKERS + 12, most  # the workers are bounded (before: one thread per connection)


@pytest.mark.serial  # timed bounds or a load of its own: run alone (Makefile's test target)
def test_keepalive_clients_take_turns(serve, tmp_path):
    """200 clients that keep their connections: the pool goes round them (a connection is closed
    after its answer while others wait), nobody waits out the timeout."""
    srv = serve("--log", str(_demo(tmp_path)), "--from-beginning")
    res = scrapes.load(srv.port, 200, 4.0, keepalive=True)
    assert res["errors"] == 0 and res["requests"] > 200, res


def _idle(port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        out.append(s)  # connected, and nothing sent (not even a TLS ClientHello)
    return out


def _scrape_behind_silent_connections(port: int, connect) -> None:
    """A scrape made after more silent connections than there are workers is answered (before the
    pool gave idle connections up: 30 s behind them, past the client's 10 s)."""
    idle = _idle(port, connections.MAX_WORKERS + 8)
    try:
        time.sleep(0.5)
        c = connect(timeout=10)
        c.request("GET", "/metrics")
        assert c.getresponse().status == 200
        c.close()
    finally:
        for s in idle:
            s.close()


def test_connections_that_send_nothing_cannot_hold_the_workers(serve, tmp_path):
    srv = serve("--log", str(_demo(tmp_path)), "--from-beginning")
    _scrape_behind_silent_connections(srv.port, lambda timeout: http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout))


@ci_support.needs(shutil.which("openssl") is not None, "openssl CLI not available")
def test_stalled_tls_handshakes_cannot_hold_the_workers(serve, tmp_path):
    ctx, cfg = scrapes.tls_config(tmp_path)
    log = tmp_path / "s.log"
    log.touch()
    srv = serve("--log", str(log), "--web.config.file", str(cfg), up=False)

    def up() -> bool:
        try:
            c = http.client.HTTPSConnection("127.0.0.1", srv.port, context=ctx, timeout=5)
            c.request("GET", "/healthz")
            return c.getresponse().status == 200
        except OSError:
            return False

    h.wait_for(up, what="https up")
    _scrape_behind_silent_connections(
        srv.port, lambda timeout: http.client.HTTPSConnection("127.0.0.1", srv.port, context=ctx, timeout=timeout)
    )


def test_a_bare_port_is_explained():
    with pytest.raises(ValueError, match=r"a port alone is not an address; write ':19833'"):
        web.parse_listen("19833")
    r = subprocess.run([str(h.EXE), "serve", "--log", "x.log", "--web.listen-address", "9900"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "write ':9900'" in r.stderr, r.stderr
