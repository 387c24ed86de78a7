"""Restart safety with --positions: SIGTERM and SIGKILL mid-stream, rotation and truncation while
down, corrupt positions file. Exact counts over HTTP."""

from __future__ import annotations

import json
import os
import signal

import pytest
import test_serve_support as h


@pytest.fixture
def serve(tmp_path):
    started: list[h.Serve] = []

    def start(*args: str) -> h.Serve:
        s = h.Serve(tmp_path, *args)
        started.append(s)
        s.wait_up()
        return s

    yield start
    for s in started:
        s.kill()


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
