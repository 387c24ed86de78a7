"""SGLang's death and shutdown lines (docs/formats/sglang.md#death-and-shutdown), in the shapes of the released
code (0.4.6, 0.4.10, 0.5.15-0.5.23), parsed into the lifecycle events vLLM's give, and what the server's state
makes of them on the three fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.app import new_pipeline
from exporter.reading.offline import replay_files
from parsers import events as ev
from parsers import parse_line

ROOT = Path(__file__).resolve().parents[2]
H = "[2026-10-10 12:30:21] "

LINES = [
    ("[2026-10-10 12:30:21 TP0] Scheduler hit an exception: Traceback (most recent call last):", "dead", "scheduler_error"),
    (H + "TokenizerManager hit an exception: Traceback (most recent call last):", "dead", "tokenizer_error"),
    (H + "DetokenizerManager hit an exception: Traceback (most recent call last):", "dead", "detokenizer_error"),
    (H + "MultiTokenizerRouter hit an exception: Traceback (most recent call last):", "dead", "tokenizer_error"),
    (H + "DataParallelController hit an exception: Traceback (most recent call last):", "dead", "fatal_error"),
    (H + "SIGQUIT received. signum=None, frame=None. It usually means one child failed.", "dead", "child_failed"),
    (H + "Received sigquit from a child process. It usually means the child failed.", "dead", "child_failed"),
    (H + "Subprocess scheduler_0 (pid=812) crashed with exit code -6. Triggering SIGQUIT for cleanup...", "dead", "child_failed"),
    (H + "SIGTERM received. signum=None frame=None. Draining requests and shutting down...", "stopping", "signal"),
    (H + "Signal SIGTERM received while health check failed. Force exiting.", "stopping", "signal"),
    (H + "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[].", "stopping", "signal"),
]


@pytest.mark.parametrize(("line", "state", "cause"), LINES, ids=[c for _, _, c in LINES])
def test_each_line_is_its_lifecycle_event(line, state, cause):
    for engine in ("sglang", None):
        r = parse_line(line, engine, 2026)
        assert r.outcome == "parsed" and r.engine == "sglang" and r.event == ev.Lifecycle(state, cause), (engine, r)


@pytest.mark.parametrize(
    "line",
    [
        H + 'INFO:     10.12.0.4:60220 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        H + "INFO:     Waiting for application shutdown.",
        # uvicorn's stop behind SGLang's header: an INFO: line, counted by the bulk scanner as an access line in the
        # default format, so not read in any (the SIGTERM line before it says stopped)
        H + "INFO:     Shutting down",
        H + "INFO:     Finished server process [1]",
        H + "Subprocess watchdog initialized.",
        H + "SIGQUIT received in a test of the handler",  # not the handler's sentence
        H + "Using custom SIGQUIT handler: my.module.handler",
    ],
)
def test_lookalikes_are_not(line):
    assert parse_line(line, "sglang", 2026).event is None


def _replayed(name: str):
    pipe = new_pipeline(None)
    assert replay_files(pipe, [str(ROOT / "fixtures" / "sglang" / name)], None) == 0
    return pipe.sources[name.removesuffix(".log")]


def test_the_fixtures_end_dead_or_stopped():
    src = _replayed("death-0.5.23.log")
    assert (src.life, src.life_cause, src.deaths) == ("dead", "scheduler_error", 1)  # the SIGQUIT after it: no second death
    assert src.lines["unrecognized"] == 0
    src = _replayed("death-0.4.10.log")  # TP1's exception is not applied (rank 1 does not speak); the sigquit is
    assert (src.life, src.life_cause, src.deaths) == ("dead", "child_failed", 1)
    src = _replayed("shutdown-0.5.23.log")
    assert (src.life, src.life_cause, src.deaths) == ("stopped", "signal", 0)


def test_a_sigquit_after_a_logged_shutdown_is_no_death_an_exception_is(tmp_path):
    base = (ROOT / "fixtures" / "sglang" / "shutdown-0.5.23.log").read_text()
    log = tmp_path / "s.log"
    log.write_text(base + "[2026-10-10 12:44:10] SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n")
    pipe = new_pipeline(None)
    assert replay_files(pipe, [str(log)], None) == 0
    assert (pipe.sources["s"].life, pipe.sources["s"].deaths) == ("stopped", 0)
    log.write_text(base + "[2026-10-10 12:44:10] Scheduler hit an exception: Traceback (most recent call last):\n")
    pipe = new_pipeline(None)
    assert replay_files(pipe, [str(log)], None) == 0
    assert (pipe.sources["s"].life, pipe.sources["s"].deaths) == ("dead", 1)
