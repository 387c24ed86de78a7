"""Signals a sidecar meets (issue 23, item 3): SIGHUP, SIGUSR1, SIGUSR2 and SIGQUIT no longer kill
``serve`` without writing its positions (the lines since the last write were counted again after
the restart). Real signals to a real process; docs/serve.md, "Signals", says what each does."""

from __future__ import annotations

import base64
import json
import os
import signal
import time
import urllib.error
import urllib.request

import bcrypt
import pytest
import test_serve_support as h


def _offset(pos) -> int:
    try:
        return json.loads(pos.read_text())["files"][next(iter(json.loads(pos.read_text())["files"]))][-1]["offset"]
    except (OSError, ValueError, StopIteration, IndexError):
        return -1


def _start(serve, tmp_path):
    log, pos = tmp_path / "server.log", tmp_path / "pos.json"
    log.touch()
    # a positions write only at the start and when asked: what a signal writes is visible
    srv = serve("--log", str(log), "--positions", str(pos), "--positions-interval", "3600")
    h.wait_for(lambda: _offset(pos) == 0, what="the first positions write")
    h.fsync_append(log, h.lines_blob(0, 40))
    h.wait_count(srv, 40)
    assert _offset(pos) == 0
    return srv, log, pos


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2], ids=lambda s: s.name)
def test_signal_that_goes_on_writes_the_positions(serve, tmp_path, sig):
    srv, log, pos = _start(serve, tmp_path)
    srv.proc.send_signal(sig)
    if sig != signal.SIGUSR2:
        h.wait_for(lambda: _offset(pos) == log.stat().st_size, what="positions written on " + sig.name)
    else:
        h.wait_for(lambda: "Thread" in srv.stderr() or "thread" in srv.stderr(), what="the stacks on stderr")
    time.sleep(0.2)
    assert srv.proc.poll() is None, srv.stderr()  # still running
    h.fsync_append(log, h.lines_blob(40, 10))
    h.wait_count(srv, 50)
    assert f"received {sig.name}" in srv.stderr()
    if sig == signal.SIGUSR1:
        assert "source source=server" in srv.stderr() and "lag_bytes=0" in srv.stderr()
    if sig == signal.SIGUSR2:
        assert 'File "' in srv.stderr()  # a Python stack, from faulthandler


@pytest.mark.parametrize("sig", [signal.SIGQUIT, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_signal_that_stops_writes_the_positions(serve, tmp_path, sig):
    srv, log, pos = _start(serve, tmp_path)
    assert srv.stop(sig) == 0
    assert _offset(pos) == log.stat().st_size
    assert f"positions written to {pos}" in srv.stderr()
    if sig == signal.SIGQUIT:
        assert 'File "' in srv.stderr()  # the stacks first, as a Go exporter prints them
    # a restart counts nothing twice
    srv2 = serve("--log", str(log), "--positions", str(pos))
    h.fsync_append(log, h.lines_blob(40, 5))
    h.wait_count(srv2, 5)


def test_stop_says_when_the_positions_were_not_written(serve, tmp_path):
    """A positions path that is a directory: the stop logs the write error, then that the
    positions were not written and what the next start does; never that they were (before:
    "stop: the positions written" came just before the error)."""
    log, pos = tmp_path / "server.log", tmp_path / "pos"
    log.write_bytes(h.lines_blob(0, 10))
    pos.mkdir()
    srv = serve("--log", str(log), "--from-beginning", "--positions", str(pos))
    h.wait_count(srv, 10)
    assert srv.stop(signal.SIGTERM) == 0
    err = srv.stderr()
    assert "received SIGTERM: stop: write the positions, exit 0" in err
    assert f"positions not written to {pos} at exit" in err
    assert err.rindex(f"cannot write positions file {pos}") < err.index(f"positions not written to {pos} at exit")
    assert "positions written to" not in err


def test_sighup_rereads_the_web_config(serve, tmp_path):
    """SIGHUP re-reads the web config at once: here the file was rewritten with the same size and
    modification time (so nothing but the signal can make it re-read), user a replaced by b."""
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  a: {bcrypt.hashpw(b'pa', bcrypt.gensalt(4)).decode()}\n")
    log = tmp_path / "server.log"
    log.touch()
    srv = serve("--log", str(log), "--web.config.file", str(cfg))

    def status(user: str, pw: str) -> int:
        auth = "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()
        try:
            with urllib.request.urlopen(urllib.request.Request(srv.base + "/metrics", headers={"Authorization": auth}), timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    assert status("a", "pa") == 200 and status("b", "pb") == 401
    st = cfg.stat()
    cfg.write_text(f"basic_auth_users:\n  b: {bcrypt.hashpw(b'pb', bcrypt.gensalt(4)).decode()}\n")
    os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cfg.stat().st_size == st.st_size
    assert status("a", "pa") == 200  # not re-read by itself
    srv.proc.send_signal(signal.SIGHUP)
    h.wait_for(lambda: "reloaded" in srv.stderr(), what="the reload")
    assert status("b", "pb") == 200 and status("a", "pa") == 401
