"""Restart safety with --positions: SIGTERM and SIGKILL mid-stream, rotation and truncation while
down, corrupt positions file. Exact counts over HTTP."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import time

import pytest
import test_serve_support as h


def _positions(path):
    return json.loads(path.read_text())["files"]


def test_sigterm_then_rotation_while_down(serve, tmp_path):
    log, pos = tmp_path / "s.log", tmp_path / "pos.json"
    h.fsync_append(log, h.lines_blob(0, 300))
    args = ("--log", str(log), "--from-beginning", "--positions", str(pos))
    srv = serve(*args)
    h.wait_count(srv, 300)
    h.fsync_append(log, h.lines_blob(300, 40))  # maybe read, maybe not: positions decide
    assert srv.stop(signal.SIGTERM) == 0
    entry = _positions(pos)[str(log)][-1]
    assert entry["offset"] % 1 == 0
    already = h.count_lines_before(log, entry["offset"])
    assert already >= 300
    h.fsync_append(log, h.lines_blob(340, 60))  # unread, then rotated away while down
    os.rename(log, str(log) + ".1")
    h.fsync_append(log, h.lines_blob(400, 25))
    srv2 = serve(*args)
    text = h.wait_count(srv2, 400 - already + 25)
    assert h.value(text, "hybrid_cache_exporter_rotations_total") == 1


def test_sigkill_mid_stream_exact(serve, tmp_path):
    log, pos = tmp_path / "s.log", tmp_path / "pos.json"
    log.touch()
    args = ("--log", str(log), "--from-beginning", "--positions", str(pos), "--positions-interval", "0.1")
    srv = serve(*args)
    w = h.run_writer(log, "none", 4000, chunk=20)
    h.wait_for(lambda: pos.exists() and _positions(pos)[str(log)] and _positions(pos)[str(log)][-1]["offset"] > 0, what="positions")
    srv.stop(signal.SIGKILL)
    entry = _positions(pos)[str(log)][-1]
    w.communicate(timeout=60)
    with open(log, "rb") as f:
        data = f.read()
    assert data[entry["offset"] - 1 : entry["offset"]] == b"\n"  # a complete line boundary
    already = data[: entry["offset"]].count(b"\n")
    srv2 = serve(*args)
    h.wait_count(srv2, 4000 - already)


def test_truncated_while_down(serve, tmp_path):
    log, pos = tmp_path / "s.log", tmp_path / "pos.json"
    h.fsync_append(log, h.lines_blob(0, 200))
    args = ("--log", str(log), "--from-beginning", "--positions", str(pos))
    srv = serve(*args)
    h.wait_count(srv, 200)
    srv.stop()
    os.truncate(log, 0)
    h.fsync_append(log, h.lines_blob(1000, 30))
    srv2 = serve(*args)
    text = h.wait_count(srv2, 30)
    assert h.value(text, "hybrid_cache_exporter_truncations_total") == 1


def test_corrupt_positions_file(serve, tmp_path):
    log, pos = tmp_path / "s.log", tmp_path / "pos.json"
    h.fsync_append(log, h.lines_blob(0, 20))
    pos.write_bytes(b'{"version": 1, "files": {"\x00\x00')
    srv = serve("--log", str(log), "--from-beginning", "--positions", str(pos), "--positions-interval", "0.1")
    text = h.wait_count(srv, 20)
    assert h.value(text, "hybrid_cache_exporter_positions_corrupt_total") == 1

    def replaced() -> bool:
        try:  # until the first write the corrupt original is still there
            return _positions(pos).get(str(log), [{}])[-1].get("offset") == log.stat().st_size
        except ValueError:
            return False

    h.wait_for(replaced, what="positions replaced")
    assert "corrupt" in srv.stderr()


FACTS = (
    "hybrid_cache_server_info",
    "hybrid_cache_mamba_capacity_slots",
    "hybrid_cache_kv_capacity_tokens",
    "hybrid_cache_kv_capacity_bytes",
    "hybrid_cache_max_running_requests",
    "hybrid_cache_mamba_slots_per_request",
    "hybrid_cache_weights_bytes",
    "hybrid_cache_context_length_tokens",
    "hybrid_cache_mamba_state_bytes",
)


def _facts(text: str) -> list[str]:
    out = [ln for ln in text.splitlines() if ln.split("{")[0] in FACTS]
    out += [ln for ln in text.splitlines() if ln.startswith("hybrid_cache_finding{") and 'rule="mamba_capped"' in ln]
    return sorted(out)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_restart_keeps_startup_facts(serve, tmp_path, sig):
    """A restart with --positions after the boot section was rotated away (compressed) keeps
    capacity, caps, server_info and the mamba_capped finding: they are in the first scrape."""
    log, pos = tmp_path / "s.log", tmp_path / "pos.json"
    log.write_bytes((h.ROOT / "fixtures" / "demo" / "sglang-mamba-bound.log").read_bytes())
    args = ("--log", str(log), "--from-beginning", "--positions", str(pos), "--positions-interval", "0.1")
    srv = serve(*args)
    lines = log.read_bytes().count(b"\n")
    h.wait_for(lambda: h.value(srv.metrics(), h.LINES) == lines and h.value(srv.metrics(), "hybrid_cache_exporter_read_lag_bytes") == 0)
    before = _facts(srv.metrics())
    assert any('rule="mamba_capped"' in ln and ln.endswith(" 1.0") for ln in before), before
    assert any(ln.startswith("hybrid_cache_server_info{") for ln in before)
    time.sleep(0.3)  # a positions write after the last line (SIGKILL leaves no final write)
    srv.stop(sig)
    # while down: the server rotates, the boot section ends up compressed, new lines follow
    os.rename(log, str(log) + ".1")
    with open(str(log) + ".1", "rb") as f, gzip.open(str(log) + ".1.gz", "wb") as g:
        g.write(f.read())
    os.unlink(str(log) + ".1")
    h.fsync_append(log, h.lines_blob(0, 5))
    srv2 = serve(*args)
    first = srv2.metrics()  # the first scrape after the restart
    assert _facts(first) == before
    text = h.wait_count(srv2, 5)
    assert _facts(text) == before
    assert h.value(text, h.LINES) == 5  # counters restart at 0: the boot lines were not read again


HOSTILE = {
    "huge-ints": lambda e: {**e, "dev": 10**40, "ino": 2**64},
    "fp-len-2-62": lambda e: {**e, "fp_len": 2**62},
    "offset-2-70": lambda e: {**e, "offset": 2**70},
    "negative": lambda e: {**e, "offset": -5},
    "float": lambda e: {**e, "offset": 1e300},
    "fp-not-hex": lambda e: {**e, "fp": "../../etc/passwd"},
    "bool": lambda e: {**e, "done": "yes"},
}


@pytest.mark.parametrize("kind", [*HOSTILE, "nested", "huge-file", "bad-state", "bad-seen"])
def test_hostile_positions_file(serve, tmp_path, kind):
    """A hostile or damaged positions file is reported, replaced, and never stops the process or
    its tailing thread: every line is read, /healthz stays 200, later lines are read too."""
    log, pos = tmp_path / "s.log", tmp_path / "pos.json"
    h.fsync_append(log, h.lines_blob(0, 40))
    st = log.stat()
    good = {"dev": st.st_dev, "ino": st.st_ino, "fp": "0" * 40, "fp_len": 256, "offset": 10}
    if kind == "nested":
        pos.write_text('{"version": 1, "files": ' + "[" * 200_000 + "]" * 200_000 + "}")
    elif kind == "huge-file":
        pos.write_text('{"version": 1, "files": {}, "x": "' + "a" * (65 << 20) + '"}')
    elif kind == "bad-seen":
        pos.write_text(json.dumps({"version": 1, "files": {str(log): [good]}, "seen": {str(log): [[2**70, -1]]}}))
    elif kind == "bad-state":
        pos.write_text(
            json.dumps(
                {
                    "version": 1,
                    "files": {},
                    "state": {"s": {"engine": "sglang", "year": 2026, "servers": {"0": {"capacity": {"x": "nan"}}}}},
                }
            )
        )
    else:
        pos.write_text(json.dumps({"version": 1, "files": {str(log): [HOSTILE[kind](good)]}}))
    srv = serve("--log", str(log), "--from-beginning", "--positions", str(pos), "--positions-interval", "0.1")
    text = h.wait_count(srv, 40)
    assert h.value(text, "hybrid_cache_exporter_positions_corrupt_total") == 1
    h.fsync_append(log, h.lines_blob(40, 10))
    h.wait_count(srv, 50)
    assert srv.get("/healthz")[0] == 200
    h.wait_for(lambda: _positions(pos)[str(log)][-1]["offset"] == log.stat().st_size, what="positions replaced")


def test_offset_beyond_the_file(serve, tmp_path):
    """A well-formed entry for the right file whose offset lies past its end (the file was cut
    while down): read from the start, nothing skipped."""
    log, pos = tmp_path / "s.log", tmp_path / "pos.json"
    h.fsync_append(log, h.lines_blob(0, 30))
    data = log.read_bytes()
    st = log.stat()
    entry = {"dev": st.st_dev, "ino": st.st_ino, "fp": hashlib.sha1(data[:256]).hexdigest(), "fp_len": 256, "offset": 10**15}
    pos.write_text(json.dumps({"version": 1, "files": {str(log): [entry]}}))
    srv = serve("--log", str(log), "--positions", str(pos))
    text = h.wait_count(srv, 30)
    assert h.value(text, "hybrid_cache_exporter_truncations_total") == 1
