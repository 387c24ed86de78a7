"""The tailer in-process: an error in one source is logged, counted and retried (the others go
on); /healthz fails when the tailing thread is gone; past the descriptor budget idle files are
closed and reopened by identity, including one rotated while closed."""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import rotation_support as rs
import test_serve_support as h

from exporter.exposition.web import App, make_server
from exporter.exposition.webconfig import WebConfig
from exporter.sources import Manager
from exporter.state.pipeline import Pipeline


def _wait(pred, what: str) -> None:
    h.wait_for(pred, timeout=20, what=what)


def test_error_in_one_source_is_counted_and_retried(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    h.fsync_append(a, h.lines_blob(0, 20))
    h.fsync_append(b, h.lines_blob(0, 20))
    pipe = Pipeline()
    real = pipe.feed_lines
    failures = {"a": 1}

    def flaky(source, lines):
        if failures.get(source):
            failures[source] -= 1
            raise RuntimeError("injected parser bug")
        return real(source, lines)

    pipe.feed_lines = flaky
    m = Manager(pipe, [(None, str(a)), (None, str(b))], from_beginning=True)
    m.start()
    try:
        _wait(lambda: rs.decode_batches(pipe, "b") == 20, "b read")
        ta = m.tailers[str(a)]
        _wait(lambda: ta.errors == 1, "error counted")
        h.fsync_append(a, h.lines_blob(20, 7))  # the source goes on after the error
        _wait(lambda: rs.decode_batches(pipe, "a") == 7, "a read after the error")
        assert m.thread.is_alive() and m.alive()
    finally:
        m.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_healthz_fails_when_the_tailer_thread_dies(tmp_path):
    log = tmp_path / "s.log"
    log.touch()
    m = Manager(Pipeline(), [(None, str(log))])
    died = threading.Event()

    def fatal():
        died.set()
        raise SystemExit("thread killed")  # not an Exception: the loop does not catch it

    m._cycle = fatal
    srv = make_server(f"127.0.0.1:{h.free_port()}", App(None, lambda: (True, []), lambda: [], WebConfig(), alive=m.alive))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        port = srv.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert r.status == 200
        m.start()
        died.wait(10)
        m.thread.join(10)
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
            code = 200
        except urllib.error.HTTPError as e:
            code = e.code
        assert code == 503
    finally:
        srv.shutdown()
        srv.server_close()


BUDGET_FILES = 30  # files against a descriptor budget of 8


def _budget_files(tmp_path) -> Path:
    """``BUDGET_FILES`` logs of 3 lines each in ``tmp_path/logs``: more than the budget holds open."""
    d = tmp_path / "logs"
    d.mkdir()
    for i in range(BUDGET_FILES):
        h.fsync_append(d / f"f{i}.log", h.lines_blob(0, 3))
    return d


def test_descriptor_budget_closes_idle_files_and_reopens_by_identity(tmp_path):
    d, n = _budget_files(tmp_path), BUDGET_FILES
    pipe = Pipeline()
    m = Manager(pipe, [(None, str(d / "*.log"))], from_beginning=True, fd_budget=8)
    m.start()
    try:
        _wait(lambda: rs.decode_batches(pipe) == 3 * n, "first lines")
        assert m.open_fds <= 8
        assert sum(1 for t in m.tailers.values() if t.active is not None and t.active.parked) >= n - 8
        for i in range(n):
            h.fsync_append(d / f"f{i}.log", h.lines_blob(3, 2))
        _wait(lambda: rs.decode_batches(pipe) == 5 * n, "lines written to closed files")
        # a closed file is written, then rotated away before the exporter reopens it
        t0 = m.tailers[str(d / "f0.log")]
        _wait(lambda: t0.active is not None and t0.active.parked or m.make_room() or False, "f0 parked")
        h.fsync_append(d / "f0.log", h.lines_blob(5, 4))
        os.rename(d / "f0.log", d / "f0.log.1")
        h.fsync_append(d / "f0.log", h.lines_blob(9, 6))
        _wait(lambda: rs.decode_batches(pipe, "f0") == 15, "rotated closed file read to its end, then the new one")
        time.sleep(0.2)
        assert rs.decode_batches(pipe) == 5 * n + 10
        assert m.open_fds <= 8 + 2  # the rotated one drained, plus one being opened
    finally:
        m.stop()


def test_closed_file_renamed_and_compressed_before_the_next_look(tmp_path, caplog):
    """A file whose descriptor the budget closed is written, renamed and compressed (the plain
    copy deleted) before the exporter looks again (a poll that does not come until woken): the
    rest of it is read from the ``.gz``, found by its first bytes, and nothing twice."""
    d, n = _budget_files(tmp_path), BUDGET_FILES
    pipe = Pipeline()
    m = Manager(pipe, [(None, str(d / "*.log"))], from_beginning=True, fd_budget=8, poll_interval=600)
    caplog.set_level(logging.INFO, logger="hybrid_cache_exporter.tailer")
    m.start()
    try:
        _wait(lambda: rs.decode_batches(pipe) == 3 * n, "first lines")
        t0 = m.tailers[str(d / "f0.log")]
        _wait(lambda: t0.active is not None and t0.active.parked and not t0.busy(), "f0 closed, nothing left to read")
        h.fsync_append(d / "f0.log", h.lines_blob(3, 4))
        os.rename(d / "f0.log", d / "f0.log.1")
        h.fsync_append(d / "f0.log", h.lines_blob(7, 5))
        with open(d / "f0.log.1", "rb") as f, gzip.open(d / "f0.log.1.gz", "wb") as g:
            shutil.copyfileobj(f, g)
        os.unlink(d / "f0.log.1")
        m._wake()
        _wait(lambda: rs.decode_batches(pipe, "f0") == 12, "the rest from the .gz, then the new file")
        time.sleep(0.2)
        assert rs.decode_batches(pipe) == 3 * n + 9
        assert any("descriptor was closed (budget) and gone" in r.getMessage() for r in caplog.records)
        assert any("continues a generation read before" in r.getMessage() and "(compressed)" in r.getMessage() for r in caplog.records)
    finally:
        m.stop()


def test_the_lag_counts_lines_until_the_pipeline_has_them(tmp_path):
    """A scrape reads the read lag from another thread: while a chunk's lines are being fed, they are still lag
    (before: the chunk left the lag before its lines reached the pipeline, so a scrape could see lag 0 and
    gauges without the newest line, as the real-engine suite's caught-up reads did once)."""
    log = tmp_path / "a.log"
    h.fsync_append(log, h.lines_blob(0, 20))
    pipe = Pipeline()
    real, lags = pipe.feed_lines, []

    def watched(source, lines):
        lags.append(m.tailers[str(log)].lag())  # in the tailing thread, as a scrape would see it now
        return real(source, lines)

    pipe.feed_lines = watched
    m = Manager(pipe, [(None, str(log))], from_beginning=True)
    m.start()
    try:
        _wait(lambda: rs.decode_batches(pipe, "a") == 20, "the lines read")
        h.fsync_append(log, h.lines_blob(20, 5))
        _wait(lambda: rs.decode_batches(pipe, "a") == 25, "the appended lines read")
        _wait(lambda: m.tailers[str(log)].lag() == 0, "the lag back to 0")
    finally:
        m.stop()
    assert lags and all(n > 0 for n in lags), lags


def test_the_lag_sees_a_write_the_tailer_has_not_looked_at(tmp_path):
    """The read lag is of the file's size now, not of the tailer's last look: polled every 60 s, lines appended
    after the first read are lag at once (before: 0 until the next poll, so /metrics said "all read" over an unread
    line)."""
    log = tmp_path / "a.log"
    h.fsync_append(log, h.lines_blob(0, 20))
    pipe = Pipeline()
    m = Manager(pipe, [(None, str(log))], from_beginning=True, poll_interval=60.0)
    m.start()
    try:
        _wait(lambda: rs.decode_batches(pipe, "a") == 20, "the lines read")
        t = m.tailers[str(log)]
        _wait(lambda: t.lag() == 0, "the lag 0")
        more = h.lines_blob(20, 5)
        h.fsync_append(log, more)
        assert t.lag() == len(more.encode() if isinstance(more, str) else more)
        assert rs.decode_batches(pipe, "a") == 20  # not read yet: the tailer looks in a minute
    finally:
        m.stop()
