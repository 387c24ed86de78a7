"""The HTTP server fed what a network sends it (issue 23's audit held this; the server is new
since: a bounded pool of workers, and since issue 31 an event loop that reads every request head
before a worker sees it, exporter/exposition/connections.py). Garbage, overlong request
lines, too many headers, bad methods, requests cut and stalled, pipelined requests: every one is
answered or dropped, none takes the server down, and scrapes keep working. A real ``serve``."""

from __future__ import annotations

import os
import random
import socket
import time

import test_serve_support as h

from exporter.exposition import connections


def _send(port: int, data: bytes, read: bool = True, timeout: float = 10) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
            if not read:
                return b""
            s.shutdown(socket.SHUT_WR)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            return out
        except OSError:
            return b""


def test_fuzzed_requests_do_not_take_the_server_down(serve, tmp_path):
    log = tmp_path / "s.log"
    log.write_bytes(h.lines_blob(0, 50))
    srv = serve("--log", str(log), "--from-beginning")
    rnd = random.Random(23)
    cases = [
        b"\x00\xff" * 100,
        b"GET " + b"/a" * 40000 + b" HTTP/1.1\r\n\r\n",  # request line over 64 KiB
        b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(300)) + b"\r\n",  # > 100 headers
        b"BREW /pot HTTP/1.1\r\n\r\n",
        b"GET /\r\n",  # HTTP/0.9
        b"GET /metrics HTTP/9.9\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"GET /metrics?name[]=" + b"x&name[]=" * 10000 + b" HTTP/1.1\r\n\r\n",
        b"GET /%00%ff/../../etc/passwd HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nAuthorization: Basic !!!\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nAccept-Encoding: " + b"gzip," * 5000 + b"\r\n\r\n",
    ]
    cases += [bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 3000))) for _ in range(200)]
    for data in cases:
        _send(srv.port, data)
        assert srv.proc.poll() is None, srv.stderr()
    # requests cut in the middle and left hanging: the loop holds them, no worker waits for them
    hanging = []
    for _ in range(connections.MAX_WORKERS + 5):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # no blank line: the headers never end
        hanging.append(s)
    try:
        time.sleep(0.5)
        code, body = srv.get("/metrics")
        assert code == 200 and h.value(body, h.DECODE) == 50
    finally:
        for s in hanging:
            s.close()
    assert srv.get("/healthz")[0] == 200
    assert len(os.listdir(f"/proc/{srv.proc.pid}/task")) <= connections.MAX_WORKERS + 12


def test_pipelined_and_kept_alive_requests_are_all_answered(serve, tmp_path):
    """Two requests in one packet, then a third later on the same connection: three answers (the
    wait for a next request looks at what is already buffered before waiting on the socket)."""
    log = tmp_path / "s.log"
    log.touch()
    srv = serve("--log", str(log))
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        deadline = time.monotonic() + 10
        while got.count(b"HTTP/1.1 ") < 2 and time.monotonic() < deadline:
            got += s.recv(65536)
        time.sleep(1.0)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while chunk := s.recv(65536):
            got += chunk
    assert got.count(b"HTTP/1.1 200") == 3, got
