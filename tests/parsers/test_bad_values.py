"""Gauges take what an engine prints: a usage ratio outside 0-1, a negative request or token count,
NaN or +-Inf in a batch or stats line is bad input. The line is `unrecognized` (counted, its
values taken by no gauge) on every path a line can take: parse_line, the sampler's learned-shape
fast path, the bulk scanner in C and its Python twin, line by line, as a list and as a block
(issue 23; docs/reading.md#values-gauges-take)."""

from __future__ import annotations

import math

import feed_support
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import exposition, new_pipeline
from exporter.state import scan as scan_mod
from parsers import parse_line
from parsers.events import PARSED, UNRECOGNIZED
from parsers.numbers import bad_value, is_nonnegative, is_ratio
from parsers.shapes import VALUE_PATTERNS, LineShapes

HEAD = "[2026-08-14 08:17:{s:02d} TP0] "
DECODE = (
    "Decode batch, #running-req: {running}, #full token: 1051, full token usage: 0.20, mamba num: 16, mamba usage: {mamba}, "
    "cuda graph: True, gen throughput (token/s): {gen}, #queue-req: 0"
)
GOOD = {"running": "4", "mamba": "0.20", "gen": "453.12"}
BAD = [
    ("mamba", "nan"),
    ("mamba", "inf"),
    ("mamba", "-inf"),
    ("mamba", "-0.10"),
    ("mamba", "1.70"),
    ("mamba", "1e3"),
    ("running", "-3"),
    ("gen", "-12.5"),
    ("gen", "nan"),
    ("gen", "inf"),
]


def decode(**kw: str) -> str:
    return DECODE.format(**{**GOOD, **kw})


def _values(text: bytes, name: str) -> dict[str, float]:
    out = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            if s.name == name:
                out[s.labels.get("outcome", "")] = s.value
    return out


@pytest.mark.parametrize(("field", "value"), BAD)
def test_parse_line_makes_the_line_unrecognized(field: str, value: str) -> None:
    r = parse_line(HEAD.format(s=1) + decode(**{field: value}), "sglang")
    assert r.outcome == UNRECOGNIZED and r.event is None
    assert "out of range" in r.reason or "not finite" in r.reason
    assert parse_line(HEAD.format(s=1) + decode(), "sglang").outcome == PARSED


@pytest.mark.parametrize(("field", "value"), BAD)
@pytest.mark.parametrize("path", feed_support.PATHS)
@pytest.mark.parametrize("pure", [False, True], ids=["native", "python"])
def test_every_path_counts_it_unrecognized_and_no_gauge_takes_it(field: str, value: str, path: str, pure: bool, monkeypatch) -> None:
    if pure:
        monkeypatch.setattr(scan_mod, "scan", scan_mod.scan_py)
        monkeypatch.setattr(scan_mod, "scan_text", scan_mod.scan_text_py)
        import exporter.state.pipeline as pipeline_mod

        monkeypatch.setattr(pipeline_mod, "scan", scan_mod.scan_py)
        monkeypatch.setattr(pipeline_mod, "scan_text", scan_mod.scan_text_py)
    prefill = "Prefill batch, #new-seq: 1, #new-token: 10, #cached-token: 0, full token usage: 0.20, mamba usage: 0.20, #running-req: 3, #queue-req: 0"
    lines = []
    n = 3000
    for i in range(n):
        h = HEAD.format(s=(i // 50) % 60)
        if i == n - 1:  # the last decode line of the log is the bad one: nothing after it to hide it
            lines.append(h + decode(**{field: value}))
        elif i % 5 == 0:
            lines.append(h + prefill)
        else:
            lines.append(h + decode())
    pipe = new_pipeline("sglang")
    feed_support.feed(pipe, path, lines)
    pipe.finish()
    text = exposition(pipe)
    assert _values(text, "hybrid_cache_exporter_lines_total") == {"parsed": n - 1, "ignored": 0, "unrecognized": 1}
    g = pipe.sources["s"].servers["0"].gauges
    assert g["mamba_usage_ratio"] == 0.20 and g["running_requests"] == 4 and g["generation_throughput_tokens_per_second"] == 453.12
    assert all(math.isfinite(v) for v in g.values())


@pytest.mark.parametrize(
    "line",
    [
        "(APIServer pid=1) INFO 09-30 16:05:20 [loggers.py:127] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
        "throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 150.0%, Prefix cache hit rate: 10.0%",
        "(APIServer pid=1) INFO 09-30 16:05:20 [loggers.py:127] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
        "throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 10.0%, Prefix cache hit rate: 101.0%",
    ],
)
def test_vllm_ratio_above_one_is_unrecognized(line: str) -> None:
    assert parse_line(line, "vllm").outcome == UNRECOGNIZED


def test_the_checks() -> None:
    assert is_ratio(0.0) and is_ratio(1.0) and is_ratio(None)
    assert not any(is_ratio(x) for x in (-0.01, 1.01, math.nan, math.inf))
    assert is_nonnegative(0) and is_nonnegative(1e12) and is_nonnegative(None)
    assert not any(is_nonnegative(x) for x in (-1, math.nan, math.inf, -math.inf))
    from parsers.events import BatchStats

    assert bad_value(BatchStats("decode", kv_usage=0.5, running=3)) is None
    assert bad_value(BatchStats("decode", kv_usage=1.5)) == "ratio out of range: kv_usage"
    assert bad_value(BatchStats("decode", queued=-1)) == "negative or not finite: queued"


@pytest.mark.parametrize(
    ("code", "good", "bad"),
    [
        ("r", ["0", "1", "0.80", "1.00", ".5", "0.", "0.5\r"], ["", "-0.1", "1.01", "2", "nan", "inf", "1e-1", " 0.5", "0,5"]),
        ("n", ["0", "12", "9" * 18, "3\r"], ["", "-1", "1.5", "9" * 19, "nan", " 3"]),
        ("f", ["0", "453.12", "12.", "7\r"], ["", "-1", "nan", "inf", "1e3", ".5", "1" * 16]),
    ],
)
def test_value_patterns_and_the_c_scanner_agree(code: str, good: list[str], bad: list[str]) -> None:
    """Each value check, as the line templates' regex and as the C scanner's value_ok, on one key."""
    import re

    rx = re.compile(VALUE_PATTERNS[code])
    spec = (("Decode batch, ", ("k",), None, None, code), ("Prefill batch, ", ("k",), None, None, code))
    scanners = [scan_mod.scan_py] + ([scan_mod.native.scan] if scan_mod.native is not None else [])
    for v in good + bad:
        want = v in good
        assert (rx.fullmatch(v) is not None) == want, (code, v)
        for fn in scanners:
            assert (fn([f"[2026-08-14 08:17:00] Decode batch, k: {v}"], 0, spec)[0] == 1) == want, (fn, code, v)


def test_a_shape_learned_from_good_lines_sends_bad_ones_to_the_generic_parser() -> None:
    shapes = LineShapes()
    good = HEAD.format(s=1) + decode()
    assert shapes.check_batch(good.split("] ", 1)[1]) == (None, None)
    bad = (HEAD.format(s=2) + decode(mamba="nan")).split("] ", 1)[1]
    assert type(shapes.check_batch(bad)).__name__ == "Unrecognized"
    assert shapes.batch_line(HEAD.format(s=2) + decode(mamba="nan")) is None
