"""Any header (parsers/header/preamble.py) and structured records (parsers/header/structured.py): the engine's
message found by its own text wherever it starts, the time, level and rank tags read from what
precedes it (docs/formats/README.md#finding-the-message)."""

from __future__ import annotations

import ast
import calendar
import inspect
import json
import logging

import pytest

from parsers import parse_line, sglang, vllm
from parsers.events import IGNORED, PARSED

DECODE = (
    "Decode batch, #running-req: 4, #full token: 1051, full token usage: 0.20, mamba num: 16, mamba usage: 0.20, "
    "cuda graph: True, gen throughput (token/s): 453.12, #queue-req: 0"
)
STATS = (
    "Avg prompt throughput: 512.3 tokens/s, Avg generation throughput: 88.1 tokens/s, Running: 6 reqs, Swapped: 0 reqs, "
    "Pending: 1 reqs, GPU KV cache usage: 23.5%, CPU KV cache usage: 0.0%."
)
T = calendar.timegm((2026, 3, 2, 8, 1, 44))  # the suite reads zone-less times in UTC (tests/conftest.py)


def test_every_start_the_sglang_dispatch_tests_is_a_message_start() -> None:
    """One fact in two places, checked: each ``msg.startswith("...")`` in sglang._dispatch (and the
    uvicorn test) is a start ``starts_message`` knows, so the generic reader finds that message."""
    tree = ast.parse(inspect.getsource(sglang._dispatch))
    literals = [
        n.args[0].value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "startswith" and n.args and isinstance(n.args[0], ast.Constant)
    ]
    assert len(literals) > 15
    for lit in literals:  # ('Use ' is tested with what follows it: 'Use sliding window memory')
        assert any(st.startswith(lit) or lit.startswith(st) for st in sglang.MESSAGE_STARTS), lit


def test_every_vllm_first_word_is_a_message_start() -> None:
    for word in vllm._DISPATCH:
        if word:
            assert vllm.starts_message(word + " x"), word
    assert vllm.starts_message("2 Engines Aggregated: Avg prompt throughput: 1.0 tokens/s")
    assert not vllm.starts_message("2 apples")


@pytest.mark.parametrize(
    ("line", "ts", "tags"),
    [
        (f"[2026-03-02 08:01:44][scheduler_metrics_mixin.py:212][INFO]: {DECODE}", T, ("0", None)),  # SGLANG_LOGGING_CONFIG_PATH
        (f"[2026-03-02 08:01:44.250][DP1 TP0][scheduler.py:212][INFO]: {DECODE}", T + 0.25, ("1", 0)),
        (f"2026-03-02 08:01:44,250 - sglang.srt.managers.scheduler - INFO - {DECODE}", T + 0.25, ("0", None)),  # logging cookbook
        (f"2026-03-02 08:01:44.250 | INFO     | sglang.srt.managers.scheduler:log_decode:301 - {DECODE}", T + 0.25, ("0", None)),  # loguru
        (f"2026-03-02T08:01:44.250000Z [info     ] {DECODE}", T + 0.25, ("0", None)),  # structlog ConsoleRenderer
        (f"2026-03-02T09:01:44+01:00 INFO TP1 {DECODE}", T, ("0", 1)),
        (f"[Bug] [2026-03-02 08:01:44 TP0] {DECODE}", T, ("0", 0)),  # a paste
        (f"[node-3] [2026-03-02 08:01:44 DP2 TP2] {DECODE}", T, ("2", 2)),
        (f"Mar  2 08:01:44 INFO {DECODE}", T, ("0", None)),  # syslog's year-less date takes the year given
    ],
)
def test_a_header_no_fast_path_reads(line: str, ts: float, tags: tuple) -> None:
    r = parse_line(line, None, 2026)
    assert r.outcome == PARSED and r.engine == "sglang" and r.event.running == 4
    assert r.ts == pytest.approx(ts) and (r.dp_rank, r.tp_rank) == tags


def test_the_issues_paste_with_the_writers_words_glued_after() -> None:
    line = (
        "[Bug] [2026-03-02 08:01:44 TP0] max_total_num_tokens=1284736, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=19, context_len=262144, available_gpu_mem=12.03 GB   is this right?"
    )
    r = parse_line(line, None)
    assert r.outcome == PARSED and r.event.values["max_running_requests"] == 19 and r.ts == T


def test_a_known_message_without_a_readable_time_still_counts() -> None:
    r = parse_line(f"[scheduler.py:212][INFO]: {DECODE}", None)
    assert r.outcome == PARSED and r.ts is None and r.tod is None


