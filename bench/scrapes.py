#!/usr/bin/env python3
"""Concurrent scrapers against a real ``serve``: the latency of /metrics under load.

    python bench/scrapes.py --clients 50 --seconds 20
    python bench/scrapes.py --clients 200 --seconds 20 --keepalive
    python bench/scrapes.py --clients 1 --seconds 60 --slow 150 --silent 150 [--hostile-from 127.0.0.2] [--tls]

Starts ``serve`` on the demo log (read whole, so /metrics is a real exposition of ~300 series),
then runs N client threads that scrape /metrics back to back for the given time, each request on a
new connection (``--keepalive``: one persistent connection per client, as Prometheus keeps them),
with Prometheus' default scrape timeout (10 s) as the client timeout. Prints the count, p50, p99,
max and timeouts; ``--json`` prints them as one JSON object. ``--slow``/``--silent``: that many
hostile connections held open meanwhile (:class:`Hostile`: one header byte every 5 s, or nothing,
each reopened as soon as the server closes it), from the scrapers' own address unless
``--hostile-from`` names another loopback address; ``--tls`` serves HTTPS (a throwaway
certificate) and the slow connections dribble a TLS ClientHello instead of a request head.
docs/reliability.md quotes the figures. Used by tests/web/test_web_load.py and
tests/web/test_hostile_clients.py with small numbers.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import json
import os
import random
import selectors
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXE = ROOT / ".venv" / "bin" / "hybrid-cache-exporter"
DEMO = ROOT / "fixtures" / "demo" / "sglang-mamba-bound.log"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


SLOW_HEAD = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 8000  # a head that never ends


def client_hello() -> bytes:
    """A real TLS ClientHello (what a client sends first), to dribble at a TLS listener."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    out = ssl.MemoryBIO()
    obj = ctx.wrap_bio(ssl.MemoryBIO(), out)
    with contextlib.suppress(ssl.SSLWantReadError):  # it waits for the server's answer
        obj.do_handshake()
    return out.read()


class Hostile:
    """Connections that hold a server's attention and ask nothing: ``slow`` ones send one byte of
    ``payload`` every ``every`` seconds (slowloris), ``silent`` ones send nothing (port scans,
    stalled handshakes); each is reopened as soon as the server closes it. One thread, non-blocking
    sockets, from the loopback address ``source``. ``reopened`` counts the server's closes."""

    def __init__(
        self, port: int, slow: int, silent: int, every: float = 5.0, payload: bytes = SLOW_HEAD, source: str = "127.0.0.1"
    ) -> None:
        self.port, self.every, self.payload, self.source = port, every, payload, source
        self.kinds = ["slow"] * slow + ["silent"] * silent
        self.reopened = 0
        self.open = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hostile", daemon=True)

    def __enter__(self) -> Hostile:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        rnd = random.Random(31)
        state: dict[socket.socket, list] = {}  # sock -> [kind, bytes sent, when the next byte is due]
        reopen: collections.deque = collections.deque((k, 0.0) for k in self.kinds)

        def close(s: socket.socket) -> None:
            sel.unregister(s)
            kind = state.pop(s)[0]
            s.close()
            reopen.append((kind, time.monotonic() + 0.05))  # not a tight loop when the server refuses
            self.reopened += 1

        while not self._stop.is_set():
            now = time.monotonic()
            while reopen and reopen[0][1] <= now:
                kind = reopen.popleft()[0]
                s = socket.socket()
                s.setblocking(False)
                s.bind((self.source, 0))
                try:
                    s.connect_ex(("127.0.0.1", self.port))  # in progress
                except OSError:
                    s.close()
                    reopen.append((kind, now + 0.05))
                    continue
                state[s] = [kind, 0, now + rnd.uniform(0, self.every)]
                sel.register(s, selectors.EVENT_READ)
            self.open = len(state)
            for key, _ in sel.select(0.1):
                s = key.fileobj
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    close(s)
            now = time.monotonic()
            for s, st in list(state.items()):
                if st[0] == "slow" and st[2] <= now:
                    try:
                        s.send(self.payload[st[1] % len(self.payload) : st[1] % len(self.payload) + 1])
                        st[1] += 1
                    except BlockingIOError:
                        pass
                    except OSError:
                        close(s)
                        continue
                    st[2] = now + self.every
        for s in state:
            s.close()
        sel.close()


