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


def test_a_wider_continuation_is_joined_only_when_the_joined_text_parses() -> None:
    """A writer's cut (not a terminal's) leaves a short first line and a longer rest: joined when
    the joined text parses at once; a wider line that does not complete it is a line of its own."""
    first, rest = CAP[:50], CAP[50:]
    pipe = run([ACCESS, "[2026-08-23 09:05:37 TP0] " + first, rest])
    assert capped(pipe) == (9.0, 5.0)
    assert pipe.sources["s"].lines == {"parsed": 2, "ignored": 1, "unrecognized": 0}
    other = "a header-less line wider than the first one, which completes nothing at all, not even a little"
    pipe = run([ACCESS, "[2026-08-23 09:05:37 TP0] " + first, other])
    assert capped(pipe) == (None, None)
    assert pipe.sources["s"].lines == {"parsed": 0, "ignored": 2, "unrecognized": 1}


H = "[2026-08-23 09:05:14 TP0] "
SUMMARY = (
    "max_total_num_tokens=211360, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=9, "
    "context_len=262144, available_gpu_mem=9.45 GB"
)
MAMBA = (
    "Mamba Cache is allocated. max_mamba_cache_size: 47, conv_state size: 0.03GB, ssm_state size: 1.10GB, "
    "intermediate_ssm_state_cache size: 0.50GB, intermediate_conv_window_cache size: 0.02GB"
)
KV = "KV Cache is allocated. #tokens: 211360, K size: 3.22 GB, V size: 3.22 GB"
ARGS = (
    "server_args=ServerArgs(model_path='Qwen/Qwen3.6-35B-A3B', tp_size=2, dp_size=1, mem_fraction_static=0.8, "
    "max_running_requests=None, chunked_prefill_size=8192, max_mamba_cache_size=None, mamba_ssm_dtype='float32', "
    "mamba_full_memory_ratio=0.9, disable_radix_cache=False, speculative_algorithm=None, decode_log_interval=40)"
)


def _cut_after(line: str, text: str) -> list[str]:
    i = line.index(text) + len(text)
    return [line[:i], line[i:]]


@pytest.mark.parametrize(
    ("message", "cuts"),
    [
        pytest.param(MAMBA, ["max_mamba_cache_size: 47,"], id="mamba-first-alone-fails"),
        pytest.param(MAMBA, ["ssm_state size: 1.10GB,"], id="mamba-first-parses-alone"),
        pytest.param(KV, ["#tokens: 211360,"], id="kv"),
        pytest.param(SUMMARY, ["chunked_prefill_size=8192,"], id="summary-first-parses-alone"),
        pytest.param(ARGS, ["tp_size=2,", "chunked_prefill_size=8192,"], id="server-args-in-three"),
    ],
)
@pytest.mark.parametrize("how", ["line", "list", "text"])
def test_every_startup_message_cut_after_a_number_is_joined(message: str, cuts: list[str], how: str) -> None:
    whole = [ACCESS, H + message, DECODE.format(s=1)]
    pieces = [H + message]
    for c in cuts:
        pieces[-1:] = _cut_after(pieces[-1], c)
    cut = [ACCESS, *pieces, DECODE.format(s=1)]
    want, got = run(whole, how), run(cut, how)

    def samples(pipe) -> list[bytes]:  # the same series and values (a family may come in another order)
        return sorted(ln for ln in exposition(pipe).splitlines() if not ln.startswith(b"#") and b"lines_total" not in ln)

    assert samples(got) == samples(want)
    assert got.sources["s"].lines == {"parsed": 2 + len(cuts), "ignored": 1, "unrecognized": 0}


def test_a_line_that_parsed_alone_is_not_joined_with_what_says_nothing_more() -> None:
    pipe = run([ACCESS, H + SUMMARY, "Traceback (most recent call last):", DECODE.format(s=1)])
    assert pipe.sources["s"].lines == {"parsed": 2, "ignored": 2, "unrecognized": 0}
    assert pipe.sources["s"].servers["0"].capacity["max_running_requests"] == 9
    # a line that parsed alone is applied at once (a scrape sees it), and again when a piece says more
    live = new_pipeline(None)
    live.feed("s", ACCESS)
    first, rest = _cut_after(H + SUMMARY, "chunked_prefill_size=8192,")
    live.feed("s", first)
    cap = live.sources["s"].servers["0"].capacity
    assert cap["kv_capacity_tokens"] == 211360 and "max_running_requests" not in cap
    live.feed("s", rest)
    assert cap["max_running_requests"] == 9 and live.sources["s"].lines["parsed"] == 2


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
