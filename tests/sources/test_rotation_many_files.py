"""serve on a glob of 2,000 files under a descriptor limit of 512 (soft = hard): every line is
counted, /healthz answers throughout, and the idle process costs next to no CPU (directory work
follows file events, not files x siblings); on 1,100 files with the limit raised, the process
holds more than 1,024 descriptors and every scrape is answered (issue 31: ``select()`` refused
descriptors past 1,023, and the exporter answered nothing). The figures are in
docs/reliability.md."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import subprocess
import time
import urllib.request

import pytest
import test_serve_support as h

from exporter.state.pipeline import IDLE_SAMPLE_SECONDS

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


def _fds(pid: int) -> set[int]:
    return {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}


def _server_fd(pid: int, port: int, client: socket.socket) -> int | None:
    """The exporter's descriptor of the connection whose client end is ``client`` (by the
    socket's inode in /proc/net/tcp), None until it was accepted."""
    peer = client.getsockname()[1]
    inode = None
    with open("/proc/net/tcp") as f:
        for row in f.read().splitlines()[1:]:
            cols = row.split()
            if int(cols[1].split(":")[1], 16) == port and int(cols[2].split(":")[1], 16) == peer:
                inode = cols[9]
    for fd in _fds(pid):
        with contextlib.suppress(OSError):
            if inode and os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                return fd
    return None


def test_past_1024_descriptors_every_scrape_is_answered(tmp_path):
    """1,100 files in one glob with RLIMIT_NOFILE raised to 4,096: every file open, and the few
    free descriptor numbers below 1,024 taken by connections held open, so the scrapes' connections
    have numbers past 1,023. /healthz, /readyz and /metrics answer each time, every line is
    counted, and the HTTP side counts no error (before: ``select()`` raised on each and the
    exporter gave an empty reply to every request, nothing logged)."""
    n, nofile = 1100, 4096
    d = tmp_path / "logs"
    d.mkdir()
    for i in range(n):
        (d / f"s{i:04d}.log").write_bytes(h.lines_blob(i, 2))
    srv = h.Serve(
        tmp_path, "--log", str(d / "*.log"), "--from-beginning", "--log-level", "warning", prefix=("prlimit", f"--nofile={nofile}")
    )
    srv.scrape_timeout = 60.0  # a scrape of 1,100 sources: ~1 s alone, more beside the parallel pass
    held: list[socket.socket] = []
    try:
        srv.wait_up(timeout=60)
        h.wait_count(srv, 2 * n, timeout=90, every=1.0)
        pid = srv.proc.pid
        assert len(_fds(pid)) > 1024
        free = [i for i in range(1024) if i not in _fds(pid)]
        for _ in range(len(free) + 2):  # silent connections fill the numbers below 1,024
            held.append(socket.create_connection(("127.0.0.1", srv.port), timeout=60))
        h.wait_for(lambda: all(_server_fd(pid, srv.port, c) is not None for c in held), what="the held connections accepted")
        with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as c:
            h.wait_for(lambda: _server_fd(pid, srv.port, c) is not None, what="the scrape's connection accepted")
            assert _server_fd(pid, srv.port, c) >= 1024
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := c.recv(65536):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200"), answer
        for path in ("/healthz", "/readyz", "/metrics"):
            code, body = srv.get(path)
            assert code == 200, (path, body[:200])
        text = srv.metrics()
        assert h.value(text, h.DECODE) == 2 * n
        assert h.value(text, "hybrid_cache_exporter_http_errors_total") == 0, srv.stderr()
        assert "Traceback" not in srv.stderr()
    finally:
        for c in held:
            c.close()
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
