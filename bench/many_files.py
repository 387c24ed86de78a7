#!/usr/bin/env python3
"""serve on a glob of many files: the time to count lines written to all of them, and the idle CPU.

    python bench/many_files.py --files 2000 --lines 10 [--nofile 512] [--runs 3]
    python bench/many_files.py --files 10000 --lines 10 --nofile 20000

The real ``serve`` service (exporter.serve.Service: tailers, pipeline, rules, HTTP) in this
process, so that the count is read from its state every 10 ms instead of through scrapes (a scrape
of 2,000 sources is a 4.6 MB exposition: scraping back to back would measure the scrapes). Each
file gets ``--lines`` decode lines at once; then the process sits idle and the CPU of each of its
threads is read from /proc for 10 s; last, /healthz, /readyz, /metrics (as is and gzipped) and the
status page are fetched over HTTP (answered, the slowest of each, the descriptors the process
holds, RSS before and after). tests/sources/test_rotation_many_files.py runs the same as a
subprocess; docs/reliability.md quotes these figures (bench/scrape_scale.py: the scrape alone).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import test_serve_support as h  # noqa: E402

from exporter.serve import ServeConfig, Service  # noqa: E402
from exporter.state.pipeline import IDLE_SAMPLE_SECONDS  # noqa: E402


def _cpu(tid: int) -> float:
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss() -> float:
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) / 1024


def run(files: int, lines: int) -> dict:
    d = Path(tempfile.mkdtemp(prefix="hce-many-"))
    try:
        for i in range(files):
            (d / f"s{i:05d}.log").touch()
        svc = Service(ServeConfig(listen=f"127.0.0.1:{h.free_port()}", files=[(None, str(d / "*.log"))]))
        svc.start()
        try:
            deadline = time.monotonic() + 120
            while sum(1 for t in svc.manager.snapshot() if t.active is not None) < files and time.monotonic() < deadline:
                time.sleep(0.05)

            def counted() -> int:
                with svc.pipe.lock:
                    return sum(sum(s.lines.values()) for s in svc.pipe.sources.values())

            t0 = time.monotonic()
            for i in range(files):
                with open(d / f"s{i:05d}.log", "ab") as f:
                    f.write(h.lines_blob(i, lines))
            written = time.monotonic() - t0
            while counted() < files * lines and time.monotonic() < deadline:
                time.sleep(0.01)
            ingest = time.monotonic() - t0
            # the pending samples of quiet sources are committed 10 s after their last line (the
            # ingest tick, IDLE_SAMPLE_SECONDS): idle is measured after that, over 10 s
            time.sleep(IDLE_SAMPLE_SECONDS + 2.0)
            threads = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
            c0, w0 = {t: _cpu(t) for t in threads}, time.monotonic()
            time.sleep(10.0)
            wall = time.monotonic() - w0
            per = {}
            for tid, name in threads.items():
                with contextlib.suppress(OSError):
                    per[name] = per.get(name, 0.0) + (_cpu(tid) - c0[tid]) / wall * 100
            rss = _rss()
            scrapes = _scrapes(svc.server.server_address[1])
            return {
                "files": files,
                "lines": files * lines,
                "counted": counted(),
                "descriptors": len(os.listdir("/proc/self/fd")),
                **scrapes,
                "written_s": round(written, 2),
                "ingest_s": round(ingest, 2),
                "idle_cpu_pct": round(sum(per.values()), 2),
                "idle_by_thread_pct": {k: round(v, 2) for k, v in sorted(per.items()) if v > 0},
                "open_files": sum(t.open_files() for t in svc.manager.snapshot()),
                "rss_mib": round(rss),
                "rss_after_scrapes_mib": round(_rss()),
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            }
        finally:
            svc.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _scrapes(port: int) -> dict:
    """/healthz 20 times, /readyz 3 times, /metrics 3 times as is and 3 times with gzip accepted
    (as Prometheus asks), the status page once, each on a new connection (its descriptor number
    past every file's): how many were answered 200, and the slowest of each."""
    answered, worst = 0, {}
    paths = [("/healthz", {})] * 20 + [("/readyz", {})] * 3 + [("/metrics", {})] * 3
    paths += [("/metrics", {"Accept-Encoding": "gzip"})] * 3 + [("/", {})]
    for path, headers in paths:
        t = time.monotonic()
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
        with contextlib.suppress(OSError), urllib.request.urlopen(req, timeout=60) as r:
            r.read()
            answered += r.status == 200
        key = "metrics_gzip" if headers else {"/": "status_page"}.get(path, path.strip("/"))
        worst[key] = max(worst.get(key, 0.0), time.monotonic() - t)
    return {"scrapes_answered": f"{answered}/{len(paths)}", **{f"{k}_s": round(v, 2) for k, v in worst.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--lines", type=int, default=10)
    ap.add_argument("--nofile", type=int, default=0, help="RLIMIT_NOFILE (soft = hard) for the run, e.g. 512; 0 = as is")
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args(argv)
    if a.nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (a.nofile, a.nofile))
    for _ in range(a.runs):
        print(json.dumps(run(a.files, a.lines)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
