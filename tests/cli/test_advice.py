"""Advice a person on call can act on (issue 21), through the real command line: before and after two boots in
every report format, the request lengths, plan --from-log, and the smaller things a person hits (a report of a
missing file writes nothing, a wrong --engine names the right one, a mistyped option gets the close one)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "fixtures" / "scenarios"


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_before_and_after_two_sglang_boots_in_every_format():
    f = str(SCEN / "sglang-two-boots.log")
    text = run("report", f).stdout
    assert "Before and after the restart at 2026-08-14 08:27:02 (2 boots in the log)" in text
    assert "changed: mamba_ssm_dtype unset → bfloat16 (--mamba-ssm-dtype)" in text
    assert "  mamba slots                80        158  157 (agrees)" in text
    assert "  request cap                16         31  31 (agrees)" in text
    assert "binding share of log time: mamba pool 95% → 12%" in text and "requests waiting: 96% → 12% of log time" in text
    md = run("report", "--markdown", f).stdout
    assert "**Before and after the restart at 2026-08-14 08:27:02 (2 boots in the log)**" in md
    ba = json.loads(run("report", "--json", f).stdout)["sources"][0]["servers"][0]["before_after"]
    assert ba["changed"] == [{"setting": "mamba_ssm_dtype", "before": None, "after": "bfloat16", "flag": "--mamba-ssm-dtype"}]
    pools = {r["what"]: r for r in ba["pools"]}
    assert (pools["mamba slots"]["before"], pools["mamba slots"]["after"], pools["mamba slots"]["predicted"]) == (80, 158, 157)
    assert pools["request cap"]["verdict"] == "agrees" and ba["before"]["binding"]["mamba"] > 0.9 > ba["after"]["binding"]["mamba"]
    html = run("report", "--html", f).stdout
    assert "Before and after the restart" in html and "<td>request cap</td><td>16</td><td>31</td><td>31 (agrees)</td>" in html


def test_before_and_after_two_vllm_boots():
    rep = json.loads(run("report", "--json", str(SCEN / "vllm-two-boots.log")).stdout)
    srv = rep["sources"][0]["servers"][0]
    ba = srv["before_after"]
    assert [c["setting"] for c in ba["changed"]] == ["max_num_seqs"] and ba["changed"][0]["flag"] == "--max-num-seqs"
    pools = {r["what"]: r for r in ba["pools"]}
    assert pools["request cap"] == {"what": "request cap", "before": 16, "after": 32, "predicted": 32, "verdict": "agrees"}
    assert pools["KV tokens"]["before"] == pools["KV tokens"]["after"]  # V1: the pool does not grow with the cap
    assert "request_cap_bound" in ba["before"]["fired"] and "request_cap_bound" not in ba["after"]["fired"]
    assert ba["before"]["queued"] > 0.9 and ba["after"]["queued"] < 0.3
    assert srv["vllm_pool"]["state_share"] == pytest.approx(3 / 8, abs=0.01) and srv["vllm_pool"]["mamba_bound_concurrency"] == 69


def test_the_workload_behind_the_ratio_and_a_log_too_short_to_know():
    rep = json.loads(
        run("report", "--json", str(SCEN / "sglang-mamba-bound.log"), str(ROOT / "fixtures" / "sglang" / "v0.5.23.log")).stdout
    )
    by = {s["source"]: s["servers"][0]["workload"] for s in rep["sources"]}
    wl = by["sglang-mamba-bound"]
    assert wl["running"]["samples"] >= 30 and wl["running"]["p50"] <= wl["running"]["p90"] <= wl["running"]["max"]
    assert wl["ratio"]["p90"] > wl["current_ratio"] and "the workload wants more memory for the mamba pool" in wl["verdict"]
    assert sum(b["share"] for b in wl["histogram"]) == pytest.approx(1.0, abs=0.01)
    assert by["v0.5.23"]["verdict"].startswith("too short to know: 2 sample(s)")
    text = run("report", str(SCEN / "sglang-mamba-bound.log")).stdout
    assert "Request lengths (the workload behind the ratio)" in text and "--mamba-full-memory-ratio for these lengths: p50" in text


def test_plan_from_log_starts_from_the_logged_pools_and_says_how_far_the_model_is():
    out = run(
        "plan", "--from-log", str(SCEN / "sglang-mamba-bound.log"), str(SCEN / "sglang-kv-bound.log"), str(SCEN / "vllm-max-num-seqs.log")
    ).stdout
    assert "model check: the ratio arithmetic gives 79 mamba slots for ratio 0.9, the log 80 (+1 %): within 5 %" in out
    assert "the log 240 (-21 %): ratio predictions scaled from the logged pools" in out
    assert "model and log disagree by -21 %" in out  # said in the scaled effect itself
    assert "ssm bf16: mamba slots 80 → 157, cap 16 → 31" in out
    assert "--max-num-seqs frees no KV memory in vLLM V1" in out
    assert not re.search(r": cap (\d+) → \1\b(?!,)", out)  # no effect that changes nothing (``max-num-seqs 16: cap 16 → 16``)


def test_plan_prints_no_effect_that_changes_nothing():
    out = run(
        "plan",
        "--config",
        str(ROOT / "fixtures" / "configs" / "qwen3.8-27b.json"),
        "--engine",
        "vllm",
        "--kv-budget",
        "38",
        "--context-len",
        "131072",
        "--max-num-seqs",
        "16",
    ).stdout
    assert "max-num-seqs" not in out.split("flag effects:", 1)[1].split("note:", 1)[0]
    assert "note: --max-num-seqs frees no KV memory in vLLM V1" in out


def test_a_report_of_a_missing_file_writes_nothing(tmp_path):
    for fmt in ("--html", "--json", "--markdown"):
        r = run("report", fmt, str(tmp_path / "missing.log"), check=False)
        assert r.returncode == 1 and r.stdout == "", fmt
        assert "missing.log: cannot read" in r.stderr and "no report written" in r.stderr
    r = run("report", "--html", str(SCEN / "sglang-mamba-bound.log"), str(tmp_path / "missing.log"), check=False)
    assert r.returncode == 1 and r.stdout == ""


def test_a_wrong_engine_says_the_file_looks_like_the_other():
    r = run("report", "--engine", "sglang", str(SCEN / "vllm-max-num-seqs.log"), check=False)
    assert r.returncode == 1 and r.stdout == ""
    assert "no SGLang log line in it, but it looks like a vLLM log: --engine sglang was given (use --engine vllm, or auto)" in r.stderr
    r = run("replay", "--engine", "vllm", str(SCEN / "sglang-mamba-bound.log"), check=False)
    assert "looks like an SGLang log: --engine vllm was given (use --engine sglang, or auto)" in r.stderr


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["report", "--markdwon", "x.log"], "--markdwon: did you mean --markdown?"),
        (["replay", "--max-dp-rank", "4", "x.log"], None),  # an abbreviation argparse takes: no error
        (["replay", "--rules-confg", "x.yaml", "x.log"], "--rules-confg: did you mean --rules-config?"),
        (["plan", "--config", "x.json", "--kv-budgte", "3"], "--kv-budgte: did you mean --kv-budget?"),
        (["serve", "--web.listen-adress", ":1"], "--web.listen-adress: did you mean --web.listen-address?"),
    ],
)
def test_a_mistyped_option_gets_the_close_one(argv, hint):
    r = run(*argv, check=False)
    if hint is None:
        assert "unrecognized arguments" not in r.stderr
    else:
        assert r.returncode == 2 and hint in r.stderr, r.stderr


ENGINE_SGLANG = ROOT / "fixtures" / "engine" / "sglang-cpu-0.5.23"


def _first_boot(tmp_path: Path) -> Path:
    """The first boot of the real SGLang's mamba-bound run (fixtures/engine/sglang-cpu-0.5.23/sglang-mamba.log: a tiny
    LFM2 pinned at its mamba cap), cut before the second boot's server_args line."""
    text = (ENGINE_SGLANG / "sglang-mamba.log").read_text()
    second = text.index("server_args=", text.index("server_args=") + 1)
    out = tmp_path / "sglang-mamba-boot1.log"
    out.write_text(text[: text.rfind("\n", 0, second) + 1])
    return out


