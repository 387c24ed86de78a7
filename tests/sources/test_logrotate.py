"""serve against the real /usr/sbin/logrotate and a steady writer (Python ``logging``): exact
counts over /metrics for copytruncate (rotate N + compress + delaycompress; dateext), create and
copy, each with >= 6 forced rotations; restarts (SIGTERM, SIGKILL) with rotations while the
exporter runs and >= 3 while it is down."""

from __future__ import annotations

import gzip
import os
import signal
import time

import pytest
import rotation_support as rs
import test_serve_support as h

# paired (two at a time, nothing else beside them): rotations 0.15 s apart against a 0.3 s poll leave
# a generation about one poll interval uncompressed; beside three other workers a late poll lost one
# (1,568 of 1,848 lines, once in 9 parallel runs), read then as a poll stalled past four rotations
# (test_poll_late_compressed_generations: only such a one is lost; looks that fall inside a logrotate
# run lost lines too until 2fb494d: test_logrotate_steps.py). Two of these use about one core of two
# (23 s of CPU in 23 s); five runs in pairs, all exact. See reliability.md.
pytestmark = [rs.needs_logrotate, pytest.mark.paired]


@pytest.fixture
def writers():
    made: list[rs.Writer] = []

    def make(*a, **k) -> rs.Writer:
        w = rs.Writer(*a, **k)
        made.append(w)
        return w

    yield make
    for w in made:
        w.kill()


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
    h.wait_for(lambda: log.stat().st_size > 0, what="first lines")
    for _ in range(6):
        time.sleep(gap)
        lr.rotate(w if "copytruncate" in mode else None)
    time.sleep(0.1)
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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("mode", ["copytruncate-rotate3-compress-delaycompress", "create-rotate3-compress-delaycompress"])
def test_restart_across_rotations(serve, writers, tmp_path, sig, mode):
    """Rotations while serve runs, a stop (SIGTERM or SIGKILL) with the writer still writing,
    three rotations while it is down, two after the restart: the restarted exporter counts exactly
    the lines its saved positions did not cover (none skipped, none read twice)."""
    directives, kind, _ = MODES[mode]
    log, pos = tmp_path / "server.log", tmp_path / "pos.json"
    log.touch()
    lr = rs.Logrotate(tmp_path, log, directives)
    args = ("--log", str(log), "--from-beginning", "--positions", str(pos), "--positions-interval", "0.1")
    srv = serve(*args)
    w = writers(log, kind)
    h.wait_for(lambda: log.stat().st_size > 0, what="first lines")
    ct = w if "copytruncate" in mode else None
    for _ in range(3):
        time.sleep(0.15)
        lr.rotate(ct)
    h.wait_for(lambda: pos.exists() and rs.positions_of(pos, log), what="positions written")
    time.sleep(0.2)
    assert srv.stop(sig) == (0 if sig == signal.SIGTERM else -signal.SIGKILL)
    w.pause()  # look at what the positions cover while nothing moves
    covered = rs.first_unread(tmp_path, rs.positions_of(pos, log))
    w.resume()
    for _ in range(3):  # rotated while the exporter is down
        time.sleep(0.1)
        lr.rotate(ct)
    srv2 = serve(*args)
    for _ in range(2):
        time.sleep(0.15)
        lr.rotate(ct)
    written = w.stop()
    assert lr.runs == 8 and written > covered > 0
    h.wait_count(srv2, written - covered, timeout=30)


ROTATIONS = "hybrid_cache_exporter_rotations_total"


# A late poll, made deterministic: serve (polling every 0.3 s) is stopped (SIGSTOP) while logrotate
# rotates ``k`` times, so the generation it was reading and those it never saw are renamed, then
# compressed (delaycompress: ``x.log.1`` becomes ``x.log.2.gz`` at the next rotation), before it
# looks again. The one it was reading is still open (read from its descriptor, even once deleted);
# the ones it never saw are read from their ``.gz``. ``rotate 3`` deletes a never-seen generation
# after its fourth rotation (k = 5): its lines exist nowhere any more, and exactly those are missing.
@pytest.mark.parametrize("k", [2, 3, 4, 5], ids=lambda k: f"{k}-rotations")
def test_poll_late_compressed_generations(serve, writers, tmp_path, k):
    """Every line still on disk counted once when a poll comes after the generations were
    renamed and compressed; only the lines of a generation deleted unseen are missing."""
    directives, kind, gap = MODES["create-rotate3-compress-delaycompress"]
    log = tmp_path / "server.log"
    log.touch()
    lr = rs.Logrotate(tmp_path, log, directives)
    srv = serve("--log", str(log), "--from-beginning", "--poll-interval", "0.3")
    w = writers(log, kind)
    h.wait_for(lambda: h.value(srv.metrics(), h.DECODE) > 0, what="first lines counted")
    lost = 0
    seen = 0
    for _ in range(2):  # twice: once from the first file, once from a rotated one
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            for j in range(k):
                time.sleep(gap)
                if j == 4:  # the oldest generation never seen is deleted by this rotation
                    lost += gzip.decompress((tmp_path / "server.log.3.gz").read_bytes()).count(b"\n")
                lr.rotate()
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        # the new file and every never-seen generation still there, each a rotation
        seen += min(k, 4)
        h.wait_for(lambda s=seen: h.value(srv.metrics(), ROTATIONS) >= s, what="the rotations noticed")
    written = w.stop()
    assert lr.runs == 2 * k and written > 300
    assert (lost > 0) == (k == 5)
    text = h.wait_count(srv, written - lost, timeout=30)
    assert h.value(text, h.LINES, outcome="parsed") == written - lost
    # A writer that reopens by path (WatchedFileHandler) can write between logrotate's rename and
    # its create: the path is then the writer's new file, which logrotate moves aside as
    # ``server.log-YYYYMMDDHH.backup`` before it creates its own. That is one more generation (read
    # from there: its lines are in the count above), so one more rotation; once in 20 runs beside
    # two CPU hogs, and in CI (5 rotations for k = 2).
    extra = sum(n.endswith(".backup") for n in os.listdir(tmp_path))
    assert h.value(text, ROTATIONS) == 2 * min(k, 4) + extra, sorted(os.listdir(tmp_path))
