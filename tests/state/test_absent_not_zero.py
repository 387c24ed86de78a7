"""The contract's "absent, not 0": a series exists only once a log line carried its field, for every
label value of every family that reads a field. Checked on every fixture against an oracle that
parses each line on its own, and on small logs written for the cases that went wrong.

Families whose 0 is a fact about the exporter rather than a field of the log are not field-backed:
``exporter_lines_total{outcome}`` (lines read), ``server_restarts_total`` (boots seen),
``finding{rule}`` (0 = the rule was evaluated and does not fire), and the info families.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import exposition, new_pipeline, replay
from exporter.reading.reader import read_lines
from exporter.state.store import BATCH_GAUGES
from parsers import events as ev
from parsers import parse_line

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted(p for d in ("sglang", "vllm", "scenarios", "demo") for p in (ROOT / "fixtures" / d).glob("*.log"))
P = "hybrid_cache_"
RUNTIME = {P + name for _, name in BATCH_GAUGES}
COUNTERS = {
    "decode_batches_total",
    "prefill_batches_total",
    "stats_lines_total",
    "preempted_requests_total",
    "retractions_total",
    "retracted_mamba_slots_total",
    "spec_accepted_tokens_total",
    "spec_drafted_tokens_total",
}
FIELD_BACKED = RUNTIME | {P + c for c in COUNTERS} | {P + "prefill_tokens_total", P + "mamba_state_bytes", P + "replayssm_buffer_bytes"}


def evidence(path: Path, engine: str | None) -> set[tuple[str, str]]:
    """(sample name, extra label value or '') for every field some line of the log carried."""
    have: set[tuple[str, str]] = set()
    gauge_of = dict(BATCH_GAUGES)
    for raw in read_lines(str(path)):
        e = parse_line(raw, engine).event
        if type(e) is ev.BatchStats:
            for attr, name in gauge_of.items():
                if getattr(e, attr) is not None:
                    have.add((P + name, ""))
            if e.kind in ("decode", "prefill", "stats"):
                have.add(
                    (P + {"decode": "decode_batches_total", "prefill": "prefill_batches_total", "stats": "stats_lines_total"}[e.kind], "")
                )
            if e.kind == "prefill":
                if e.new_tokens is not None:
                    have.add((P + "prefill_tokens_total", "new"))
                if e.cached_tokens is not None:
                    have.add((P + "prefill_tokens_total", "cached"))
            if e.preemptions is not None:
                have.add((P + "preempted_requests_total", ""))
        elif type(e) is ev.Retraction and not e.test:
            have |= {(P + "preempted_requests_total", ""), (P + "retractions_total", "")}
            if e.mamba_num_gained is not None:
                have.add((P + "retracted_mamba_slots_total", ""))
        elif type(e) is ev.Preemption:
            have.add((P + "preempted_requests_total", ""))
        elif type(e) is ev.SpecDecoding:
            for attr, name in (
                ("mean_accept_length", "spec_accept_length"),
                ("accept_rate", "spec_accept_ratio"),
                ("accepted_tokens", "spec_accepted_tokens_total"),
                ("drafted_tokens", "spec_drafted_tokens_total"),
            ):
                if getattr(e, attr) is not None:
                    have.add((P + name, ""))
        elif type(e) is ev.MambaCacheAllocated:
            have |= {(P + "mamba_state_bytes", "conv"), (P + "mamba_state_bytes", "ssm")}
            if e.intermediate_ssm_bytes is not None:
                have.add((P + "mamba_state_bytes", "intermediate_ssm"))
            if e.intermediate_conv_bytes is not None:
                have.add((P + "mamba_state_bytes", "intermediate_conv"))
        elif type(e) is ev.ReplaySSMBuffers:
            have |= {(P + "replayssm_buffer_bytes", k) for k in e.buffers}
    return have


def exported(text: bytes) -> set[tuple[str, str]]:
    """(sample name, extra label value or '') of every field-backed series of an exposition."""
    out: set[tuple[str, str]] = set()
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            if s.name in FIELD_BACKED:
                extra = s.labels.get("kind") or s.labels.get("state") or s.labels.get("buffer") or ""
                out.add((s.name, extra))
    return out


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_series_exists_exactly_when_the_log_carried_its_field(path: Path) -> None:
    pipe, failed = replay([str(path)], None, None, None)
    assert failed == 0
    (src,) = pipe.sources.values()
    got, want = exported(exposition(pipe)), evidence(path, src.engine)
    assert got - want == set(), "exported although no line carried the field (absent, not 0)"
    assert want - got == set(), "a field the log carried is not exported"


PREFILL_NO_CACHED = (
    "[2025-05-31 18:31:2{s} DP0 TP0] Prefill batch. #new-seq: 1, #new-token: 812, token usage: 0.05, #running-req: 3, #queue-req: 0"
)


def test_prefill_tokens_only_for_the_kinds_the_lines_carried() -> None:
    """A prefill line without ``#cached-token`` (a trimmed paste, or an engine that does not print
    it) counts new tokens; the cached kind stays absent instead of 0."""
    pipe = new_pipeline("sglang")
    for s in "0123":
        pipe.feed("s", PREFILL_NO_CACHED.format(s=s))
    pipe.finish()
    text = exposition(pipe).decode()
    assert 'kind="new"' in text and "3248.0" in text
    assert 'kind="cached"' not in text


def test_retraction_with_zero_mamba_slots_gained_is_a_zero_not_absent() -> None:
    """A field carried as 0 is a 0 (the other half of the contract)."""
    pipe = new_pipeline("sglang")
    pipe.feed(
        "s",
        "[2026-09-13 16:06:07 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 646, "
        "#mamba_num_gained: 0, #new_token_ratio: 0.0980 -> 0.3487",
    )
    text = exposition(pipe).decode()
    assert 'hybrid_cache_retracted_mamba_slots_total{dp_rank="0",engine="sglang",source="s"} 0.0' in text


def test_vllm_v0_prefix_cache_lines_feed_the_hit_ratio_only() -> None:
    """V0 prints the prefix-cache hit rate on a line of its own after each stats line: the ratio is
    taken, but it is not a stats line."""
    pipe = new_pipeline(None)
    for t in ("15", "25", "35", "45"):
        pipe.feed(
            "s",
            f"INFO 11-20 09:15:{t} metrics.py:449] Avg prompt throughput: 512.3 tokens/s, Avg generation throughput: 40.1 tokens/s, "
            "Running: 3 reqs, Swapped: 0 reqs, Pending: 1 reqs, GPU KV cache usage: 21.4%, CPU KV cache usage: 0.0%.",
        )
        pipe.feed("s", f"INFO 11-20 09:15:{t} metrics.py:465] Prefix cache hit rate: GPU: 45.{t}%, CPU: 0.00%")
    text = exposition(pipe).decode()
    assert 'hybrid_cache_stats_lines_total{dp_rank="0",engine="vllm",source="s"} 4.0' in text
    assert 'hybrid_cache_prefix_cache_hit_ratio{dp_rank="0",engine="vllm",source="s"} 0.4545' in text


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_runtime_gauge_is_the_last_line_that_carried_it(path: Path) -> None:
    """Item 1 on the real fixtures: whatever was sampled, each runtime gauge is the value of the
    last line in log order that carried its field (lines of the rank that speaks for its group)."""
    pipe, _ = replay([str(path)], None, None, None)
    (src,) = pipe.sources.values()
    want: dict[str, dict[str, float]] = {}
    speaker: dict[str, tuple[int, int]] = {}
    spec = (("mean_accept_length", "spec_accept_length"), ("accept_rate", "spec_accept_ratio"))
    engine = None  # vLLM: a SpecDecoding line is the engine's whose stats line it follows (docs/formats/vllm.md)
    for raw in read_lines(str(path)):
        line = parse_line(raw, src.engine)
        e = line.event
        if type(e) not in (ev.BatchStats, ev.SpecDecoding):
            continue
        if type(e) is ev.BatchStats and e.kind == "stats":
            engine = line.dp_rank if e.engine_index is not None else None
        elif type(e) is ev.SpecDecoding and engine is not None:
            line.dp_rank = engine
        if line.tp_rank is not None or line.pp_rank is not None:
            rank = (line.pp_rank or 0, line.tp_rank or 0)
            if line.dp_rank in speaker and rank > speaker[line.dp_rank]:
                continue
            speaker[line.dp_rank] = min(rank, speaker.get(line.dp_rank, rank))
        g = want.setdefault(line.dp_rank, {})
        for attr, name in BATCH_GAUGES if type(e) is ev.BatchStats else spec:
            v = getattr(e, attr)
            if v is not None:
                g[name] = float(v)
    got = {dp: dict(srv.gauges) for dp, srv in src.servers.items() if srv.gauges}
    assert got == {dp: g for dp, g in want.items() if g}
