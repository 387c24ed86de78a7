"""A message a writer cut or a terminal wrapped (continuation lines without header) is joined back
on proof only (the numbered rules at the top of exporter/state/wrapped.py): the first line is provably
incomplete (a known message cut short, or one that parsed but is provably cut), each continuation
has no header, carries nothing on its own, is no other writer's line, and continues it. Real
formats: SGLang's mamba cap warning (>=0.5.17) and startup lines, vLLM's stats line and
`non-default args`."""

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


# ----------------------------------------------------------------------------------------
# issue 29, item 1: a join only on proof (the rules at the top of exporter/state/wrapped.py)

DOWNLOAD = "config.json: 4.33kB [00:00, 24.6MB/s]"
SHARD = "model-00001-of-00004.safetensors: 100%|██████████| 4.97G/4.97G [00:21<00:00, 231MB/s]"
PRINTS = ["Hello from the chat template, rendering 3 messages", "42", "{'role': 'user', 'content': 'max_running_requests=9'}"]
V_HEAD = "(APIServer pid=1) INFO 09-30 16:03:10 [utils.py:326] "
V_ARGS = "non-default args: {'model': 'Qwen/Qwen3.6-35B-A3B', 'max_num_seqs': 16, 'kv_cache_dtype': 'fp8'}"
V_BANNER = "(APIServer pid=1) INFO 09-30 16:03:09 [api_server.py:1839] vLLM API server version 0.11.0"


def _config(pipe) -> dict:
    return pipe.sources["s"].config


@pytest.mark.parametrize("other", [DOWNLOAD, SHARD, *PRINTS])
def test_rule_1_a_whole_message_is_never_extended(other: str) -> None:
    """A startup message that parses and is not provably cut is never held: the next writer's
    line, whatever it is, is not glued to it (before: `non-default args` lost, the version and
    the KV dtype exported with a download bar in them)."""
    pipe = run([V_BANNER, V_HEAD + V_ARGS, other, V_HEAD + "Using max model len 262144"])
    assert _config(pipe)["max_num_seqs"] == 16 and _config(pipe)["kv_cache_dtype"] == "fp8"
    assert pipe.sources["s"].version == "0.11.0"
    pipe = run([ACCESS, "[2026-08-23 09:05:10] Using KV cache dtype: torch.bfloat16", other, DECODE.format(s=1)])
    assert _config(pipe)["kv_cache_dtype"] == "torch.bfloat16"
    args = "[2026-08-23 09:05:02] server_args={'model_path': 'Qwen/Qwen3.6-35B-A3B', 'tp_size': 2}"
    pipe = run([args, other, DECODE.format(s=1)])
    assert _config(pipe)["tp_size"] == 2 and _config(pipe)["model_path"] == "Qwen/Qwen3.6-35B-A3B"
    assert pipe.sources["s"].lines["unrecognized"] == 0


@pytest.mark.parametrize("width", [30, 40, 60, 76, 80, 120])
@pytest.mark.parametrize("engine_known", [True, False])
def test_rule_3a_a_word_wrapped_cap_warning_without_header(width: int, engine_known: bool) -> None:
    """The cap warning as a terminal or a mail client wraps it, at spaces (the space at each
    break dropped), without a header, before or after the engine is known."""
    import textwrap

    pieces = textwrap.wrap(CAP, width)
    lines = ([H + KV] if engine_known else []) + pieces
    pipe = run(lines)
    assert capped(pipe) == (9.0, 5.0)
    src = pipe.sources["s"]
    assert src.lines["unrecognized"] == 0 and sum(src.lines.values()) == len(lines)


@pytest.mark.parametrize("rest", ["conv_state size: 0.03GB, ssm_state size: 1.10GB", " conv_state size: 0.03GB, ssm_state size: 1.10GB"])
@pytest.mark.parametrize("head", [H, ""])
def test_rule_3a_mamba_line_cut_after_the_comma(rest: str, head: str) -> None:
    """`Mamba Cache is allocated. max_mamba_cache_size: N,` and the rest on the next line, the
    space after the comma kept or not, with or without a header."""
    pipe = run([H + KV, head + "Mamba Cache is allocated. max_mamba_cache_size: 47,", rest, DECODE.format(s=1)])
    cap = pipe.sources["s"].servers["0"].capacity
    assert cap["mamba_capacity_slots"] == 47
    assert pipe.sources["s"].lines == {"parsed": 4, "ignored": 0, "unrecognized": 0}


