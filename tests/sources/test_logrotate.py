"""serve against the real /usr/sbin/logrotate and a steady writer (Python ``logging``): exact
counts over /metrics for copytruncate (rotate N + compress + delaycompress; dateext), create and
copy, each with >= 6 forced rotations; restarts (SIGTERM, SIGKILL) with rotations while the
exporter runs and >= 3 while it is down."""

from __future__ import annotations

import os
import signal
import time

import pytest
import rotation_support as rs
import test_serve_support as h

# In the parallel pass again (issue 31): from 2026-12-02 they ran apart (serial, then two at a
# time) after a poll beside three other workers lost one generation (1,568 of 1,848 lines, once in nine
# runs, "rotated before it was seen"). The looks that fall inside a logrotate run and lost lines so were
# fixed on 2026-12-03 (test_logrotate_steps.py); the late looks, and the generations they read from
# their .gz in poll and inotify modes, are test_logrotate_late.py. Each rotation waits until the file
# holds lines (rs.wait_grown), not for a fixed time a loaded machine may not give the writer.
pytestmark = rs.needs_logrotate


MODES = {
    # name: (logrotate directives, writer handler, seconds between rotations)
    "copytruncate-rotate3-compress-delaycompress": ("    rotate 3\n    copytruncate\n    compress\n    delaycompress", "plain", 0.15),
    # dateext names rotations by second: %s and a second apart give each of them its own name
    "copytruncate-dateext": (
        "    rotate 4\n    copytruncate\n    dateext\n    dateformat -%s\n    compress\n    delaycompress",
        "plain",
        1.02,
    ),
    "create-rotate3-compress-delaycompress": ("    rotate 3\n    create\n    compress\n    delaycompress", "watched", 0.15),
    "copy-rotate3-compress": ("    rotate 3\n    copy\n    compress", "plain", 0.15),
    # compress without delaycompress: the rest of a generation read in part is only in x.log.1.gz
    # once the run is over (copytruncate: the copy; create: the renamed file, still open here)
    "copytruncate-rotate3-compress": ("    rotate 3\n    copytruncate\n    compress", "plain", 0.15),
    "create-rotate3-compress": ("    rotate 3\n    create\n    compress", "watched", 0.15),
    # extension: the number goes before it (server.1.log, server.2.log.gz)
    "copytruncate-extension": ("    rotate 3\n    copytruncate\n    compress\n    delaycompress\n    extension .log", "plain", 0.15),
}


WATCHES = {"inotify": [], "poll": ["--poll-interval", "0.3"]}
# One run is enough for these modes: dateext's second-long gaps under inotify; the extension
# naming polled, so the copies hold unread lines. Only the cases that apply are generated.
ONE_WATCH = {"copytruncate-dateext": "inotify", "copytruncate-extension": "poll"}
CASES = [
    pytest.param(mode, WATCHES[watch], id=f"{watch}-{mode}") for watch in WATCHES for mode in MODES if ONE_WATCH.get(mode, watch) == watch
]


@pytest.mark.parametrize(("mode", "watch"), CASES)
def test_logrotate_exact(serve, writers, tmp_path, mode, watch):
    """Six forced rotations under a steady writer: every line counted once. In poll mode the
    exporter lags the writer, so at each copytruncate the copy holds lines not read yet."""
    directives, kind, gap = MODES[mode]
    log = tmp_path / "server.log"
    log.touch()
    lr = rs.Logrotate(tmp_path, log, directives)
    srv = serve("--log", str(log), "--from-beginning", *watch)
    w = writers(log, kind)
    # paused around each run: copytruncate (logrotate loses what is written between its copy and its
    # truncation), and create + compress without delaycompress (WatchedFileHandler stats the path,
    # then writes: a record can land in the renamed file after logrotate compressed and removed it,
    # and then exists nowhere; test_logrotate_late.py says more)
    paused = "copytruncate" in mode or (kind == "watched" and "compress" in directives and "delaycompress" not in directives)
    h.wait_for(lambda: log.stat().st_size > 0, what="first lines")
    for _ in range(6):
        time.sleep(gap)
        rs.wait_grown(log, 50)
        lr.rotate(w if paused else None)
    rs.wait_grown(log, 10)
    written = w.stop()
    assert lr.runs == 6 and written > 300
    text = h.wait_count(srv, written, timeout=30)
    assert h.value(text, h.LINES, outcome="parsed") == written
    names = sorted(os.listdir(tmp_path))
    if "compress" in directives:
        assert any(n.endswith(".gz") for n in names), names
    if "copytruncate" in mode:
        assert h.value(text, "hybrid_cache_exporter_truncations_total") >= 6
    if mode.startswith("create"):
        assert h.value(text, "hybrid_cache_exporter_rotations_total") >= 6


