"""Line prefixes: collector wrappers, ANSI, and both engines' headers in every historical form."""

from __future__ import annotations

import time

import pytest

from parsers.header.prefix import rfc3339_epoch, split_header, strip_collector


def local(s: str) -> float:
    return time.mktime(time.strptime(s, "%Y-%m-%d %H:%M:%S"))


@pytest.mark.parametrize(
    "line,dp,tp,pp",
    [
        ("[2025-05-31 18:31:21 DP6 TP6] Decode batch. #running-req: 1", "6", 6, None),  # 0.4.6
        ("[2025-12-26 23:02:39 DP1 TP1 EP1] Decode batch, x", "1", 1, None),  # 0.5.x DP TP EP
        ("[2026-01-02 10:00:00 DP0 TP2 EP2 PP1] x", "0", 2, 1),  # 0.4.10 order DP TP EP PP
        ("[2026-02-02 10:00:00 DP1 PP1 TP3 EP3] x", "1", 3, 1),  # 0.5.5 order DP PP TP EP
        ("[2026-08-23 09:05:37 DP2 PP0 ATTN_CP1 MOE_DP1 TP5 EP5] x", "2", 5, 0),  # >=0.5.9
        ("[2026-08-23 09:05:37 TP0 EP0] x", "0", 0, None),
        ("[2026-03-14 04:59:11] Decode batch, x", "0", None, None),  # no tag at all
    ],
)
def test_sglang_rank_tags_every_order(line: str, dp: str, tp: int | None, pp: int | None) -> None:
    h = split_header(line, None, 2026)
    assert h.engine == "sglang"
    assert (h.dp_rank, h.tp_rank, h.pp_rank) == (dp, tp, pp)
    assert h.msg.startswith(("Decode batch", "x"))


def test_sglang_timestamp_with_and_without_ms() -> None:
    h = split_header("[2026-04-14 16:08:49 TP0] Load weight end.", None, 2026)
    assert h.ts == local("2026-04-14 16:08:49")
    h = split_header("[2026-04-14 16:08:49.123 TP0] Load weight end.", None, 2026)
    assert h.ts == pytest.approx(local("2026-04-14 16:08:49") + 0.123)


@pytest.mark.parametrize(
    "junk",
    ["/var/log/sglang/server.log:", "(SchedulerActor pid=123, ip=1.2.3.4) ", "sglang-1  | ", "2026-05-12T08:01:39.331095044Z stderr F "],
)
def test_sglang_header_after_junk(junk: str) -> None:
    line, _ = strip_collector(junk + "[2026-04-14 16:08:49 DP1 TP0] Decode batch, #running-req: 4")
    h = split_header(line, None, 2026)
    assert h.engine == "sglang" and h.dp_rank == "1" and h.msg.startswith("Decode batch")


@pytest.mark.parametrize(
    "line,proc,dp,level",
    [
        ("INFO 10-14 10:00:00 llm_engine.py:123] Avg prompt", None, "0", "INFO"),  # 0.2 - 0.7.3
        ("INFO 07-28 06:42:09 [loggers.py:118] Engine 000: Avg", None, "0", "INFO"),  # 0.8+
        ("(APIServer pid=1) INFO 11-01 10:00:00 [loggers.py:310] Engine 000: x", "APIServer", "0", "INFO"),
        ("(EngineCore_DP1 pid=1805889) INFO 10-23 15:14:30 [kv_cache_utils.py:1028] GPU KV", "EngineCore_DP1", "1", "INFO"),
        ("(EngineCore_0 pid=12) INFO 06-10 15:14:30 [core.py:1] x", "EngineCore_0", "0", "INFO"),
        ("(Worker_DP1_TP1 pid=9) WARNING 06-10 15:14:30 [gpu_worker.py:1] x", "Worker_DP1_TP1", "1", "WARNING"),
        ("(Worker_TP14_EP14 pid=9) INFO 06-10 15:14:30 [gpu_worker.py:1] x", "Worker_TP14_EP14", "0", "INFO"),
        ("(VllmWorker rank=0 pid=9) INFO 02-10 15:14:30 [gpu_worker.py:1] x", "VllmWorker", "0", "INFO"),
        ("(VllmWorkerProcess pid=9) INFO 02-10 15:14:30 worker.py:1] x", "VllmWorkerProcess", "0", "INFO"),
        ("DEBUG 07-06 10:54:37 [v1/metrics/loggers.py:236] x", None, "0", "DEBUG"),  # relative path at DEBUG
    ],
)
def test_vllm_headers(line: str, proc: str | None, dp: str, level: str) -> None:
    h = split_header(line, None, 2026)
    assert h.engine == "vllm"
    assert (h.process, h.dp_rank, h.level) == (proc, dp, level)
    assert h.ts == local("2026-" + line.split(level + " ", 1)[1][:14].replace(" ", " "))


