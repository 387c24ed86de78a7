"""A known message wrapped by a terminal (hard wrap at the terminal width, continuation lines
without header) is joined back where that is unambiguous: the first line is a known message cut
short, each continuation has no header, carries nothing on its own and is no wider than the
first. Real format: SGLang's mamba cap warning (>=0.5.17), vLLM's stats line."""

from __future__ import annotations

import time

import pytest

from exporter.app import exposition, new_pipeline

CAP = (
    "max_running_requests is capped to 9 by the mamba state cache (max_mamba_cache_size=47, 5 state slots per "
    "request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size "
    "with --mamba-ssm-dtype bfloat16."
)
DECODE = (
    "[2026-08-23 09:06:{s:02d} TP0] Decode batch, #running-req: 9, #full token: 20902, full token usage: 0.10, mamba num: 45, "
    "mamba usage: 0.96, cuda graph: True, gen throughput (token/s): 466.71, #queue-req: 13"
)
ACCESS = '[2026-08-23 09:05:30] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK'


def wrap(line: str, width: int) -> list[str]:
    return [line[i : i + width] for i in range(0, len(line), width)]


def run(lines: list[str], how: str = "line"):
    pipe = new_pipeline(None)
    if how == "line":
        for ln in lines:
            pipe.feed("s", ln)
    elif how == "list":
        pipe.feed_lines("s", lines)
    else:
        pipe.feed_text("s", "".join(ln + "\n" for ln in lines))
    pipe.finish()
    return pipe


def capped(pipe) -> tuple[float | None, float | None]:
    c = pipe.sources["s"].servers["0"].capacity if "0" in pipe.sources["s"].servers else {}
    return c.get("mamba_capped_max_running_requests"), c.get("mamba_slots_per_request")


@pytest.mark.parametrize("width", [60, 76, 80, 120])
@pytest.mark.parametrize("head", ["[2026-08-23 09:05:37 TP0] ", "[09:05:37 TP0] ", ""])
def test_wrapped_cap_warning_is_joined(width: int, head: str) -> None:
    lines = [ACCESS] if head else []  # a bare paste: the engine is not known yet either
    lines += wrap(head + CAP, width)
    pipe = run(lines)
    assert capped(pipe) == (9.0, 5.0)
    src = pipe.sources["s"]
    assert src.engine == "sglang" and src.lines["unrecognized"] == 0
    assert sum(src.lines.values()) == len(lines)


@pytest.mark.parametrize("how", ["line", "list", "text"])
def test_joined_among_batch_lines_whatever_the_path(how: str) -> None:
    """Between batch lines (the bulk scanner's runs) the held line keeps its place in the log."""
    lines = [ACCESS] + [DECODE.format(s=s) for s in range(0, 40)]
    lines += wrap("[2026-08-23 09:06:40 TP0] " + CAP, 76) + [DECODE.format(s=s) for s in range(41, 59)]
    lines = lines * 3
    want = exposition(run(lines, "line"))
    assert exposition(run(lines, how)) == want
    assert capped(run(lines, how)) == (9.0, 5.0)
    assert b'outcome="unrecognized",source="s"} 0.0' in want


def test_continuation_wider_than_the_first_line_is_not_joined() -> None:
    first, rest = CAP[:50], CAP[50:]
    pipe = run([ACCESS, "[2026-08-23 09:05:37 TP0] " + first, rest])
    assert capped(pipe) == (None, None)
    assert pipe.sources["s"].lines["unrecognized"] == 1


def test_a_line_with_a_header_ends_the_wrap() -> None:
    pieces = wrap("[2026-08-23 09:05:37 TP0] " + CAP, 76)
    pipe = run([ACCESS, pieces[0], DECODE.format(s=1), *pieces[1:]])
    assert capped(pipe) == (None, None)
    src = pipe.sources["s"]
    assert src.lines["unrecognized"] == 1 and src.lines["parsed"] == 1  # the cut warning, the decode line


def test_a_held_line_is_counted_at_the_end_of_input_or_when_the_source_goes_quiet() -> None:
    piece = wrap("[2026-08-23 09:05:37 TP0] " + CAP, 76)[0]
    pipe = new_pipeline(None)
    pipe.feed("s", ACCESS)
    pipe.feed("s", piece)
    assert pipe.sources["s"].lines["unrecognized"] == 0  # held: the next line may continue it
    pipe.tick(time.monotonic() + 11)  # the ingest tick, 11 s of wall time later
    assert pipe.sources["s"].lines["unrecognized"] == 1
    pipe = run([ACCESS, piece])
    assert pipe.sources["s"].lines["unrecognized"] == 1


def test_wrapped_vllm_stats_line() -> None:
    line = (
        "(APIServer pid=1) INFO 09-30 16:05:20 [loggers.py:127] Engine 000: Avg prompt throughput: 812.0 tokens/s, Avg "
        "generation throughput: 240.4 tokens/s, Running: 14 reqs, Waiting: 0 reqs, GPU KV cache usage: 91.0%, Prefix cache hit rate: 47.5%"
    )
    pipe = run(["(APIServer pid=1) INFO 09-30 16:05:10 [api_server.py:1000] vLLM API server version 0.11.1", *wrap(line, 80)])
    g = pipe.sources["s"].servers["0"].gauges
    assert g["running_requests"] == 14 and g["prefix_cache_hit_ratio"] == 0.475
    assert pipe.sources["s"].servers["0"].counters["stats_lines"] == 1