@pytest.mark.parametrize("noise", [DOWNLOAD, SHARD, *PRINTS, ""])
def test_rule_5_other_writers_lines_between_the_pieces(noise: str) -> None:
    """A progress bar, a print() or an empty line between a cut message and its rest: the
    message is still joined, the line between counted ignored."""
    for message, cut in ((MAMBA, "max_mamba_cache_size: 47,"), (SUMMARY, "chunked_prefill_size=8192,"), (CAP, "by the mamba state")):
        first, rest = _cut_after(H + message, cut)
        want = run([ACCESS, H + message, DECODE.format(s=1)])
        got = run([ACCESS, first, noise, rest, DECODE.format(s=1)])
        assert got.sources["s"].servers["0"].capacity == want.sources["s"].servers["0"].capacity, message
        assert got.sources["s"].lines["ignored"] == want.sources["s"].lines["ignored"] + 1


def test_rule_2_a_value_the_cut_may_have_shortened_is_never_applied() -> None:
    """The summary cut inside a number (`chunked_prefill_size=81` of 8192): held; what it says for
    sure (up to its last comma) is applied at once, the shortened value never, and the rest
    completes it; noise between changes nothing. Never joined: the value is missing, not wrong."""
    first, rest = (H + SUMMARY).split("=8192", 1)[0] + "=81", "92" + (H + SUMMARY).split("=8192", 1)[1]
    live = new_pipeline(None)
    for ln in (ACCESS, first):
        live.feed("s", ln)
    cap = live.sources["s"].servers["0"].capacity
    assert cap["kv_capacity_tokens"] == 211360 and "chunked_prefill_size_tokens" not in cap
    for ln in ("42", DOWNLOAD, rest):
        live.feed("s", ln)
    assert cap["chunked_prefill_size_tokens"] == 8192 and cap["max_running_requests"] == 9
    alone = run([ACCESS, first, DECODE.format(s=1)])
    assert "chunked_prefill_size_tokens" not in alone.sources["s"].servers["0"].capacity
    assert alone.sources["s"].lines == {"parsed": 2, "ignored": 1, "unrecognized": 0}


def test_rule_4_a_damaged_message_is_not_a_piece() -> None:
    """A damaged or abridged known message (`conv_state 0.09GB`, `K 19.98 GB` without `size:`) is
    no prefix of one: it is not held, and the next one is not swallowed as its piece; each is
    counted unrecognized, also before the engine is known (a bare paste)."""
    damaged = [
        "Mamba Cache is allocated. max_mamba_cache_size: 47, conv_state 0.09GB, ssm_state 1.10GB",
        "KV Cache is allocated. #tokens: 211360, K 19.98 GB, V 19.98 GB",
    ]
    pipe = run([H + KV, *damaged])
    assert pipe.sources["s"].lines == {"parsed": 1, "ignored": 0, "unrecognized": 2}
    pipe = run([*damaged, H + KV])
    assert pipe.sources["s"].lines == {"parsed": 1, "ignored": 0, "unrecognized": 2}
    assert pipe.sources["s"].engine == "sglang"


def test_rule_1a_a_message_of_its_own_is_not_taken_for_a_cut_one() -> None:
    """`Using MoEPrepareAndFinalizeNoDPEPModular` begins like `Using <dtype> data type to store kv
    cache` would, but ends after a free word: a message of its own, not held (the real vLLM's)."""
    pipe = run([V_BANNER, V_HEAD + "Using MoEPrepareAndFinalizeNoDPEPModular", "X86CPUUnquantizedExperts MoE backend"])
    assert pipe.sources["s"].lines == {"parsed": 1, "ignored": 2, "unrecognized": 0}


@pytest.mark.parametrize("noise", [[], [DOWNLOAD], [DOWNLOAD, "42", ""]])
def test_the_proof_of_a_joined_fact_is_its_first_line_and_its_span(noise: list[str]) -> None:
    """A message joined across other writers' lines is proved by its first line, spanning to its
    last piece (exporter/state/provenance.py), whatever stands between (replay --explain, report --json)."""
    from exporter.presentation.explain import proofs

    for message, cut in ((MAMBA, "max_mamba_cache_size: 47,"), (SUMMARY, "chunked_prefill_size=8192,")):
        first, rest = _cut_after(H + message, cut)
        pipe = run([ACCESS, H + KV, first, *noise, rest, DECODE.format(s=1)])
        src = pipe.sources["s"]
        key = "mamba_capacity_slots" if message is MAMBA else "max_running_requests"
        (r,) = [r for r in proofs(src, src.servers["0"]) if r.get("key", "").endswith(key) or key in r["metric"]]
        assert (r["line"], r["lines"]) == (3, len(noise) + 2), r