def load(
    port: int,
    clients: int,
    seconds: float,
    keepalive: bool,
    timeout: float = 10.0,
    path: str = "/metrics",
    ctx: ssl.SSLContext | None = None,
) -> dict:
    lat: list[float] = []
    errors: list[str] = []
    retried = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    start = threading.Barrier(clients)

    def client() -> None:
        conn = None
        start.wait()
        while time.monotonic() < stop:
            t = time.monotonic()
            ok = False
            for attempt in (0, 1):
                reused = conn is not None
                try:
                    if conn is None:
                        conn = (
                            http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=ctx)
                            if ctx
                            else http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
                        )
                    conn.request("GET", path, headers={} if keepalive else {"Connection": "close"})
                    r = conn.getresponse()
                    r.read()
                    ok = r.status == 200
                    if not keepalive or r.will_close:
                        conn.close()
                        conn = None
                    break
                except (OSError, http.client.HTTPException) as e:
                    if conn is not None:
                        conn.close()
                        conn = None
                    # a kept connection the server closed as it was reused: sent again on a new
                    # one, as HTTP clients do (Go's, Prometheus'), once
                    if reused and attempt == 0 and not isinstance(e, TimeoutError):
                        with lock:
                            retried[0] += 1
                        continue
                    with lock:
                        errors.append(type(e).__name__)
                    break
            dt = time.monotonic() - t
            with lock:
                if ok:
                    lat.append(dt)
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(seconds + 2 * timeout + 5)
    return {
        "clients": clients,
        "keepalive": keepalive,
        "requests": len(lat),
        "errors": len(errors),
        "retried": retried[0],
        "timeouts": sum(1 for e in errors if "imeout" in e),
        "p50_s": round(pct(lat, 0.50), 4),
        "p99_s": round(pct(lat, 0.99), 4),
        "max_s": round(max(lat, default=float("nan")), 4),
    }


def tls_config(d: Path) -> tuple[ssl.SSLContext, Path]:
    """A throwaway certificate for 127.0.0.1 (the openssl CLI) in ``d`` and the web config serving
    it: (the client's context, the config's path). tests/web use it too."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "k.pem"]
        + ["-out", "c.pem", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        cwd=d,
        check=True,
        capture_output=True,
    )
    cfg = d / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {d / 'c.pem'}\n  key_file: {d / 'k.pem'}\n")
    return ssl.create_default_context(cafile=str(d / "c.pem")), cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--keepalive", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--exe", default=str(EXE))
    ap.add_argument("--slow", type=int, default=0, help="hostile connections sending a byte every --every seconds")
    ap.add_argument("--silent", type=int, default=0, help="hostile connections sending nothing")
    ap.add_argument("--every", type=float, default=5.0)
    ap.add_argument("--hostile-from", default="127.0.0.1", help="the loopback address the hostile connections come from")
    ap.add_argument("--tls", action="store_true", help="serve HTTPS (a throwaway certificate made with the openssl CLI)")
    a = ap.parse_args(argv)
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "demo.log"
        log.write_bytes(DEMO.read_bytes())
        err = open(Path(d) / "serve.err", "wb")  # noqa: SIM115
        extra, ctx = [], None
        if a.tls:
            ctx, cfg = tls_config(Path(d))
            extra = ["--web.config.file", str(cfg)]
        cmd = [a.exe, "serve", "--log", str(log), "--from-beginning", "--listen", f"127.0.0.1:{port}", *extra]
        proc = subprocess.Popen(cmd, stderr=err)
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    time.sleep(0.1)
            time.sleep(1.0)  # the demo log read
            most = [0]
            done = threading.Event()

            def threads() -> None:  # the exporter's thread count, sampled during the load
                while not done.wait(0.2):
                    try:
                        most[0] = max(most[0], len(os.listdir(f"/proc/{proc.pid}/task")))
                    except OSError:
                        return

            threading.Thread(target=threads, daemon=True).start()
            payload = client_hello() if a.tls else SLOW_HEAD
            with Hostile(port, a.slow, a.silent, a.every, payload, a.hostile_from) as hostile:
                if a.slow or a.silent:
                    time.sleep(a.every + 1.0)  # every hostile connection open and dribbling
                res = load(port, a.clients, a.seconds, a.keepalive, ctx=ctx)
                res["hostile_open"], res["hostile_reopened"] = hostile.open, hostile.reopened
            done.set()
            res["threads_max"] = most[0]
        finally:
            proc.terminate()
            proc.wait(10)
            err.close()
    print(json.dumps(res) if a.json else "  ".join(f"{k}={v}" for k, v in res.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
