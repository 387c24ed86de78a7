"""Advice by family (issue 36, item 4): a lever is offered only where the family has what it changes.

From a config (``plan``): no SSM-dtype effect for LFM2's conv-only state on either engine, nor on vLLM for the Bailing
families (their classes do not read ``--mamba-ssm-cache-dtype``: linear attention in the model dtype, KDA float32),
where SGLang's ``--mamba-ssm-dtype`` still halves them. From a vLLM log: the architecture it names picks the family;
on the CPU build a 16-bit SSM state is kept where vLLM takes its accelerated GDN backend (the catalogue's
``cpu_gdn_backend``, proven by vLLM's own ``_cpu_mamba_backend`` in tests/engine/test_family_shapes.py: Nemotron-H
yes, Falcon-H1 no), so the advice is withheld only where that CPU would reset it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from exporter.advice.plan import PlanRequest, build
from exporter.capacity import families
from exporter.state import facts

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "fixtures" / "configs"
sys.path.insert(0, str(ROOT / "tests" / "rules"))
from test_rules import T0, Feeder  # noqa: E402

from parsers import events as ev  # noqa: E402

SSM_FLAG = {"vllm": "--mamba-ssm-cache-dtype", "sglang": "--mamba-ssm-dtype"}


@pytest.mark.parametrize(
    "name, engine, offered",
    [
        ("lfm2-1.2b", "vllm", False),
        ("lfm2-1.2b", "sglang", False),
        ("lfm2-8b-a1b", "sglang", False),
        ("ling-2.5-linear", "vllm", False),
        ("ling-2.5-linear", "sglang", True),
        ("ling-v3-kda", "vllm", False),
        ("ling-v3-kda", "sglang", True),
        ("granite-4.0-h-small", "sglang", True),
        ("falcon-h1-7b", "sglang", True),
        ("jamba-1.5-mini", "vllm", True),
    ],
)
def test_ssm_dtype_lever_only_where_the_family_has_it(name, engine, offered):
    # vLLM's SSM state on a GPU defaults to the model's 16-bit dtype: ask for float32 so a lever has something to halve
    ssm = "float32" if engine == "vllm" else None
    config = str(CONFIGS / f"{name}.json")
    plan, effects, _ = build(PlanRequest(config=config, engine=engine, kv_budget=20, context_len=8192, mamba_ssm_dtype=ssm))
    assert (SSM_FLAG[engine] in {e.flag for e in effects}) is offered
    assert plan.model.catalogue_family.has_ssm_lever(engine) is offered


def _cpu_log(arch: str, *boot: object) -> Feeder:
    """A vLLM CPU build's log naming ``arch``, its pool full with requests waiting (kv_bound)."""
    f = Feeder(ev.VLLM)
    f.event(ev.ServerStarting(version="0.32.0"), T0, tp=None, raw=f"version 0.32.0; Resolved architecture: {arch}")
    f.config(kind="non_default_args", raw="non-default args: ", max_num_seqs=64, model="some/model")
    for e in boot:
        f.event(e, T0, tp=None, raw=repr(e))
    f.event(ev.KVCapacity(tokens=100_000, max_model_len=2048, max_concurrency=48.8, device="CPU"), T0, tp=None, raw="CPU KV cache size")
    for i in range(20):
        f.stats(T0 + 10 * i, running=40, queued=6, kv=0.97)
    assert f.finding("kv_bound") == 1
    return f


@pytest.mark.parametrize(
    "arch, offered",
    [
        ("NemotronHForCausalLM", True),  # its GDN backend keeps bf16 (the real engine: "Using bfloat16 SSM state storage")
        ("GraniteMoeHybridForCausalLM", True),
        ("FalconH1ForCausalLM", False),  # reset to float32 on this CPU: the flag would change nothing
        ("Lfm2ForCausalLM", False),  # no SSM state at all
    ],
)
def test_cpu_ssm_advice_by_family(arch, offered):
    hybrid = ev.HybridLayout(block_size=256)
    reset = ev.HybridLayout(mamba_ssm_dtype="float32", cpu_avx512_bf16=True)
    f = _cpu_log(arch, hybrid, reset)
    rec = next((r for r in f.srv().rule_memory.recommendations if r.flag == "--mamba-ssm-cache-dtype"), None)
    assert (rec is not None) is offered, (arch, rec)
    if rec is not None:
        assert rec.value == "bfloat16" and not rec.assumes


@pytest.mark.parametrize("fam", [f for f in families.CATALOGUE if f.vllm], ids=lambda f: f.key)
def test_every_family_vllm_serves_is_hybrid_by_its_architecture(fam):
    """The SSM-dtype lever's gate (``facts.vllm_is_hybrid``) knows the families from the catalogue, not from a list
    of its own: a log that names the architecture and prints no hybrid line yet is a hybrid server's, whatever the
    class is called (``NemotronH_Nano_VL_V2`` ends in neither ``ForCausalLM`` nor ``ForConditionalGeneration``)."""
    for arch in fam.architectures:
        f = _cpu_log(arch)
        assert facts.vllm_is_hybrid(f.src, f.srv()), arch


def test_a_dense_architecture_is_not_hybrid():
    f = _cpu_log("LlamaForCausalLM")
    assert not facts.vllm_is_hybrid(f.src, f.srv())
