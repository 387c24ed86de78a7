"""serve against real writers: rotations, truncation, split lines, deletion, globs, stdin, container
formats. Every assertion is an exact count read over HTTP from /metrics."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest
import test_serve_support as h

MODES = [pytest.param([], id="inotify"), pytest.param(["--poll-interval", "0.05"], id="poll")]


@pytest.mark.parametrize("mode", MODES)
def test_rename_rotation_full_speed(serve, tmp_path, mode):
    log = tmp_path / "server.log"
    log.touch()
    srv = serve("--log", str(log), "--from-beginning", *mode)
    w = h.run_writer(log, "rename", 6000, chunk=250)
    out, _ = w.communicate(timeout=60)
    assert int(out) == 6000
    text = h.wait_count(srv, 6000)
    assert h.value(text, "hybrid_cache_exporter_rotations_total", source="server") >= 1
    assert h.value(text, h.LINES, source="server", outcome="parsed") == 6000


@pytest.mark.parametrize("mode", MODES)
def test_copytruncate_full_speed(serve, tmp_path, mode):
    log = tmp_path / "server.log"
    log.touch()
    srv = serve("--log", str(log), "--from-beginning", *mode)
    w = h.run_writer(log, "copytruncate", 6000, chunk=250)
    out, _ = w.communicate(timeout=60)
    assert int(out) == 6000
    text = h.wait_count(srv, 6000)
    assert h.value(text, "hybrid_cache_exporter_truncations_total", source="server") >= 1
    assert h.value(text, "hybrid_cache_exporter_rotations_total", source="server") == 0


def test_split_line_truncation_and_fixed_lines(serve, tmp_path):
    log = tmp_path / "s.log"
    h.fsync_append(log, h.lines_blob(0, 500, fixed=True))
    srv = serve("--log", str(log), "--from-beginning")
    h.wait_count(srv, 500)
    # a split line: half, flush, pause, the rest
    line = h.FIXED.encode()
    h.fsync_append(log, line[:70])
    h.wait_for(
        lambda: h.value(srv.metrics(), "hybrid_cache_exporter_read_bytes_total") >= 500 * (len(line) + 1) + 70, what="half line read"
    )
    time.sleep(0.2)
    assert h.value(srv.metrics(), h.DECODE) == 500  # not counted before its newline
    h.fsync_append(log, line[70:] + b"\n")
    h.wait_count(srv, 501)
    # truncation (: > file), then fewer bytes than before
    with open(log, "wb"):
        pass
    h.fsync_append(log, h.lines_blob(0, 30, fixed=True))
    text = h.wait_count(srv, 531)
    assert h.value(text, "hybrid_cache_exporter_truncations_total") == 1


def test_truncate_and_regrow_past_offset(serve, tmp_path):
    """Truncated and rewritten beyond the old offset before the exporter looked: the first bytes
    changed, so it starts again at 0 instead of resuming in the middle of the new content."""
    log = tmp_path / "s.log"
    h.fsync_append(log, h.lines_blob(0, 100))
    srv = serve("--log", str(log), "--from-beginning", "--poll-interval", "0.5")
    h.wait_count(srv, 100)
    tmp = tmp_path / "new"
    tmp.write_bytes(h.lines_blob(5000, 300))
    with open(log, "r+b") as f:  # same inode, new content, longer than before
        f.truncate(0)
        f.write(tmp.read_bytes())
    text = h.wait_count(srv, 400)
    assert h.value(text, "hybrid_cache_exporter_truncations_total") == 1


def test_delete_recreate_and_missing_file(serve, tmp_path):
    log = tmp_path / "later" / "s.log"
    srv = serve("--log", f"eng0={log}")
    code, body = srv.get("/readyz")
    assert code == 200, body  # waiting for a file is expected
    text = srv.metrics()
    assert h.value(text, "hybrid_cache_exporter_source_up", source="eng0") == 0
    log.parent.mkdir()
    h.fsync_append(log, h.lines_blob(0, 200))  # appeared after start: read from its start
    h.wait_count(srv, 200, source="eng0")
    os.unlink(log)
    h.fsync_append(log, h.lines_blob(200, 150))
    text = h.wait_count(srv, 350, source="eng0")
    assert h.value(text, "hybrid_cache_exporter_source_up", source="eng0") == 1
    assert h.value(text, "hybrid_cache_exporter_rotations_total", source="eng0") == 1
    assert srv.stderr().count("does not exist") == 1  # logged once, not per poll


def test_default_starts_at_end(serve, tmp_path):
    log = tmp_path / "s.log"
    h.fsync_append(log, h.lines_blob(0, 100))
    srv = serve("--log", str(log))
    h.wait_for(lambda: "open" in srv.get("/")[1], what="file opened")
    h.fsync_append(log, h.lines_blob(100, 7))
    text = h.wait_count(srv, 7)
    assert h.value(text, "hybrid_cache_exporter_file_modified_timestamp_seconds", source="s") == pytest.approx(
        os.stat(log).st_mtime, abs=0.01
    )


def test_glob_picks_up_new_files(serve, tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    h.fsync_append(d / "a.log", h.lines_blob(0, 10))
    srv = serve("--log", str(d / "*.log"), "--from-beginning")
    h.wait_count(srv, 10, source="a")
    h.fsync_append(d / "b.log", h.lines_blob(0, 20))  # appears later
    h.wait_count(srv, 20, source="b")
    # rename rotation of a.log: a.log.1 does not match the glob, a new a.log is read from 0
    os.rename(d / "a.log", d / "a.log.1")
    h.fsync_append(d / "a.log", h.lines_blob(0, 5))
    text = h.wait_count(srv, 35)
    assert h.value(text, h.DECODE, source="a") == 15


def test_glob_skips_rotated_names(serve, tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    h.fsync_append(d / "x.log", h.lines_blob(0, 10))
    srv = serve("--log", str(d / "x.log*"), "--from-beginning")
    h.wait_count(srv, 10)
    os.rename(d / "x.log", d / "x.log.1")  # matches the glob, but is the rotated x.log
    h.fsync_append(d / "x.log", h.lines_blob(10, 4))
    h.wait_count(srv, 14)


def test_stdin_pipe(serve, tmp_path):
    srv = serve("--log", "-", stdin=subprocess.PIPE)
    p = srv.proc.stdin
    p.write(h.lines_blob(0, 300))
    line = h.decode_line(7).encode()
    p.write(line[:50])
    p.flush()
    h.wait_count(srv, 300, source="stdin")
    p.write(line[50:] + b"\n")
    p.write(h.lines_blob(0, 99))
    p.close()
    text = h.wait_count(srv, 400, source="stdin")
    h.wait_for(lambda: h.value(srv.metrics(), "hybrid_cache_exporter_source_up", source="stdin") == 0, what="stdin EOF")
    assert h.value(text, h.DECODE) == 400
    assert srv.proc.poll() is None  # keeps serving after EOF


def test_container_formats(serve, tmp_path):
    docker = tmp_path / "docker.log"
    cri = tmp_path / "cri.log"
    with open(docker, "w") as f:
        for i in range(40):
            line = h.decode_line(i)
            if i % 10 == 3:  # split by the json-file driver
                f.write(json.dumps({"log": line[:60], "stream": "stderr", "time": "2026-08-14T08:17:30.1Z"}) + "\n")
                f.write(json.dumps({"log": line[60:] + "\n", "stream": "stderr", "time": "2026-08-14T08:17:30.1Z"}) + "\n")
            else:
                f.write(json.dumps({"log": line + "\n", "stream": "stderr", "time": "2026-08-14T08:17:30.1Z"}) + "\n")
    with open(cri, "w") as f:
        for i in range(30):
            line = h.decode_line(i)
            if i % 5 == 0:
                f.write(f"2026-08-14T08:17:30.123456789Z stderr P {line[:40]}\n")
                f.write(f"2026-08-14T08:17:30.123456789Z stderr P {line[40:90]}\n")
                f.write(f"2026-08-14T08:17:30.123456789Z stderr F {line[90:]}\n")
            else:
                f.write(f"2026-08-14T08:17:30.123456789Z stdout F {line}\n")
    srv = serve("--log", str(docker), "--log", str(cri), "--from-beginning")
    h.wait_count(srv, 40, source="docker")
    text = h.wait_count(srv, 70)
    assert h.value(text, h.LINES, source="cri", outcome="parsed") == 30
    assert h.value(text, h.LINES, source="docker") == 40


def test_overlong_lines_capped(serve, tmp_path):
    log = tmp_path / "s.log"
    h.fsync_append(log, b"x" * 5000 + b"\n" + h.lines_blob(0, 3))
    srv = serve("--log", str(log), "--from-beginning", "--max-line-bytes", "1000")
    text = h.wait_count(srv, 3)
    assert h.value(text, "hybrid_cache_exporter_overlong_lines_total", source="s") == 1


def test_copy_of_unread_bytes_is_used(serve, tmp_path):
    """copytruncate while bytes were still unread: they are taken from the copy."""
    log = tmp_path / "s.log"
    h.fsync_append(log, h.lines_blob(0, 50))
    srv = serve("--log", str(log), "--from-beginning", "--poll-interval", "1")
    h.wait_count(srv, 50)
    # between two polls: append, copy, truncate, append less than before
    h.fsync_append(log, h.lines_blob(50, 70))
    shutil.copyfile(log, str(log) + ".1")
    os.truncate(log, 0)
    h.fsync_append(log, h.lines_blob(120, 10))
    text = h.wait_count(srv, 130)
    assert h.value(text, "hybrid_cache_exporter_truncations_total") == 1


def test_sigterm_stops_cleanly(serve, tmp_path):
    log = tmp_path / "s.log"
    log.touch()
    srv = serve("--log", str(log))
    assert srv.stop(signal.SIGTERM) == 0
    srv2 = serve("--log", str(log))
    assert srv2.stop(signal.SIGINT) == 0


def test_a_server_reconfigured_to_json_logging_is_read_and_the_change_counted(serve, tmp_path):
    """The header stage decides a source's envelope from its first lines; a server restarted with
    a JSON logging config writes on in the same file: its lines are read all the same, and serve's
    hybrid_cache_exporter_log_format_changes_total counts the change (issue 30, item 1)."""
    log = tmp_path / "s.log"
    h.fsync_append(log, h.lines_blob(0, 20))
    srv = serve("--log", str(log), "--from-beginning")
    text = h.wait_count(srv, 20)
    assert h.value(text, "hybrid_cache_exporter_log_format_changes_total", source="s") == 0
    records = []
    for i in range(20, 50):
        head, msg = h.decode_line(i).split("] ", 1)
        stamp = head[1:20]
        records.append(json.dumps({"asctime": stamp + ",000", "levelname": "INFO", "message": msg, "tp_rank": 0}))
    h.fsync_append(log, "".join(r + "\n" for r in records).encode())
    text = h.wait_count(srv, 50)
    assert h.value(text, "hybrid_cache_exporter_log_format_changes_total", source="s") == 1
    assert h.value(text, h.LINES, source="s", outcome="parsed") == 50
