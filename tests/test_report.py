"""``hybrid-cache-exporter report`` in text, --json and --markdown: findings, evidence, effects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCEN = ROOT / "fixtures" / "scenarios"
MAMBA = SCEN / "sglang-mamba-bound.log"


def report(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "exporter", "report", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_text_report_has_capacity_usage_findings_evidence_and_effects():
    out = report(str(MAMBA))
    assert "release >=0.5.19" in out
    assert "mamba_capacity_slots" in out and "80" in out
    assert "mamba_slots_per_request" in out
    assert "Usage (batch lines)" in out and "p50" in out and "|#" in out
    assert "Binding pool" in out
    assert "Finding mamba_bound [FIRING]" in out
    assert "Finding mamba_capped [FIRING]" in out
    # evidence: the raw lines, with their timestamps
    assert "[2026-08-14 08:10:32 TP0] max_running_requests is capped to 16 by the mamba state cache" in out
    assert "Decode batch, #running-req: 16" in out and "mamba usage: " in out
    # recommendations with the capacity model's expected effect
    assert "--mamba-ssm-dtype bfloat16" in out
    assert "effect: ssm bf16: mamba slots 80 → 157, cap 16 → 31" in out
    assert "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1" in out
    assert "balanced --mamba-full-memory-ratio" in out


def test_json_report():
    rep = json.loads(report("--json", str(MAMBA)))
    (src,) = rep["sources"]
    assert src["engine"] == "sglang" and src["version"] == ">=0.5.19"
    (srv,) = src["servers"]
    assert srv["capacity"]["mamba_cap"] == 16
    assert srv["capacity"]["mamba_slots_per_request"] == 5
    u = srv["usage"]["mamba"]
    assert u["min"] <= u["p50"] <= u["p90"] <= u["max"] == 1.0
    assert srv["usage"]["kv"]["max"] < 0.2
    assert srv["binding"]["mamba"]["share"] > 0.8
    rules = {f["rule"]: f for f in srv["findings"]}
    assert set(rules) == {"mamba_bound", "mamba_capped"}
    mb = rules["mamba_bound"]
    assert mb["live"] and mb["episodes"][0]["end"] is None and mb["firing_seconds"] > 600
    assert 2 <= len(mb["evidence"]) <= 10
    assert all(e["time"].startswith("2026-08-14") and e["line"].startswith("[2026-08-14") for e in mb["evidence"])
    assert "capped to 16" in rules["mamba_capped"]["detail"]
    recs = {(r["rule"], r["flag"]): r for r in srv["recommendations"]}
    assert recs[("mamba_bound", "--mamba-ssm-dtype")]["effect"].startswith("ssm bf16: mamba slots 80 → ")
    assert all(r["effect"] and r["live"] for r in srv["recommendations"])
    assert srv["recommended_mamba_full_memory_ratio"] > 0.9


def test_markdown_report():
    out = report("--markdown", str(MAMBA))
    assert out.startswith("# hybrid-cache-exporter report")
    assert "## Source `sglang-mamba-bound`" in out
    assert "| pool | samples | min | p50 | p90 | max |" in out
    assert "- **`mamba_bound`** (firing)" in out
    assert "max_running_requests is capped to 16" in out
    assert "| mamba_bound | `--mamba-ssm-dtype` | `bfloat16` | ssm bf16: mamba slots 80 → 157, cap 16 → 31" in out


def test_balanced_report_has_no_findings():
    out = report(str(SCEN / "sglang-balanced.log"))
    assert "Findings: none" in out and "Recommendations" not in out
    rep = json.loads(report("--json", str(SCEN / "sglang-balanced.log")))
    assert rep["sources"][0]["servers"][0]["findings"] == []


def test_report_several_files_and_vllm():
    rep = json.loads(report("--json", str(SCEN / "vllm-max-num-seqs.log"), str(SCEN / "sglang-kv-bound.log")))
    by = {s["source"]: s for s in rep["sources"]}
    v = by["vllm-max-num-seqs"]
    assert v["engine"] == "vllm" and v["version"] == "0.24.0"
    f = {x["rule"] for x in v["servers"][0]["findings"]}
    assert f == {"request_cap_bound"}
    assert v["servers"][0]["capacity"]["max_running_requests_source"] == "args"
    k = by["sglang-kv-bound"]["servers"][0]
    assert {x["rule"] for x in k["findings"]} >= {"kv_bound", "retraction_storm"}
    storm = next(x for x in k["findings"] if x["rule"] == "retraction_storm")
    assert any("KV cache pool is full. Retract requests." in e["line"] for e in storm["evidence"])


def test_report_rules_config(tmp_path):
    cfg = tmp_path / "rules.yaml"
    cfg.write_text("for_seconds: 100000\n")
    rep = json.loads(report("--json", "--rules-config", str(cfg), str(MAMBA)))
    assert {f["rule"] for f in rep["sources"][0]["servers"][0]["findings"]} == {"mamba_capped"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("nope: 1\n")
    r = subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--rules-config", str(bad), str(MAMBA)], capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 2 and "nope" in r.stderr
