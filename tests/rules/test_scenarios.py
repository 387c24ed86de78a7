"""Scenario logs through the real CLI: the right findings and recommendations, none on the balanced
server, and replay == feeding the same lines one by one (log-time rules do not depend on how the
lines arrive)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.advice.recommend import observe
from exporter.app import new_pipeline
from exporter.catalogues.rulebook import RULE_IDS
from exporter.diagnosis.rules import Rules
from exporter.reading.offline import replay_files
from exporter.reading.reader import read_lines
from exporter.state.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "fixtures" / "scenarios"
DEMO = ROOT / "fixtures" / "demo" / "sglang-mamba-bound.log"

# file -> (findings that must be 1, {(rule, flag): (value or None (any value), rank)}: every exported recommendation)
EXPECTED = {
    "sglang-mamba-bound.log": (
        {"mamba_bound", "mamba_capped"},
        {
            **{
                (rule, flag): (value, rank)
                for rule in ("mamba_bound", "mamba_capped")
                for flag, value, rank in (
                    ("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", "1", "1"),  # no numerics changed, no memory moved: start here
                    ("--mamba-radix-cache-strategy", "extra_buffer_lazy", "2"),
                    ("--mamba-ssm-dtype", "bfloat16", "3"),  # twice the gain, but numerics and an assumed dtype
                    ("--enable-unified-memory", "true", "4"),
                )
            },
        },
    ),
    # the same server once its traffic ended: SGLang prints no batch line while idle, its probes show the silence;
    # mamba_bound ends with it, mamba_capped (a fact of the boot) stays (docs/rules.md#silence)
    "sglang-goes-silent.log": (
        {"mamba_capped"},
        {
            ("mamba_capped", flag): (value, rank)
            for flag, value, rank in (
                ("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", "1", "1"),
                ("--mamba-radix-cache-strategy", "extra_buffer_lazy", "2"),
                ("--mamba-ssm-dtype", "bfloat16", "3"),
                ("--enable-unified-memory", "true", "4"),
            )
        },
    ),
    "sglang-kv-bound.log": (
        {"kv_bound", "retraction_storm"},
        {
            ("kv_bound", "--kv-cache-dtype"): ("fp8_e4m3", "1"),
            ("retraction_storm", "--schedule-conservativeness"): ("1.3", "1"),
            ("retraction_storm", "--kv-cache-dtype"): ("fp8_e4m3", "2"),
        },
    ),
    "sglang-balanced.log": (set(), {}),
    "sglang-old-capped.log": ({"mamba_capped"}, {("mamba_capped", "--mamba-ssm-dtype"): ("bfloat16", "1")}),
    "vllm-max-num-seqs.log": ({"request_cap_bound"}, {("request_cap_bound", "--max-num-seqs"): ("32", "1")}),
}
# flags that must NOT be exported (filtered by what the log says, or carrying a caveat)
FORBIDDEN = {
    # the ratio and the slot count would shrink the KV pool below the 211,360 tokens a request may use now
    "sglang-mamba-bound.log": {"--mamba-full-memory-ratio", "--max-mamba-cache-size"},
    "sglang-goes-silent.log": {"--mamba-full-memory-ratio", "--max-mamba-cache-size"},
    # already bfloat16; the ratio that balances the usage (0.136) would cut the mamba cap 48 -> 24, below the 29
    # requests of 20,480 tokens the KV pool runs now: it lowers the concurrency (a caveat)
    "sglang-kv-bound.log": {"--mamba-ssm-dtype", "--mamba-full-memory-ratio"},
    # 0.5.10: no skip-lock, unified memory or lazy strategy; ratio and slot count shrink the KV pool below 226,560 tokens
    "sglang-old-capped.log": {
        "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK",
        "--enable-unified-memory",
        "--mamba-radix-cache-strategy",
        "--mamba-full-memory-ratio",
        "--max-mamba-cache-size",
    },
    "vllm-max-num-seqs.log": {"--mamba-ssm-dtype", "--mamba-full-memory-ratio"},  # SGLang flags
}


def cli_replay(path: Path) -> str:
    r = subprocess.run([sys.executable, "-m", "exporter", "replay", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def verdicts(text: str) -> tuple[dict[str, float], dict[tuple[str, str], tuple[str, str]], float | None]:
    findings: dict[str, float] = {}
    recs: dict[tuple[str, str], tuple[str, str]] = {}
    ratio = None
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "hybrid_cache_finding":
                findings[s.labels["rule"]] = s.value
            elif s.name == "hybrid_cache_recommendation_info":
                recs[(s.labels["rule"], s.labels["flag"])] = (s.labels["value"], s.labels["rank"])
            elif s.name == "hybrid_cache_recommended_mamba_full_memory_ratio":
                ratio = s.value
    return findings, recs, ratio


def pipeline_verdicts(pipe: Pipeline) -> list[tuple]:
    out = []
    for name, src in sorted(pipe.sources.items()):
        for dp, srv in sorted(src.servers.items()):
            out.append((name, dp, sorted(srv.findings.items()), sorted(srv.recommendations), srv.recommended_ratio))
    return out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scenario_replay_through_the_cli(name):
    path = SCEN / name
    lines = path.read_text().splitlines()
    assert len(lines) >= 300
    findings, recs, ratio = verdicts(cli_replay(path))
    want, want_recs = EXPECTED[name]
    assert set(findings) == set(RULE_IDS)  # every rule exported, 0 or 1
    assert {r for r, v in findings.items() if v == 1} == want
    assert set(recs) == set(want_recs), sorted(recs)
    for (rule, flag), (value, rank) in want_recs.items():
        assert recs[(rule, flag)][1] == rank, (rule, flag, recs[(rule, flag)])
        if value is not None:
            assert recs[(rule, flag)][0] == value
    assert {r for r, _ in recs} <= want  # recommendations only for live findings
    for flag in FORBIDDEN.get(name, ()):
        assert flag not in {f for _, f in recs}, flag
    if not want:
        assert recs == {} and ratio is None


def test_scenarios_span_ten_minutes_of_log_time():
    pipe = new_pipeline(None)
    replay_files(pipe, [str(p) for p in sorted(SCEN.glob("*.log"))], None)
    for name, src in pipe.sources.items():
        m = src.servers["0"].rule_memory
        assert m.last_ts - m.first_ts >= 600, name


def test_demo_log_becomes_mamba_bound_after_a_balanced_start():
    pipe = new_pipeline(None)
    replay_files(pipe, [str(DEMO)], None)
    srv = pipe.sources["sglang-mamba-bound"].servers["0"]
    m = srv.rule_memory
    assert srv.findings["mamba_bound"] == 1
    start = m.episodes["mamba_bound"][0][0]
    assert start - m.first_ts >= 8 * 60  # balanced at first
    assert m.last_ts - m.first_ts >= 18 * 60
    assert m.usage["mamba"].max == 1.0


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_replay_equals_feeding_line_by_line(name):
    path = SCEN / name
    a = new_pipeline(None)
    replay_files(a, [str(path)], None)
    b = Pipeline(None, [observe(Rules())])
    src = path.name.split(".", 1)[0]
    for line in read_lines(str(path)):
        b.feed(src, line)
    assert pipeline_verdicts(a) == pipeline_verdicts(b)
    # the episodes (when each finding fired/cleared, in log time) match too
    ea = {dp: dict(srv.rule_memory.episodes) for dp, srv in a.sources[src].servers.items()}
    eb = {dp: dict(srv.rule_memory.episodes) for dp, srv in b.sources[src].servers.items()}
    assert {dp: {r: list(map(tuple, v)) for r, v in e.items()} for dp, e in ea.items()} == {
        dp: {r: list(map(tuple, v)) for r, v in e.items()} for dp, e in eb.items()
    }


def test_split_feeding_matches_replay():
    """Half the file replayed, the rest fed later (like serve catching up on a growing file)."""
    path = SCEN / "sglang-mamba-bound.log"
    lines = path.read_text().splitlines()
    a = new_pipeline(None)
    replay_files(a, [str(path)], None)
    b = new_pipeline(None)
    b.feed_lines("sglang-mamba-bound", lines[: len(lines) // 2])
    snapshot = dict(b.sources["sglang-mamba-bound"].servers["0"].findings)
    b.feed_lines("sglang-mamba-bound", lines[len(lines) // 2 :])
    assert snapshot["mamba_capped"] == 1
    assert pipeline_verdicts(a) == pipeline_verdicts(b)
