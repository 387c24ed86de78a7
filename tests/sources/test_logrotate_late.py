"""Late looks against the real /usr/sbin/logrotate (issue 31, item 4): the exporter stopped while
logrotate renames and compresses the generation it was reading and others it never saw, in poll
and inotify modes, with and without delaycompress; every line still on disk counted once. In the
parallel pass (test_logrotate.py says why they ran apart before)."""

from __future__ import annotations

import gzip
import os
import signal
import time

import pytest
import rotation_support as rs
import test_serve_support as h
from test_logrotate import MODES, WATCHES

pytestmark = rs.needs_logrotate

ROTATIONS = "hybrid_cache_exporter_rotations_total"


# A late look, made deterministic: serve (polling every 0.3 s, or on inotify events, which queue
# meanwhile) is stopped (SIGSTOP) while logrotate rotates ``k`` times, so the generation it was
# reading and those it never saw are renamed, then compressed (delaycompress: ``x.log.1`` becomes
# ``x.log.2.gz`` at the next rotation; without it ``x.log.1.gz`` at once), before it looks again.
# The one it was reading is still open (read from its descriptor, even once deleted); the ones it
# never saw are read from their ``.gz``. ``rotate 3`` deletes a never-seen generation after its
# fourth rotation (k = 5): its lines exist nowhere any more, and exactly those are missing.
#
# Without delaycompress the writer is paused around each run: WatchedFileHandler stats the path,
# then writes the record, and a record stat'ed before logrotate's rename but written after the
# same run compressed the renamed file (and removed it) lands in an inode no name and no descriptor
# of the exporter holds (one never seen): that line exists nowhere, and no reader can count it.
# With delaycompress the renamed file stays as ``x.log.1`` until the next run, which waits for 40
# lines written after that record.
@pytest.mark.parametrize("k", [2, 3, 4, 5], ids=lambda k: f"{k}-rotations")
@pytest.mark.parametrize("delay", [True, False], ids=["delaycompress", "compress"])
@pytest.mark.parametrize("watch", list(WATCHES))
def test_late_look_compressed_generations(serve, writers, tmp_path, k, delay, watch):
    """Every line still on disk counted once when a look comes after the generations were
    renamed and compressed; only the lines of a generation deleted unseen are missing."""
    directives, kind, gap = MODES["create-rotate3-compress-delaycompress" if delay else "create-rotate3-compress"]
    log = tmp_path / "server.log"
    log.touch()
    lr = rs.Logrotate(tmp_path, log, directives)
    srv = serve("--log", str(log), "--from-beginning", *WATCHES[watch])
    w = writers(log, kind)
    h.wait_for(lambda: h.value(srv.metrics(), h.DECODE) > 0, what="first lines counted")
    lost = 0
    seen = 0
    for _ in range(2):  # twice: once from the first file, once from a rotated one
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            for j in range(k):
                time.sleep(gap)
                rs.wait_grown(log, 40)
                if j == 4:  # the oldest generation never seen is deleted by this rotation
                    lost += gzip.decompress((tmp_path / "server.log.3.gz").read_bytes()).count(b"\n")
                lr.rotate(None if delay else w)
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        # the new file and every never-seen generation still there, each a rotation, and each
        # ``.backup`` (below) one more: serve counts a generation once it holds it open, so the
        # next round starts only when every one is held (counting the ``.backup`` files out, the
        # wait could end before serve opened the last one, which the next round's runs delete)
        seen += min(k, 4)
        want = seen + sum(n.endswith(".backup") for n in os.listdir(tmp_path))
        h.wait_for(lambda want=want: h.value(srv.metrics(), ROTATIONS) >= want, what="the rotations noticed")
    written = w.stop()
    assert lr.runs == 2 * k and written >= 2 * k * 40
    assert (lost > 0) == (k == 5)
    text = h.wait_count(srv, written - lost, timeout=30)
    assert h.value(text, h.LINES, outcome="parsed") == written - lost
    # A writer that reopens by path (WatchedFileHandler) can write between logrotate's rename and
    # its create: the path is then the writer's new file, which logrotate moves aside as
    # ``server.log-YYYYMMDDHH.backup`` before it creates its own. That is one more generation (read
    # from there: its lines are in the count above), so one more rotation; once in 20 runs beside
    # two CPU hogs, and in CI (5 rotations for k = 2). With delaycompress only: the writer is
    # paused around the runs without it.
    extra = sum(n.endswith(".backup") for n in os.listdir(tmp_path))
    assert h.value(text, ROTATIONS) == 2 * min(k, 4) + extra, sorted(os.listdir(tmp_path))