# The lines the restarted exporter counts: every line written but those the saved positions cover
# (rs.covered) and those of generations deleted while it was down (``lost``: rotate 3 deletes, at
# the third rotation while down, the generation that was x.log.1 at the stop). Positions are saved
# every 0.1 s and SIGKILL leaves the last save: on a loaded machine it may not cover the end of
# that generation, whose rest then exists nowhere when serve starts again (it says so: "the file
# read before the restart ... is gone: whatever it held after offset N ... was not read"). Once in the parallel
# pass: 56 lines of it, counted as missing by the first-unread rule this replaced.
def restart_across_rotations(serve, writers, tmp_path, sig, mode, behind=False):
    directives, kind, _ = MODES[mode]
    log, pos = tmp_path / "server.log", tmp_path / "pos.json"
    log.touch()
    lr = rs.Logrotate(tmp_path, log, directives)
    args = ("--log", str(log), "--from-beginning", "--positions", str(pos), "--positions-interval", "0.1")
    srv = serve(*args)
    w = writers(log, kind)
    h.wait_for(lambda: log.stat().st_size > 0, what="first lines")
    ct = w if "copytruncate" in mode else None
    for i in range(3):
        time.sleep(0.15)
        if behind and i == 2:
            # the positions behind the files, for certain: serve stopped (it saves nothing more)
            # while the file it reads gets 50 more lines and is rotated
            h.wait_for(lambda: rs.positions_of(pos, log) if pos.exists() else None, what="positions written")
            os.kill(srv.proc.pid, signal.SIGSTOP)
            rs.wait_grown(log, log.stat().st_size // rs.LINE_BYTES + 50)
        lr.rotate(ct)
    h.wait_for(lambda: pos.exists() and rs.positions_of(pos, log), what="positions written")
    time.sleep(0.2)
    assert srv.stop(sig) == (0 if sig == signal.SIGTERM else -signal.SIGKILL)
    w.pause()  # look at what the positions cover while nothing moves
    covered = rs.covered(tmp_path, rs.positions_of(pos, log))
    w.resume()
    lost: set[int] = set()
    for _ in range(3):  # rotated while the exporter is down
        time.sleep(0.1)
        oldest = tmp_path / "server.log.3.gz"
        if oldest.exists():  # deleted by this rotation: what the positions do not cover is gone
            lost |= rs.seqs_in(oldest) - covered
        lr.rotate(ct)
    srv2 = serve(*args)
    for _ in range(2):
        time.sleep(0.15)
        lr.rotate(ct)
    written = w.stop()
    assert lr.runs == 8 and written > len(covered) > 0
    assert covered <= set(range(written))
    h.wait_count(srv2, written - len(covered) - len(lost), timeout=30)
    return lost


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("mode", ["copytruncate-rotate3-compress-delaycompress", "create-rotate3-compress-delaycompress"])
def test_restart_across_rotations(serve, writers, tmp_path, sig, mode):
    """Rotations while serve runs, a stop (SIGTERM or SIGKILL) with the writer still writing,
    three rotations while it is down, two after the restart: the restarted exporter counts exactly
    the lines its saved positions did not cover and that are still on disk (none skipped, none
    read twice)."""
    restart_across_rotations(serve, writers, tmp_path, sig, mode)


@pytest.mark.parametrize("mode", ["copytruncate-rotate3-compress-delaycompress", "create-rotate3-compress-delaycompress"])
def test_restart_positions_behind(serve, writers, tmp_path, mode):
    """The same with positions that are behind for certain (the CI failure's case, made
    deterministic): serve stopped before the last rotation while it runs, then killed; the
    generation it was reading has 50 lines it never read, and the third rotation while it is
    down deletes it. Exactly those are missing, and the rest of every other generation (the one
    it never saw: from its start) is counted once."""
    lost = restart_across_rotations(serve, writers, tmp_path, signal.SIGKILL, mode, behind=True)
    assert len(lost) >= 40  # 50 lines by size, at least (the longest lines are a few bytes longer)


def test_no_lag_left_after_copytruncate(serve, tmp_path):
    """Lines written, all counted, then copytruncate with nothing written after it: the read lag is
    0, not the size the file had before the truncation (before: 100,400 bytes here, and the issue's
    audit saw 73-81 KB stay after its runs, every line counted)."""
    log = tmp_path / "server.log"
    log.touch()
    lr = rs.Logrotate(tmp_path, log, MODES["copytruncate-rotate3-compress-delaycompress"][0])
    srv = serve("--log", str(log), "--from-beginning")
    h.fsync_append(log, h.lines_blob(0, 500))
    h.wait_count(srv, 500)
    lr.rotate()
    h.wait_for(lambda: h.value(srv.metrics(), "hybrid_cache_exporter_truncations_total") == 1, what="the truncation seen")
    h.wait_for(lambda: h.value(srv.metrics(), "hybrid_cache_exporter_read_lag_bytes") == 0, what="the read lag back to 0")
    assert h.value(srv.metrics(), h.DECODE) == 500
