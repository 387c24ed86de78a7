"""Counters only count: a count an engine cannot print (negative, fractional, non-finite, 10 or
more digits: parsers.numbers.MAX_COUNT) makes its line `unrecognized`, on every path a line can
take (line by line, the pipeline's fast path, the bulk scanner in C and its Python twin), and no
counter ever decreases."""

from __future__ import annotations

import feed_support
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import exposition, new_pipeline
from exporter.state import scan
from parsers import parse_line
from parsers.events import UNRECOGNIZED
from parsers.numbers import MAX_COUNT, bad_count, is_count

HEAD = "[2026-08-14 08:17:{s:02d} TP0] "
DECODE = (
    "Decode batch, #running-req: 4, #full token: 1051, full token usage: 0.20, mamba num: 16, mamba usage: 0.20, "
    "cuda graph: True, gen throughput (token/s): 453.12, #queue-req: 0"
)
PREFILL = (
    "Prefill batch, #new-seq: 1, #new-token: {new}, #cached-token: {cached}, full token usage: 0.20, mamba usage: 0.20, "
    "#running-req: 3, #queue-req: 0"
)
BAD = ["-1000000", "1" * 32, "1e9", "nan", "inf", "12.5", str(MAX_COUNT + 1), "-0x10"]


def _values(text: bytes, name: str) -> dict[str, float]:
    out = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            if s.name == name:
                out[s.labels.get("kind") or s.labels.get("outcome") or ""] = s.value
    return out


def _log(bad: str, n: int = 2000) -> list[str]:
    """A steady log (long enough for the scanner) with one bad prefill line in the middle."""
    lines = []
    for i in range(n):
        h = HEAD.format(s=i % 60)
        if i == n // 2:
            lines.append(h + PREFILL.format(new=bad, cached=7))
        elif i % 4 == 0:
            lines.append(h + PREFILL.format(new=100, cached=10))
        else:
            lines.append(h + DECODE)
    return lines


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("path", feed_support.PATHS)
def test_a_count_no_engine_prints_makes_the_line_unrecognized(bad: str, path: str) -> None:
    lines = _log(bad)
    pipe = new_pipeline("sglang")
    feed_support.feed(pipe, path, lines)
    pipe.finish()
    text = exposition(pipe)
    # 500 prefill lines, the one in the middle (i = 1000) is the bad one
    assert _values(text, "hybrid_cache_prefill_tokens_total") == {"new": 499 * 100, "cached": 499 * 10}
    assert _values(text, "hybrid_cache_exporter_lines_total")["unrecognized"] == 1
    assert _values(text, "hybrid_cache_prefill_batches_total") == {"": 499}


def test_the_issue_example_no_longer_takes_the_counter_negative() -> None:
    pipe = new_pipeline(None)
    pipe.feed("s", HEAD.format(s=1) + PREFILL.format(new=1000, cached=0))
    pipe.feed("s", HEAD.format(s=2) + PREFILL.format(new=-1000000, cached=0))
    pipe.finish()
    assert _values(exposition(pipe), "hybrid_cache_prefill_tokens_total")["new"] == 1000


@pytest.mark.parametrize("native", [True, False])
def test_both_scanners_stop_before_a_count_of_ten_digits(native: bool) -> None:
    if native and scan.native is None:
        pytest.skip("C scanner not built")
    run = scan.native.scan if native else scan.scan_py
    pipe = new_pipeline("sglang")
    pipe.feed_lines("s", _log("100"))  # learns the shapes
    sp = scan.spec(pipe.sampler.sampling["s"].shapes)
    assert sp is not None
    good = [HEAD.format(s=1) + PREFILL.format(new="9" * 9, cached=1)] * 3
    long = HEAD.format(s=1) + PREFILL.format(new="1" * 10, cached=1)
    r = run(good + [long] + good, 0, sp)
    assert r[0] == 3 and r[4] == {" TP0": 3 * MAX_COUNT}


def test_leading_zeros_are_a_count_not_garbage() -> None:
    """Ten digits with leading zeros: the scanner hands the line on, the line path counts it."""
    lines = _log("0000000042")
    pipe = new_pipeline("sglang")
    pipe.feed_lines("s", lines)
    pipe.finish()
    assert _values(exposition(pipe), "hybrid_cache_prefill_tokens_total")["new"] == 499 * 100 + 42


VLLM_BAD = [
    "INFO 08-14 08:17:30 [metrics.py:1] SpecDecoding metrics: Mean acceptance length: 2.50, Accepted throughput: 1.0 tokens/s, "
    "Drafted throughput: 2.0 tokens/s, Accepted: " + "9" * 32 + " tokens, Drafted: 40 tokens, Per-position acceptance rate: 0.8",
    "WARNING 08-14 08:17:30 [scheduler.py:1] Sequence group 0 is preempted by PreemptionMode.RECOMPUTE mode because there is not "
    "enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size "
    "to provide more KV cache memory. total_num_cumulative_preemption=" + "1" * 20,
]


@pytest.mark.parametrize("line", VLLM_BAD)
def test_vllm_counts_are_bounded_too(line: str) -> None:
    p = parse_line(line, "vllm")
    assert p.outcome == UNRECOGNIZED and "count out of range" in (p.reason or "")


def test_retraction_with_absurd_count_is_unrecognized_and_negative_gain_adds_nothing() -> None:
    bad = "[2026-08-14 08:17:30 TP0] KV cache pool is full. Retract requests. #retracted_reqs: " + "7" * 12 + ", #new_tokens_gained: 5"
    assert parse_line(bad, "sglang").outcome == UNRECOGNIZED
    ok = "[2026-08-14 08:17:31 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: -40, #mamba_num_gained: -3"
    pipe = new_pipeline("sglang")
    pipe.feed("s", ok)
    pipe.finish()
    srv = pipe.sources["s"].servers["0"]
    assert srv.counters["preempted_requests"] == 2
    assert srv.counters.get("retracted_mamba_slots", 0.0) == 0.0


def test_counter_steps_never_go_down() -> None:
    from exporter.state.store import ServerState

    s = ServerState("0")
    s.inc("x", 5)
    for step in (-3, float("nan"), float("-inf")):
        s.inc("x", step)
    assert s.counters["x"] == 5


def test_bounds() -> None:
    assert is_count(None) and is_count(0) and is_count(MAX_COUNT)
    assert not any(is_count(x) for x in (-1, MAX_COUNT + 1, 1.0, True, float("nan")))
    from parsers.events import BatchStats

    assert bad_count(BatchStats("prefill", new_tokens=-1)) == "new_tokens"
    assert bad_count(BatchStats("prefill", new_tokens=3, cached_tokens=4)) is None
