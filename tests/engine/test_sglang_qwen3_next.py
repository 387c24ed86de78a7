"""SGLang, the seed's own family: a tiny Qwen3-Next (3 Gated DeltaNet layers, 1 full-attention layer, a 4-expert MoE)
on SGLang's CPU GDN path, whose four CPU ops (``causal_conv1d_fn_cpu``, ``fused_gdn_gating_cpu``,
``chunk_gated_delta_rule_cpu``, ``fused_sigmoid_gating_delta_rule_update_cpu``) are the reference kernels of
tests/engine/sglang_cpu. It serves a few requests (prefill through ``chunk_gated_delta_rule``, decode through the fused
update), then stops. The exporter's capacity facts equal the log and SGLang's /metrics, and ``plan --engine sglang``
reproduces the pools from the config: the mamba slots and slots per request, the cap, the conv and SSM state bytes
(to the 0.01 GB the log prints) and the KV bytes per token (exact, against SGLang's ``kv_cache_memory_usage_gb``).
Every recommendation the exporter makes for ``mamba_capped`` is then booted on its own: SGLang takes each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import checks as c
import harness as h
import pytest
import sglang_checks as sc
import sglang_harness as sh

SOURCE = "sglang-qwen3-next"
SLOTS, KV_TOKENS = 1200, 8192  # a state pool big enough for the log's 0.01 GB to say something (0.44 GB of SSM state)
# the radix cache strategy: auto resolves to extra_buffer for Qwen3-Next, which SGLang refuses on the CPU
# ("extra_buffer requires platform support for Mamba cache state snapshots", mamba_hook.py); no_buffer needs the
# overlap schedule off ("no_buffer do not support overlap schedule")
ARGS = (
    "--max-mamba-cache-size",
    str(SLOTS),
    "--max-total-tokens",
    str(KV_TOKENS),
    "--mamba-radix-cache-strategy",
    "no_buffer",
    "--disable-overlap-schedule",
)
CLIENTS = 4


def kinds(text: str) -> set[str]:
    return {"decode" if "mamba_num" in m.re.groupindex else "prefill" for m in sh.batch_lines(text)}


@dataclass
class Run:
    log: str
    model: Path
    boot: str
    boot_sglang: str
    end: str
    load: h.Load
    boot_seconds: float
    advice_boots: dict  # sglang_harness.advice_boots: (the flags, (flag, value)) -> (why not or None, its log)


@pytest.fixture(scope="module")
def run(workdir) -> Run:
    model = sh.build_model("qwen3_next", workdir / "models" / "tiny-qwen3-next-sglang")
    log = workdir / f"{SOURCE}.log"
    log.touch()
    side = h.Sidecar(log, SOURCE, workdir, rules_yaml=sc.RULES_YAML)
    eng = sh.Engine(model, log, ARGS, served_name="tiny-qwen3-next")
    try:
        eng.start()
        e0 = c.wait_exporter(side, lambda e: c.exp(e, "mamba_capacity_slots", SOURCE) is not None, 30, "the capacity lines")
        sg0 = eng.metrics()
        # until a request has been answered through both paths: prefill and decode lines logged
        with h.Load(eng.base, eng.served_name, CLIENTS, max_tokens=24, bound=600) as load:
            h.drive_until(
                lambda: load.done > 0 and {"decode", "prefill"} <= kinds(eng.this_boot()),
                600,
                lambda: f"{load}; batch lines of kinds {sorted(kinds(eng.this_boot()))}",
                "a request answered, and prefill and decode batch lines",
                every=1.0,
            )
        eng.stop()
        end = c.wait_exporter(side, lambda e: c.state_of(e, SOURCE) == "stopped", 60, "the stopped state")
        sh.save_fixture(log, SOURCE, workdir)
        # every recommendation, each applied on a boot of its own: the engine takes it
        boots = sh.advice_boots(model, workdir, SOURCE, [(ARGS, end)], served_name="tiny-qwen3-next")
        return Run(h.read(log), model, e0, sg0, end, load, eng.boot_seconds, boots)
    finally:
        eng.stop()
        side.stop()


def test_capacity_equals_the_log_and_sglang(run):
    boot = sc.assert_capacity(run.boot, SOURCE, run.log, run.boot_sglang)
    assert boot.slots == SLOTS and boot.kv_tokens == KV_TOKENS
    assert boot.ssm_bytes > 0 and boot.conv_bytes >= 0


def test_the_gdn_path_serves(run):
    """Every request answered through the reference GDN kernels; prefill and decode lines logged and counted."""
    assert run.load.done > 0 and run.load.failed == 0, str(run.load)
    lines = sh.batch_lines(run.log)
    decode = sum(1 for m in lines if "mamba_num" in m.re.groupindex)
    assert decode > 0 and len(lines) > decode
    assert c.exp(run.end, "decode_batches_total", SOURCE) == decode
    assert c.exp(run.end, "prefill_batches_total", SOURCE) == len(lines) - decode
    assert c.state_of(run.end, SOURCE) == "stopped" and c.exp(run.end, "server_deaths_total", SOURCE) == 0
    c.assert_clean_lines(run.end, SOURCE)


def test_plan_reproduces_the_pools(run):
    p = sc.assert_plan(run.model / "config.json", run.log, run.boot_sglang)
    assert p["state"]["ssm_bytes_per_request_per_gpu"] > 0


def test_every_recommendation_boots(run):
    """Each recommendation for ``mamba_capped``, applied on a boot of its own, boots the real SGLang. The KV pool sits
    at --max-total-tokens, so whether a larger mamba pool fits is not in the log: that advice is held, not exported
    (with it, --max-mamba-cache-size 6144, this SGLang refuses to start: "Loaded weights leave no GPU memory for the
    KV cache under --mem-fraction-static=0.05")."""
    sc.assert_advice_boots(run.advice_boots, KV_TOKENS, must=("--mamba-ssm-dtype",))
