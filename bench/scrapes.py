#!/usr/bin/env python3
"""Concurrent scrapers against a real ``serve``: the latency of /metrics under load.

    python bench/scrapes.py --clients 50 --seconds 20
    python bench/scrapes.py --clients 200 --seconds 20 --keepalive

Starts ``serve`` on the demo log (read whole, so /metrics is a real exposition of ~300 series),
then runs N client threads that scrape /metrics back to back for the given time, each request on a
new connection (``--keepalive``: one persistent connection per client, as Prometheus keeps them),
with Prometheus' default scrape timeout (10 s) as the client timeout. Prints the count, p50, p99,
max and timeouts; ``--json`` prints them as one JSON object. docs/reliability.md quotes the figures.
Used by tests/web/test_web_load.py with small numbers.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
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


def load(port: int, clients: int, seconds: float, keepalive: bool, timeout: float = 10.0, path: str = "/metrics") -> dict:
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
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--keepalive", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--exe", default=str(EXE))
    a = ap.parse_args(argv)
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "demo.log"
        log.write_bytes(DEMO.read_bytes())
        err = open(Path(d) / "serve.err", "wb")  # noqa: SIM115
        proc = subprocess.Popen([a.exe, "serve", "--log", str(log), "--from-beginning", "--listen", f"127.0.0.1:{port}"], stderr=err)
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
            res = load(port, a.clients, a.seconds, a.keepalive)
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