@pytest.mark.parametrize(
    "line",
    [
        f"I see {DECODE}",  # prose before it: not a header
        f"the log says: {DECODE}",
        "2026-03-02 08:01:44 - worker - INFO - nothing an engine prints",
        "[12:00:01] some other program's line",
    ],
)
def test_prose_or_another_programs_line_is_not_read(line: str) -> None:
    assert parse_line(line, None).outcome == IGNORED


def test_vllm_behind_a_collector_stamp_and_a_logging_prefix() -> None:
    r = parse_line(f"[2025-01-09 11:20:03] INFO 01-09 03:20:03 metrics.py:455] {STATS}", None, 2026)
    assert r.engine == "vllm" and r.event.running == 6
    assert r.ts == calendar.timegm((2025, 1, 9, 3, 20, 3))  # the engine's own time, the stamp's year
    r = parse_line(f"[node-3] (EngineCore_DP1 pid=7) INFO 03-02 08:01:44 [loggers.py:127] Engine 001: {STATS}", None, 2026)
    assert r.engine == "vllm" and r.dp_rank == "1" and r.ts == T


# ------------------------------------------------------------------------------------------
# structured records, rendered by the real formatters


def _record(msg: str, **extra) -> logging.LogRecord:
    return logging.makeLogRecord(
        {"msg": msg, "levelname": "INFO", "levelno": 20, "name": "sglang.srt", "created": T + 0.5, "msecs": 500.0, **extra}
    )


def test_python_json_logger() -> None:
    from pythonjsonlogger.json import JsonFormatter

    line = JsonFormatter("%(asctime)s %(levelname)s %(name)s %(processName)s %(process)d %(message)s").format(
        _record(DECODE, dp_rank=1, tp_rank=0)
    )
    r = parse_line(line, None)
    assert r.outcome == PARSED and r.engine == "sglang" and (r.dp_rank, r.tp_rank) == ("1", 0) and r.ts == T + 0.5
    line = JsonFormatter("%(asctime)s %(message)s", timestamp=True).format(_record(DECODE))
    assert parse_line(line, None).ts == pytest.approx(T + 0.5)  # its ISO 'timestamp' with a zone


def test_structlog_json_and_logfmt() -> None:
    import structlog

    ev = {"event": DECODE, "level": "info", "timestamp": "2026-03-02T08:01:44.500000Z", "tp_rank": 1}
    for render in (structlog.processors.JSONRenderer(), structlog.processors.LogfmtRenderer()):
        r = parse_line(render(None, None, dict(ev)), None)
        assert r.outcome == PARSED and r.ts == T + 0.5 and r.tp_rank == 1, render


@pytest.mark.parametrize(
    "line",
    [
        f'ts=2026-03-02T08:01:44.500Z caller=scheduler.go:12 level=info msg="{DECODE}"',  # go-kit
        f'time="2026-03-02T08:01:44.500Z" level=info msg="{DECODE}"',  # logrus
        f'at=INFO when=2026-03-02T08:01:44.500Z msg="{DECODE}"',  # logfmter
        json.dumps({"timestamp": "2026-03-02T08:01:44.500Z", "level": "INFO", "fields": {"message": DECODE}, "target": "x"}),  # tracing
        json.dumps({"jsonPayload": {"message": DECODE}, "timestamp": "2026-03-02T08:01:44.500Z"}),  # Cloud Logging
        json.dumps({"MESSAGE": DECODE, "__REALTIME_TIMESTAMP": str(int((T + 0.5) * 1e6))}),  # journalctl -o json
        json.dumps({"message": DECODE, "ts": T + 0.5}),
        json.dumps({"message": DECODE, "ts": int((T + 0.5) * 1000)}),
        json.dumps({"message": DECODE, "time": int((T + 0.5) * 1e9)}),
        json.dumps({"text": "...", "record": {"message": DECODE, "time": {"repr": "x", "timestamp": T + 0.5}}}),  # loguru serialize
        json.dumps(
            {
                "log": json.dumps({"asctime": "2026-03-02 08:01:44,500", "message": DECODE}) + "\n",
                "stream": "stderr",
                "time": "2026-03-02T08:01:45Z",
            }
        ),
    ],
)
def test_structured_shapes(line: str) -> None:
    r = parse_line(line, None)
    assert r.outcome == PARSED and r.event.running == 4, line
    assert r.ts == pytest.approx(T + 0.5), line


@pytest.mark.parametrize("line", ['{"message": 5}', "{", '["a"]', 'key=value other="x"', 'msg="unterminated', "{" * 5000 + "}" * 5000])
def test_bad_records_are_text(line: str) -> None:
    assert parse_line(line, None).outcome == IGNORED
