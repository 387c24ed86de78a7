"""serve on a glob of 2,000 files under a descriptor limit of 512 (soft = hard): every line is
counted, /healthz answers throughout, and the idle process costs next to no CPU (directory work
follows file events, not files x siblings). The figures are in docs/reliability.md."""

from __future__ import annotations

import os
import resource
import subprocess
import time
import urllib.request

import pytest
import test_serve_support as h

from exporter.pipeline import IDLE_SAMPLE_SECONDS

N_FILES = 2000
LINES_EACH = 10
NOFILE = 512


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def test_two_thousand_files(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    for i in range(N_FILES):
        (d / f"s{i:04d}.log").touch()
    port = h.free_port()
    err = open(tmp_path / "serve.err", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [str(h.EXE), "serve", "--listen", f"127.0.0.1:{port}", "--log", str(d / "*.log"), "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=err,
        preexec_fn=_limit_fds,
    )
    srv = h.Serve.__new__(h.Serve)
    srv.port, srv.proc, srv.err, srv.err_path, srv.base = port, proc, err, tmp_path / "serve.err", f"http://127.0.0.1:{port}"
    # the parallel pass: a scrape of 2,000 sources takes ~1.5 s alone and more than 5 s beside
    # three busy workers; no bound on the scrape's time is asserted here (the idle CPU is the process's own)
    srv.scrape_timeout = 60.0
    try:
        srv.wait_up(timeout=60)
        h.wait_for(lambda: srv.get("/readyz")[0] == 200, timeout=60, what="ready")
        h.wait_for(lambda: h.value(srv.metrics(), "hybrid_cache_exporter_source_up") == N_FILES, timeout=60, what="all files open")
        t0 = time.monotonic()
        for i in range(N_FILES):
            with open(d / f"s{i:04d}.log", "ab") as f:
                f.write(h.lines_blob(i, LINES_EACH))
        # a scrape of 2,000 sources takes ~1.5 s here: polled every 2 s, not back to back (the
        # ingest figure is the exporter's, not the scrapes')
        h.wait_count(srv, N_FILES * LINES_EACH, timeout=90, every=2.0)
        ingest = time.monotonic() - t0
        text = srv.metrics()
        assert h.value(text, "hybrid_cache_exporter_source_errors_total") == 0
        assert h.value(text, "hybrid_cache_exporter_open_files") <= NOFILE
        with urllib.request.urlopen(srv.base + "/healthz", timeout=5) as r:
            assert r.status == 200
        # idle: nothing written; the quiet sources' pending samples are committed 10 s after their
        # last line (IDLE_SAMPLE_SECONDS), then nothing is left to do
        time.sleep(IDLE_SAMPLE_SECONDS + 1.0)
        c0, w0 = _cpu_seconds(proc.pid), time.monotonic()
        time.sleep(6.0)
        idle = (_cpu_seconds(proc.pid) - c0) / (time.monotonic() - w0)
        rss = h.value(srv.metrics(), "process_resident_memory_bytes")
        print(
            f"\n2,000 files: ingest of {N_FILES * LINES_EACH} lines {ingest:.1f}s, idle CPU {idle * 100:.2f}% of a core, RSS {rss / 2**20:.0f} MiB"
        )
        assert idle <= 0.05  # measured ~0.5%; a loose bound so that a loaded machine does not fail it
    finally:
        srv.kill()


def test_soft_descriptor_limit_raised_to_hard(tmp_path):
    """A soft RLIMIT_NOFILE below the hard one (the usual 1024 / 1M of container runtimes) is
    raised at start: process_max_fds reports the hard limit."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.skip("needs a finite hard limit above 256")
    log = tmp_path / "s.log"
    log.touch()
    port = h.free_port()
    proc = subprocess.Popen(
        [str(h.EXE), "serve", "--listen", f"127.0.0.1:{port}", "--log", str(log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)),
    )
    srv = h.Serve.__new__(h.Serve)
    srv.port, srv.proc, srv.base = port, proc, f"http://127.0.0.1:{port}"
    srv.err_path = tmp_path / "none"
    srv.err_path.touch()
    srv.err = open(srv.err_path, "wb")  # noqa: SIM115
    try:
        srv.wait_up()
        h.wait_for(lambda: h.value(srv.metrics(), "process_max_fds") == hard, what="soft limit raised")
    finally:
        srv.kill()