def test_no_ssm_dtype_advice_when_the_log_says_the_ssm_state_is_empty(tmp_path):
    """Issue 32: on the real LFM2 log (its state is all convolution: SGLang sizes the SSM state at 0 and prints
    ``ssm_state size: 0.00GB``) mamba_capped's first recommendation was ``--mamba-ssm-dtype bfloat16``, which frees
    nothing; SGLang's own cap warning suggests it too. The pool's size is the lever."""
    f = _first_boot(tmp_path)
    text = f.read_text()
    assert "ssm_state size: 0.00GB" in text and "or halve the state size with --mamba-ssm-dtype bfloat16" in text
    out = run("replay", str(f)).stdout
    recs = {
        (m["rule"], m["flag"]): int(m["rank"])
        for m in (
            dict(re.findall(r'(\w+)="([^"]*)"', line)) for line in out.splitlines() if line.startswith("hybrid_cache_recommendation_info{")
        )
    }
    assert ("mamba_capped", "--max-mamba-cache-size") in recs, recs
    assert not [k for k in recs if k[1] == "--mamba-ssm-dtype"], recs
    assert recs[("mamba_capped", "--max-mamba-cache-size")] == 1


def test_a_state_too_small_to_print_still_predicts_an_explicit_pool(tmp_path):
    """The same log through `report` (it divided by the 0.00 GB state and crashed): the slots an explicit
    --max-mamba-cache-size gives are the value, the cap follows, and the KV pool is said to be taken as unchanged."""
    rep = json.loads(run("report", "--json", str(_first_boot(tmp_path))).stdout)
    recs = rep["sources"][0]["servers"][0]["status"]["recommendations"]
    first = next(r for r in recs if r["ranks"].get("mamba_capped") == 1)
    assert first["name"] == "--max-mamba-cache-size" and "mamba slots 16 → " in first["effect"], first
    assert "below the log's precision" in first["effect"] and "--mamba-ssm-dtype" not in {r["name"] for r in recs}
    whole = json.loads(run("report", "--json", str(ENGINE_SGLANG / "sglang-mamba.log")).stdout)
    pools = {r["what"]: r for r in whole["sources"][0]["servers"][0]["before_after"]["pools"]}
    for what in ("mamba slots", "request cap"):
        assert pools[what]["verdict"] == "agrees" and pools[what]["predicted"] == pools[what]["after"], pools[what]
