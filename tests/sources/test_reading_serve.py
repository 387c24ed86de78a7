"""The real `serve` against the real `replay`: the same bytes in a plain file, a Docker json-file
log, a CRI log with P/F splits of a >16 KiB server_args line, and on stdin, give the same
/metrics as `replay` gives for each file (self-metrics and process metrics aside)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import test_serve_support as h
from prometheus_client.parser import text_string_to_metric_families
from test_reading import SGLANG, encode

from exporter.catalogues import contract as C

SKIP = {m.name for m in C.SELF + C.PROCESS} | {m.family for m in C.SELF + C.PROCESS}


def log_samples(text: str, source: str) -> set[tuple]:
    """The samples of the log families for one source, without the source label."""
    out = set()
    for fam in text_string_to_metric_families(text):
        if fam.name in SKIP or not fam.name.startswith("hybrid_cache_"):
            continue
        for s in fam.samples:
            if s.labels.get("source") != source or s.name in SKIP:
                continue
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "source"))
            out.add((s.name, labels, s.value))
    return out


def test_serve_metrics_equal_replay_for_every_format_and_stdin(tmp_path) -> None:
    rnd = random.Random(11)
    files = {fmt: tmp_path / f"{fmt}.log" for fmt in ("plain", "docker", "cri")}
    for fmt, p in files.items():
        p.write_bytes(encode(SGLANG, fmt, rnd, 0.3))
    want = {}
    for fmt, p in files.items():
        r = subprocess.run(
            [sys.executable, "-m", "exporter", "replay", "--source", fmt, str(p)], cwd=h.ROOT, capture_output=True, timeout=120
        )
        assert r.returncode == 0, r.stderr
        want[fmt] = log_samples(r.stdout.decode(), fmt)
    assert want["plain"] and want["docker"] == want["plain"] and want["cri"] == want["plain"]
    total = sum(1 for _ in SGLANG.rstrip("\n").split("\n"))

    with open(files["cri"], "rb") as stdin:
        srv = h.Serve(
            tmp_path,
            *(a for fmt, p in files.items() for a in ("--log", f"{fmt}={p}")),
            "--log",
            "stdin=-",
            "--from-beginning",
            stdin=stdin,
        )
        try:
            srv.wait_up()
            for source in (*files, "stdin"):
                h.wait_for(lambda s=source: h.value(srv.metrics(), h.LINES, source=s) == total, what=f"all lines of {source}")
            # the lines waiting to be sampled are sampled once a source is quiet for 10 s (as replay
            # does at the end of its input): wait for that, then compare
            time.sleep(10.5)
            text = srv.metrics()
        finally:
            srv.stop()
    for source in (*files, "stdin"):
        assert log_samples(text, source) == want["plain"], source


def test_a_restart_resumes_at_the_first_record_of_an_unfinished_message(tmp_path) -> None:
    """Positions save the start of the unfinished message (the reader's pending bytes), not the end
    of the P records read so far: after a restart the message is read once, whole."""
    log = tmp_path / "cri.log"
    pos = tmp_path / "pos.json"
    t = "2026-08-14T08:17:30.123456789Z"
    with open(log, "w") as f:
        for i in range(20):
            f.write(f"{t} stderr F {h.decode_line(i)}\n")
    line = h.decode_line(20)
    h.fsync_append(log, f"{t} stderr P {line[:50]}\n{t} stderr P {line[50:120]}\n".encode())
    args = ("--log", str(log), "--from-beginning", "--positions", str(pos), "--positions-interval", "0.1")
    srv = h.Serve(tmp_path, *args)
    try:
        srv.wait_up()
        h.wait_for(lambda: h.value(srv.metrics(), h.DECODE) == 20, what="20 decode lines")
        want_offset = sum(len(f"{t} stderr F {h.decode_line(i)}\n".encode()) for i in range(20))

        def saved() -> int | None:
            try:
                return json.loads(pos.read_text())["files"][str(log)][-1]["offset"]
            except (OSError, ValueError, KeyError, IndexError):
                return None

        h.wait_for(lambda: saved() == want_offset, what="positions at the start of the P records")
    finally:
        assert srv.stop() == 0
    h.fsync_append(log, f"{t} stderr F {line[120:]}\n".encode())
    again = h.Serve(tmp_path, *args)
    try:
        again.wait_up()
        text = h.wait_count(again, 1)
        assert h.value(text, h.LINES, source="cri") == 1  # the joined line, no fragment
        assert h.value(text, h.LINES, source="cri", outcome="parsed") == 1
    finally:
        again.stop()
