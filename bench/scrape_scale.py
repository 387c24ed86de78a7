#!/usr/bin/env python3
"""One scrape of many sources: what ``/metrics`` and the status page cost at 100 to 10,000 sources.

    python bench/scrape_scale.py                              # 100, 1,000, 10,000 sources, this tree
    python bench/scrape_scale.py --before 8cfd030 --runs 5    # and the tree of that revision, interleaved
    python bench/scrape_scale.py --sizes 1000 --profile       # cProfile of one scrape (top 25)

Each size is one child process per tree (``git archive`` of ``--before`` in a temporary directory;
the C scanner copied in when its source is the same): the sources are built by feeding a pipeline
(rules, recommendations, history: ``new_pipeline`` as ``serve`` makes it), each source one fixture
log (fixtures/sglang, vllm, scenarios in turn: capacity, configuration, findings, recommendations),
then the registry ``serve`` builds (the log's collector, the self-metrics of as many tailers, the
process collector) behind ``identity.Labelled`` with DaemonSet labels (namespace, pod, container)
for every source, and the scrape is timed as ``/metrics`` makes it: the encoder ``choose_encoder``
picks for a request without ``Accept`` (text 0.0.4), through ``exporter.exposition.text.encode`` where
the tree has it, else the encoder itself. Then gzip (what Prometheus asks for) and the status page
(``/`` and ``status.json``).

Per scrape: wall and CPU seconds of the thread (median of ``--runs``), the garbage collector's
share, the body's size and series; once, under tracemalloc, the peak of memory the scrape
allocated. Load: ``os.getloadavg()`` before and after each child. docs/performance.md ("Scrapes
of many sources") quotes the figures.
"""

from __future__ import annotations

import argparse
import filecmp
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_DIRS = ("sglang", "vllm", "scenarios")


class Tailer:
    """What the self-metrics read of a tailer (exporter/exposition/selfmetrics.py)."""

    def __init__(self, source: str, i: int) -> None:
        self.source, self.read_bytes, self.rotations, self.truncations = source, 4096.0 * i, 0, 0
        self.overlong, self.errors, self.recovered_lines, self.up, self.mtime = 0, 0, 0, True, 1.7e9 + i

    def lag(self) -> int:
        return 0

    def open_files(self) -> int:
        return 1


class TimedLock:
    """The pipeline's lock, recording how long each hold lasted (the tailers wait that long)."""

    def __init__(self, lock) -> None:
        self.lock, self.holds, self._at = lock, [], []

    def acquire(self, *a, **kw) -> bool:
        got = self.lock.acquire(*a, **kw)
        if got:
            self._at.append(time.perf_counter())
        return got

    def release(self) -> None:
        self.holds.append(time.perf_counter() - self._at.pop())
        self.lock.release()

    __enter__ = acquire

    def __exit__(self, *exc) -> None:
        self.release()


