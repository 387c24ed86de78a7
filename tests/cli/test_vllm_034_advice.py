"""Issue 35's two users, on logs written from the vLLM 0.34.0 wheel's format strings (fixtures/vllm/v0.34.0-*.log),
through the real command line, and issue 29 item 5 (a default is not dressed as a logged value).

1. An H200 started with ``--gpu-memory-utilization 0.9``, KV-bound: ``kv_capacity_bytes`` is the pool's final size
   (not the pre-warmup estimate), the request cap is vLLM's default for that GPU and says so, and the first thing to
   do is to unset the cap, its gain the memory vLLM's own warning names.
2. A 32 GB card with ``--max-model-len auto`` and every other default: no advice that shrinks the pool (unset,
   ``gpu_memory_utilization`` is 1.0 on 0.34: nothing to propose above it)."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "fixtures" / "vllm" / "v0.34.0-h200-capped.log"
AUTO = ROOT / "fixtures" / "vllm" / "v0.34.0-32gb-auto-len.log"
GIB = 1 << 30


def run(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def series(text: str, name: str) -> list[tuple[dict, float]]:
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def line(path: Path, pattern: str) -> re.Match:
    m = re.search(pattern, path.read_text())
    assert m, pattern
    return m


def test_h200_capped_the_final_pool_the_default_cap_and_unset_first():
    exp = run("replay", str(H200))
    final = float(line(H200, r"Extended KV cache to \d+ blocks \(([\d.]+) GiB\)").group(1))
    estimate = float(line(H200, r"Available KV cache memory: ([\d.]+) GiB").group(1))
    [(_, kv_bytes)] = series(exp, "hybrid_cache_kv_capacity_bytes")
    assert kv_bytes == pytest.approx(final * GIB) and final != estimate
    [(_, blocks)] = series(exp, "hybrid_cache_kv_blocks")
    assert blocks == int(line(H200, r"Extended KV cache to (\d+) blocks").group(1))
    # the cap: vLLM's default on a 139.81 GiB GPU (no A100 or GB10 has that much), labelled as a default
    [(labels, cap)] = series(exp, "hybrid_cache_max_running_requests")
    assert (cap, labels["basis"]) == (1024, "default")
    # the first recommendation: remove the cap; never a number (a number below 1.0 keeps memory out of the pool)
    recs = sorted((int(lab["rank"]), lab["flag"], lab["value"]) for lab, _ in series(exp, "hybrid_cache_recommendation_info"))
    assert recs[0] == (1, "--gpu-memory-utilization", "unset")
    rep = json.loads(run("report", "--json", str(H200)))
    srv = rep["sources"][0]["servers"][0]
    first = srv["status"]["recommendations"][0]
    withheld = line(H200, r"keeping ([\d.]+) GiB of free device memory out of the KV cache").group(1)
    assert first["flag"] == "remove --gpu-memory-utilization" and f"+{float(withheld):.2f} GiB" in first["effect"]
    # report: the estimate and the final value, each with its line; the cap's basis in words
    kv = [r for r in srv["revisions"] if r["fact"] == "kv_capacity_bytes"]
    assert [(r["stage"], r["value"]) for r in kv][0] == ("profile", estimate) and kv[-1]["value"] == final and kv[-1]["in_force"]
    assert kv[0]["line"].startswith("Available KV cache memory") and kv[-1]["line"].startswith("Extended KV cache to")
    assert srv["capacity"]["max_running_requests_source"].startswith("default: vLLM's default on a GPU with >= 70 GiB")
    assert "(not logged: vLLM's default" in " ".join(srv["status"]["words"])


def test_32gb_auto_length_no_advice_shrinks_the_pool():
    exp = run("replay", str(AUTO))
    assert any(lab["rule"] == "kv_bound" and v == 1 for lab, v in series(exp, "hybrid_cache_finding"))
    flags = {lab["flag"] for lab, _ in series(exp, "hybrid_cache_recommendation_info")}
    assert flags and "--gpu-memory-utilization" not in flags  # unset is 1.0: nothing above it to propose
    rep = json.loads(run("report", "--json", str(AUTO)))
    srv = rep["sources"][0]["servers"][0]
    assert srv["capacity"]["gpu_memory_utilization"] == 1.0
    assert srv["capacity"]["gpu_memory_utilization_source"].startswith("logged:")  # 'Desired GPU memory utilization is (1.0, ...)'
    for r in srv["recommendations"]:
        m = re.search(r"KV tokens ([\d,]+) → ([\d,]+)", r["effect"])
        if m:
            before, after = (int(x.replace(",", "")) for x in m.groups())
            assert after >= before, r
    # the context length the server ended with: fitted again after warmup, not the estimate
    [(_, ctx)] = series(exp, "hybrid_cache_context_length_tokens")
    assert ctx == int(line(AUTO, r"--max-model-len auto reduced max_model_len from \d+ to (\d+)").group(1))
    # a GPU under 70 GiB: vLLM's default is 256 whatever the GPU, and the cap says it is a default
    [(labels, cap)] = series(exp, "hybrid_cache_max_running_requests")
    assert (cap, labels["basis"]) == (256, "default")


def test_plan_from_log_takes_the_final_budget_and_names_the_estimate():
    out = run("plan", "--from-log", str(H200))
    final = line(H200, r"Extended KV cache to \d+ blocks \(([\d.]+) GiB\)").group(1)
    estimate = line(H200, r"Available KV cache memory: ([\d.]+) GiB").group(1)
    assert f"KV budget {float(final):g} GiB per GPU (Extended KV cache to" in out
    assert f"{float(estimate):g} GiB was the estimate before warmup (Available KV cache memory: {estimate} GiB)" in out
    assert f"plan --kv-budget {float(final):g}" in out


@pytest.mark.parametrize("form", ["--markdown", "--html", ""])
def test_every_report_form_shows_the_revised_kv_pool_with_its_lines(form):
    """The estimate and the final value, each with its line, in the text, Markdown and HTML reports alike (before:
    the HTML report had no such table)."""
    rep = json.loads(run("report", "--json", str(H200)))
    kv = [r for r in rep["sources"][0]["servers"][0]["revisions"] if r["fact"] == "kv_capacity_bytes"]
    out = run("report", *([form] if form else []), str(H200))
    assert "Sized again in this boot" in out
    for r in kv:
        assert r["value_words"] in out and r["stage_words"] in out
        shown = html.escape(r["line"]) if form == "--html" else r["line"]
        assert shown in out, r["line"]