def test_vllm_colour_prefix_and_crlf() -> None:
    raw = "\x1b[1;36m(APIServer pid=1)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m11-01 10:00:00\x1b[0m \x1b[90m[loggers.py:310]\x1b[0m Engine 001: x\r\n"
    line, _ = strip_collector(raw)
    h = split_header(line, None, 2026)
    assert h.engine == "vllm" and h.process == "APIServer" and h.msg == "Engine 001: x"


def test_vllm_logging_prefix_before_process() -> None:
    # >=0.31: VLLM_LOGGING_PREFIX + (Name pid=N) LEVEL ...
    h = split_header("myprefix (EngineCore_DP0 pid=7) INFO 11-01 10:00:00 [core.py:1] hello", None, 2026)
    assert h.engine == "vllm" and h.process == "EngineCore_DP0" and h.msg == "hello"


def test_collector_prefixes_give_timestamps() -> None:
    line, ts = strip_collector("2026-05-12T08:01:39.331095044Z stdout F INFO 05-12 08:01:39 [x.py:1] hi")
    assert line.startswith("INFO 05-12") and ts == pytest.approx(rfc3339_epoch("2026-05-12T08:01:39.331095044Z"))
    assert rfc3339_epoch("2026-05-12T10:01:39+02:00") == rfc3339_epoch("2026-05-12T08:01:39Z")
    line, ts = strip_collector("2026-05-01 19:08:53.840 | (APIServer pid=1) INFO 05-01 19:08:53 [a.py:1] hi")
    assert line.startswith("(APIServer") and ts == pytest.approx(local("2026-05-01 19:08:53") + 0.84)
    line, _ = strip_collector("авг 18 14:15:02 llm python3[28059]: INFO 08-18 14:15:02 [a.py:1] hi")
    assert line.startswith("INFO 08-18")


def test_tqdm_carriage_returns_keep_last_frame() -> None:
    line, _ = strip_collector("Capturing batches:  10%|█\rCapturing batches: 100%|██████████\r\n")
    assert line == "Capturing batches: 100%|██████████"


def test_no_header_is_not_an_engine_line() -> None:
    h = split_header("Traceback (most recent call last):", None, 2026)
    assert h.engine is None and h.msg == "Traceback (most recent call last):"
    # a known vLLM source still gets its process prefix stripped from header-less lines
    h = split_header("(EngineCore_DP1 pid=3) ValueError: max_num_seqs (512) exceeds", "vllm", 2026)
    assert h.engine == "vllm" and h.dp_rank == "1" and h.msg.startswith("ValueError")


def test_json_wrappers_docker_and_vllm_json_formatter() -> None:
    from parsers import parse_line

    docker = (
        '{"log":"[2026-08-14 08:17:30 DP1 TP0] Decode batch, #running-req: 4, #full token: 1051, full token usage: 0.20, '
        'mamba num: 16, mamba usage: 0.20, cuda graph: True, gen throughput (token/s): 453.12, #queue-req: 0\\n",'
        '"stream":"stderr","time":"2026-08-14T08:17:30.1Z"}'
    )
    p = parse_line(docker)
    assert p.outcome == "parsed" and p.engine == "sglang" and p.dp_rank == "1" and p.event.running == 4
    vjson = (
        '{"asctime": "2026-11-01 10:00:00,123", "levelname": "INFO", "name": "vllm.v1.core.kv_cache_utils", '
        '"processName": "EngineCore_DP1", "process": 7, "message": "GPU KV cache size: 973,760 tokens"}'
    )
    p = parse_line(vjson)
    assert p.engine == "vllm" and p.dp_rank == "1" and p.event.tokens == 973760
    assert p.ts == pytest.approx(local("2026-11-01 10:00:00") + 0.123)  # the JSON time keeps its milliseconds
    assert parse_line('{"not": "a log"}').outcome == "ignored"
    assert parse_line("{broken json").outcome == "ignored"


def test_compose_timestamp_prefix_gives_time_and_long_lines_stay_linear() -> None:
    line, ts = strip_collector("2026-05-01 19:08:53.840 | (APIServer pid=1) INFO 05-01 19:08:53 [a.py:1] hi")
    assert ts == pytest.approx(local("2026-05-01 19:08:53") + 0.84)
    line, ts = strip_collector("A" * 2_000_000)  # no catastrophic backtracking in the compose alternative
    assert len(line) == 2_000_000 and ts is None