def child(n: int, runs: int, profile: bool) -> dict:
    """Build ``n`` sources in this process (the tree on sys.path) and time what it answers."""
    import tracemalloc

    from prometheus_client import CollectorRegistry, ProcessCollector

    from exporter.app import new_pipeline
    from exporter.diagnosis.history import History
    from exporter.exposition import connections
    from exporter.exposition.collector import HybridCacheCollector
    from exporter.exposition.identity import Labelled
    from exporter.exposition.selfmetrics import SelfCollector
    from exporter.exposition.web import App, Handler
    from exporter.exposition.webconfig import WebConfig
    from exporter.presentation.status import StatusPages

    logs = sorted(p for d in FIXTURE_DIRS for p in (ROOT / "fixtures" / d).glob("*.log"))
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in logs]
    history = History()
    pipe = new_pipeline(history=history)
    t0 = time.monotonic()
    names = [f"ns{i % 97}_pod-{i:05d}_{i:08x}/server" for i in range(n)]
    for i, name in enumerate(names):
        pipe.feed_text(name, texts[i % len(texts)])
    pipe.finish()
    fed = time.monotonic() - t0
    tailers = [Tailer(name, i) for i, name in enumerate(names)]
    reg = CollectorRegistry(auto_describe=False)
    reg.register(HybridCacheCollector(pipe))
    reg.register(SelfCollector(lambda: tailers, None, over_limit=lambda: 0, http=list))
    ProcessCollector(registry=reg)
    pods = {name: {"namespace": f"ns{i % 97}", "pod": f"pod-{i:05d}", "container": "server"} for i, name in enumerate(names)}
    app = App(Labelled(reg, {}, lambda: pods), lambda: (True, []), list, WebConfig(), status=StatusPages(pipe, history))
    handler = type("BenchHandler", (Handler,), {"app": app, "stats": connections.Stats()})
    lock = pipe.lock = TimedLock(pipe.lock)

    def get(path: str, *headers: str) -> bytes:
        head = "".join(f"{h}\r\n" for h in (f"GET {path} HTTP/1.1", "Host: bench", *headers)) + "\r\n"
        answer, _ = handler.answer(head.encode(), ("127.0.0.1", 1))
        status, body = answer.split(b"\r\n\r\n", 1)
        assert status.startswith(b"HTTP/1.1 200"), status[:200]
        return body

    gc_time = [0.0, 0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_time[1] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_time[1]

    def timed(path: str, *headers: str) -> dict:
        walls, cpus, gcs, holds = [], [], [], []
        body = b""
        for _ in range(runs):
            gc_time[0], lock.holds = 0.0, []
            w, c = time.perf_counter(), time.thread_time()
            body = get(path, *headers)
            cpus.append(time.thread_time() - c)
            walls.append(time.perf_counter() - w)
            gcs.append(gc_time[0])
            holds.append(max(lock.holds, default=0.0))
        tracemalloc.start()
        get(path, *headers)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return {
            "wall_s": round(statistics.median(walls), 3),
            "cpu_s": round(statistics.median(cpus), 3),
            "cpu_all_s": [round(x, 3) for x in cpus],
            "gc_s": round(statistics.median(gcs), 3),
            "lock_s": round(statistics.median(holds), 3),
            "peak_alloc_mib": round(peak / 2**20, 1),
            "mb": round(len(body) / 1e6, 2),
            "body": body,
        }

    gc.callbacks.append(on_gc)
    plain = timed("/metrics")
    zipped = timed("/metrics", "Accept-Encoding: gzip")
    page = timed("/")
    refresh = timed("/status.json")
    gc.callbacks.remove(on_gc)
    series = sum(1 for ln in plain.pop("body").splitlines() if ln and not ln.startswith(b"#"))
    for r in (zipped, page, refresh):
        del r["body"]
    out = {
        "sources": n,
        "series": series,
        "metrics": plain,
        "metrics_gzip": zipped,
        "page": page,
        "status_json": refresh,
        "feed_s": round(fed, 1),
    }
    if profile:
        import cProfile
        import pstats

        pr = cProfile.Profile()
        pr.enable()
        get("/metrics", "Accept-Encoding: gzip")
        pr.disable()
        pstats.Stats(pr, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
    return out


def tree_of(rev: str, into: Path) -> Path:
    """The tree of ``rev`` (git archive), with this tree's C scanner when its source is the same."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    if filecmp.cmp(ROOT / "exporter" / "_scan.c", into / "exporter" / "_scan.c", shallow=False):
        for so in (ROOT / "exporter").glob("_scan*.so"):
            shutil.copy2(so, into / "exporter" / so.name)
    return into


def run_child(tree: Path, n: int, runs: int, profile: bool) -> dict:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tree)}
    load0 = os.getloadavg()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(n), "--runs", str(runs), "--tree", str(tree)]
    r = subprocess.run(cmd + (["--profile"] if profile else []), env=env, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"child failed ({tree}, {n} sources):\n{r.stderr[-4000:]}")
    if profile:
        print(r.stderr, file=sys.stderr)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["load"] = [round(x, 1) for x in load0] + [round(x, 1) for x in os.getloadavg()]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000", help="numbers of sources, comma-separated")
    ap.add_argument("--runs", type=int, default=5, help="scrapes per size (the median is reported)")
    ap.add_argument("--before", help="a git revision to measure too (e.g. 8cfd030: before the change)")
    ap.add_argument("--profile", action="store_true", help="cProfile of one scrape per size, on stderr")
    ap.add_argument("--json", action="store_true", help="one JSON object per line instead of the table")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        sys.path.insert(0, a.tree)
        print(json.dumps(child(a.child, a.runs, a.profile)))
        return 0
    trees = [("after", ROOT)]
    tmp = Path(tempfile.mkdtemp(prefix="hce-scrape-scale-"))
    try:
        if a.before:
            trees.insert(0, (f"before ({a.before})", tree_of(a.before, tmp / "before")))
        for n in (int(x) for x in a.sizes.split(",")):
            for label, tree in trees:
                r = {"tree": label, **run_child(tree, n, a.runs, a.profile)}
                if a.json:
                    print(json.dumps(r), flush=True)
                else:
                    m, z, pg, js = r["metrics"], r["metrics_gzip"], r["page"], r["status_json"]
                    print(
                        f"{label:>18} {r['sources']:>6} sources {r['series']:>7} series: /metrics {m['mb']} MB "
                        f"{m['wall_s']:.3f} s wall {m['cpu_s']:.3f} s CPU (gc {m['gc_s']:.3f}, lock {m['lock_s']:.3f}, "
                        f"peak {m['peak_alloc_mib']} MiB); gzip {z['mb']} MB {z['wall_s']:.3f} s wall {z['cpu_s']:.3f} s CPU "
                        f"(peak {z['peak_alloc_mib']} MiB); / {pg['mb']} MB {pg['cpu_s']:.3f} s CPU (lock {pg['lock_s']:.3f}); "
                        f"status.json {js['cpu_s']:.3f} s CPU (lock {js['lock_s']:.3f}); load {r['load']}",
                        flush=True,
                    )
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
