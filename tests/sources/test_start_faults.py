"""Faults at and after the start that lost lines (issue 23, item 3): a path unreadable at start,
a partial line then a restart that truncates the log, and vLLM's year taken from the file, not
the clock. Real ``serve`` processes, exact counts over HTTP."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import ci_support
import pytest
import test_serve_support as h

# root reads any file: the exporter runs without the capabilities that let it (CAP_DAC_OVERRIDE,
# CAP_DAC_READ_SEARCH), as root still, so it reads its venv and the test's directory wherever the
# clone is (before: as uid 65534, which cannot enter a clone in a 0700 directory such as mktemp -d's)
NO_FILE_CAPS = ("setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search") if os.geteuid() == 0 else ()


def _caps_droppable() -> bool:
    return shutil.which("setpriv") is not None and subprocess.run([*NO_FILE_CAPS, "true"], capture_output=True).returncode == 0


@pytest.mark.parametrize("fault", ["directory", "symlink-loop", "permission-denied"])
def test_unreadable_at_start_is_read_from_its_beginning(serve, tmp_path, fault):
    """A path that cannot be read at start (a directory Docker made for a bind-mounted log that did
    not exist yet, a symlink loop, permission denied), fixed later: every line it then holds is
    read, as for a path that appears after the start (before: 0/100, 0/100 and 50/100)."""
    if fault == "permission-denied" and NO_FILE_CAPS:
        ci_support.need(_caps_droppable(), "running as root without setpriv (or CAP_SETPCAP): permissions cannot be denied")
    log = tmp_path / "server.log"
    real = tmp_path / "real.log"
    if fault == "directory":
        log.mkdir()
    elif fault == "symlink-loop":
        h.fsync_append(real, h.lines_blob(0, 100))
        os.symlink(tmp_path / "b.log", log)
        os.symlink(log, tmp_path / "b.log")
    else:
        h.fsync_append(log, h.lines_blob(0, 50))
        log.chmod(0o000)
    srv = serve("--log", str(log), prefix=NO_FILE_CAPS if fault == "permission-denied" else ())
    h.wait_for(lambda: srv.get("/readyz")[0] == 503, what="the path reported unreadable")
    if fault == "directory":
        log.rmdir()
        h.fsync_append(log, h.lines_blob(0, 100))
    elif fault == "symlink-loop":
        os.unlink(log)
        os.symlink(real, log)
    else:
        h.fsync_append(log, h.lines_blob(50, 50))  # written while unreadable
        assert b"Permission denied" in subprocess.run([*NO_FILE_CAPS, "cat", str(log)], capture_output=True).stderr
        log.chmod(0o644)
    h.wait_count(srv, 100)
    assert srv.get("/readyz")[0] == 200


def _replayed(*blobs: bytes, tmp: Path) -> float:
    total = 0.0
    for i, b in enumerate(blobs):
        p = tmp / f"gen{i}.log"
        p.write_bytes(b)
        out = subprocess.run([str(h.EXE), "replay", str(p)], check=True, capture_output=True, text=True).stdout
        total += h.value(out, h.DECODE)
    return total


def test_partial_line_then_a_restart_that_truncates(serve, tmp_path):
    """The server dies in the middle of a line; its next process truncates the log (``> log``,
    ``tee`` without ``-a``) and writes 100 lines. The held partial line ends there: serve counts
    the 100 (before: 99, the first glued to the partial one), as replay of each content does."""
    log = tmp_path / "server.log"
    old = h.lines_blob(0, 50) + h.decode_line(50)[:30].encode()  # cut mid-line, no newline
    srv = serve("--log", str(log))
    h.fsync_append(log, old)
    h.wait_for(lambda: h.value(srv.metrics(), h.DECODE) == 50, what="the first content")
    new = h.lines_blob(1000, 100)
    with open(log, "wb") as f:  # the restart: truncated, then written from 0
        f.write(new)
        f.flush()
        os.fsync(f.fileno())
    text = h.wait_count(srv, 150)
    assert h.value(text, h.LINES) == 50 + 1 + 100  # the unfinished line counted once, on its own
    assert h.value(text, h.DECODE) == _replayed(old, new, tmp=tmp_path)


def test_a_line_cut_by_a_truncating_restart_is_no_batch(serve, tmp_path):
    """A fragment is not a line (issue 29, item 7): the dead writer's last decode line, cut after
    `#full token: `, then a restart that truncates the log and writes 100 lines. The fragment is
    counted once, unread (`unrecognized`: a known message cut), and is no decode batch: 150 batches
    for the 150 lines written whole (before: 151)."""
    log = tmp_path / "server.log"
    cut = h.decode_line(50)
    cut = cut[: cut.index("#full token: ") + len("#full token: ")]
    srv = serve("--log", str(log))
    h.fsync_append(log, h.lines_blob(0, 50) + cut.encode())
    h.wait_for(lambda: h.value(srv.metrics(), h.DECODE) == 50, what="the first content")
    with open(log, "wb") as f:  # the restart: truncated, then written from 0
        f.write(h.lines_blob(1000, 100))
        f.flush()
        os.fsync(f.fileno())
    text = h.wait_count(srv, 150)  # (exact: a 151st batch fails it)
    assert h.value(text, h.LINES) == 151 and h.value(text, h.LINES, outcome="unrecognized") == 1


def test_copytruncate_still_joins_a_line_cut_by_it(serve, tmp_path):
    """The other side of the rule: after copytruncate the writer finishes its line in the new
    content, which does not start with a header: the two halves are one line."""
    log = tmp_path / "server.log"
    srv = serve("--log", str(log))
    line = h.decode_line(7)
    h.fsync_append(log, h.lines_blob(0, 20) + line[:40].encode())
    h.wait_for(lambda: h.value(srv.metrics(), h.DECODE) == 20, what="the first content")
    shutil.copyfile(log, str(log) + ".1")
    os.truncate(log, 0)
    h.fsync_append(log, (line[40:] + "\n").encode() + h.lines_blob(21, 9))
    text = h.wait_count(srv, 30)
    assert h.value(text, h.LINES) == 30


VLLM_LINE = (
    "(APIServer pid=1) INFO {md} {hms} [loggers.py:310] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
    "Avg generation throughput: 5.4 tokens/s, Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 7.5%, Prefix cache hit rate: 0.0%"
)


def _december_log(path: Path) -> float:
    """A vLLM log from 31 December to 1 January, last written on 1 January 2031 (its mtime);
    returns the local time of its last line."""
    times = [("12-31", "23:59:40"), ("12-31", "23:59:50"), ("01-01", "00:00:00"), ("01-01", "00:00:10")]
    path.write_text("".join(VLLM_LINE.format(md=md, hms=hms) + "\n" for md, hms in times))
    last = time.mktime((2031, 1, 1, 0, 0, 10, 0, 0, -1))
    os.utime(path, (last + 5, last + 5))
    return last


def test_vllm_year_from_the_file_in_replay(tmp_path):
    """A December log read in January: the year comes from the file (its modification time and its
    first line), not from the machine's clock (before: the last line a year ahead, so the
    'log stopped' alert could never fire)."""
    log = tmp_path / "server.log"
    last = _december_log(log)
    # the file rule itself: --log.year file over the suite's pin (tests/conftest.py)
    out = subprocess.run([str(h.EXE), "replay", "--log.year", "file", str(log)], check=True, capture_output=True, text=True).stdout
    assert h.value(out, "hybrid_cache_last_line_timestamp_seconds") == last


def test_vllm_year_from_the_file_in_serve(serve, tmp_path):
    log = tmp_path / "server.log"
    last = _december_log(log)
    srv = serve("--log", str(log), "--from-beginning", "--log.year", "file")
    text = h.wait_count(srv, 4, name=h.LINES)
    assert h.value(text, "hybrid_cache_last_line_timestamp_seconds") == last
    srv2 = serve("--log", str(log), "--log.year", "file")  # from the end: the lines read back carry the same year
    assert h.value(srv2.metrics(), "hybrid_cache_last_line_timestamp_seconds") == last
