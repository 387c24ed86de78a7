"""Recommendations: the flags that fix each firing finding, filtered by what the log says.

For every live finding of a server, :func:`update` lists candidate flags and drops the ones the
log rules out: the release (vLLM prints it; SGLang's is inferred, see ``rules.version_range``),
the SSM / KV dtypes already in use, the radix-cache strategy, PD disaggregation, speculative
decoding, HiCache, DCP and unified memory. The result goes to

* ``srv.recommendations``: ``[(rule, flag, value), ...]`` -> ``hybrid_cache_recommendation_info``
* ``srv.rule_memory["recommendations"]``: :class:`Recommendation` objects with the expected effect
  text (``capacity.project_effect``) and the reason, for ``report``
* ``srv.recommended_ratio``: the ``--mamba-full-memory-ratio`` that balances the observed usage of
  both pools (``capacity.balanced_mamba_full_memory_ratio`` at the p95 usages), SGLang only, while
  ``mamba_bound`` / ``kv_bound`` / ``mamba_capped`` is live.

A gate that needs a minimum release ("only >= 0.5.17") passes only when the log *proves* that
release; an unknown release gets the flags that exist everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from parsers import events as ev

from . import capacity as cap
from .facts import (
    _none,
    _num,
    _truthy,
    demand_of,
    facts_of,
    is_multimodal,
    mamba_cap,
    radix_strategy,
    sglang_ssm_dtype,
    speculative_on,
    version_range,
    vllm_arch,
    vllm_is_hybrid,
    vllm_ssm_dtype,
)
from .rules import (
    KV_BOUND,
    MAMBA_BOUND,
    MAMBA_CAPPED,
    MAMBA_EXHAUSTED,
    REQUEST_CAP_BOUND,
    RETRACTION_STORM,
    Rules,
    RulesConfig,
)
from .state import ServerState, SourceState, effective_max_running

SKIP_DECODE_LOCK = "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK"


@dataclass
class Recommendation:
    rule: str
    flag: str
    value: str
    effect: str  # expected effect (human text, not a label)
    why: str = ""  # why this flag applies to this server

    def as_tuple(self) -> tuple[str, str, str]:
        return (self.rule, self.flag, self.value)

    def as_dict(self) -> dict:
        return {"rule": self.rule, "flag": self.flag, "value": self.value, "effect": self.effect, "why": self.why}


# --------------------------------------------------------------------------------------------
# what the log says


def _usage_p(srv: ServerState, pool: str, q: float = 0.95) -> float | None:
    u = srv.rule_memory.get("usage", {}).get(pool)
    return u.quantile(q) if u is not None and u.n else None


def observed(src: SourceState, srv: ServerState, cfg: RulesConfig | None = None) -> cap.ObservedCapacity:
    """The capacity model's view of this server, from the log only (its facts + the observed demand)."""
    return facts_of(src, srv, cfg).observed(demand_of(srv))


def balanced_ratio(src: SourceState, srv: ServerState, cfg: RulesConfig | None = None) -> float | None:
    if src.engine != ev.SGLANG or _truthy(src.config.get("enable_unified_memory")):
        return None
    r = cap.balanced_mamba_full_memory_ratio(observed(src, srv, cfg))
    if r is None or not math.isfinite(r) or r <= 0:
        return None
    # two significant digits: a stable label value while the usage percentiles wobble
    return float(f"{r:.2g}")


# --------------------------------------------------------------------------------------------
# candidates


def _effect(o: cap.ObservedCapacity, flag: str, value: str, fallback: str) -> tuple[str, cap.Effect | None]:
    try:
        e = cap.project_effect(o, flag, value)
    except (ValueError, ZeroDivisionError, TypeError):
        e = None
    return (str(e) if e is not None else fallback), e


def _roundup8(n: float) -> int:
    return int(math.ceil(n / 8.0) * 8)


def _peak(srv: ServerState, name: str) -> float:
    return float(srv.rule_memory.get("peaks", {}).get(name, 0) or 0)


def _sglang_blockers_unified(src: SourceState) -> list[str]:
    c = src.config
    out = []
    if not _none(c.get("disaggregation_mode")):
        out.append("PD disaggregation")
    if speculative_on(src):
        out.append("speculative decoding")
    if _truthy(c.get("enable_hierarchical_cache")):
        out.append("HiCache")
    dcp = _num(c.get("dcp_size")) or _num(c.get("decode_context_parallel_size"))
    if dcp and dcp > 1:
        out.append("decode context parallelism")
    return out


def _sglang_mamba(src: SourceState, srv: ServerState, rule: str, cfg: RulesConfig | None) -> list[tuple[str, str, str, str]]:
    """(flag, value, fallback effect, why) that give the mamba pool more room (SGLang)."""
    vr = version_range(src, cfg)
    o = observed(src, srv, cfg)
    out: list[tuple[str, str, str, str]] = []
    unified = _truthy(src.config.get("enable_unified_memory"))
    strategy = radix_strategy(src)
    spr = o.slots_per_request
    # 1. halve the SSM state
    dt, where = sglang_ssm_dtype(src)
    if cap.dtype_bytes(dt) > 2:
        out.append(("--mamba-ssm-dtype", "bfloat16", "SSM state bytes halve: about 2x mamba slots", f"SSM state is {dt} ({where})"))
    # 2. move memory from the idle KV pool to the mamba pool
    if not unified and not vr.below("0.5.3.post3"):
        r_now = o.mamba_full_memory_ratio or 0.9
        r_new = balanced_ratio(src, srv, cfg)
        if r_new is None or r_new <= r_now * 1.05:
            r_new = round(r_now * 2, 2) if r_new is None else None
        if r_new is not None:
            out.append(
                (
                    "--mamba-full-memory-ratio",
                    f"{r_new:g}",
                    f"mamba share of the pool budget {r_now:g} -> {r_new:g}",
                    f"current ratio {r_now:g}; balances p95 usage (kv {o.kv_usage}, mamba {o.mamba_usage})",
                )
            )
    # 3. explicit pool size (ignored in 0.5.3.post3-0.5.6 with the radix cache on)
    ignored = strategy != "disabled" and vr.may_be_in("0.5.3.post3", "0.5.6")
    if not unified and not ignored and o.mamba_slots and spr:
        n, why = _mamba_slots_target(src, srv, o, rule)
        if n is not None and n > o.mamba_slots:
            out.append(("--max-mamba-cache-size", str(n), f"mamba slots {o.mamba_slots} -> {n}, cap {o.mamba_cap} -> {n // spr}", why))
    # 4. one slot less per request
    if strategy in ("extra_buffer", "extra_buffer_lazy") and vr.at_least("0.5.17") and spr:
        overlap = not _truthy(src.config.get("disable_overlap_schedule"))
        try:
            table = cap.sglang_slots_per_request(strategy, vr.floor, overlap=overlap, spec=speculative_on(src))
        except ValueError:
            table = None
        if table is None or spr >= table:  # not already on
            out.append((SKIP_DECODE_LOCK, "1", f"slots per request {spr} -> {spr - 1}", f"{strategy} on SGLang {vr} (>=0.5.17)"))
    overlap = not _truthy(src.config.get("disable_overlap_schedule"))
    if strategy == "extra_buffer" and overlap and vr.at_least("0.5.13"):
        pd = not _none(src.config.get("disaggregation_mode"))
        dflash = "DFLASH" in str(src.config.get("speculative_algorithm") or "").upper()
        if not pd and not dflash:
            flag = "--mamba-radix-cache-strategy" if vr.at_least("0.5.14") else "--mamba-scheduler-strategy"
            out.append((flag, "extra_buffer_lazy", "slots per request 5 -> 4", f"extra_buffer with overlap on SGLang {vr} (>=0.5.13)"))
    # 5. one shared buffer
    if not unified and vr.at_least("0.5.15"):
        blockers = _sglang_blockers_unified(src)
        if not blockers:
            out.append(
                (
                    "--enable-unified-memory",
                    "true",
                    "KV and mamba share one buffer: idle KV memory becomes mamba slots at runtime",
                    f"SGLang {vr} (>=0.5.15), no PD / speculative / HiCache / DCP",
                )
            )
    return out


def _mamba_slots_target(src: SourceState, srv: ServerState, o: cap.ObservedCapacity, rule: str) -> tuple[int | None, str]:
    """Slots for the observed demand (or the requested cap when mamba_capped), limited so that the
    KV pool keeps room for its observed peak at ``kv_high`` usage."""
    spr = o.slots_per_request or 1
    want = _peak(srv, "running") + _peak(srv, "queued")
    why = f"peak demand {int(_peak(srv, 'running'))} running + {int(_peak(srv, 'queued'))} queued"
    if rule == MAMBA_CAPPED and o.requested_max_running_requests and o.requested_max_running_requests > want:
        want = o.requested_max_running_requests
        why = f"requested max_running_requests {o.requested_max_running_requests}"
    n = int(want * spr)
    why += f" x {spr} slots per request"
    slot, kpt, kvp = o.bytes_per_slot, o.kv_bytes_per_token, _usage_p(srv, "kv", 1.0)
    run = _peak(srv, "running")
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


def _sglang_kv(src: SourceState, srv: ServerState, rule: str, cfg: RulesConfig | None) -> list[tuple[str, str, str, str]]:
    vr = version_range(src, cfg)
    o = observed(src, srv, cfg)
    out: list[tuple[str, str, str, str]] = []
    kvd = str(src.config.get("kv_cache_dtype") or "")
    if "fp8" not in kvd.lower() and "float8" not in kvd.lower():
        out.append(("--kv-cache-dtype", "fp8_e4m3", "KV tokens about 2x", f"KV cache dtype is {kvd or 'auto (model dtype)'}"))
    unified = _truthy(src.config.get("enable_unified_memory"))
    if not unified and o.mamba_slots and not vr.below("0.5.3.post3"):
        r_now = o.mamba_full_memory_ratio or 0.9
        r_new = balanced_ratio(src, srv, cfg)
        if r_new is not None and r_new < r_now * 0.95:
            out.append(
                (
                    "--mamba-full-memory-ratio",
                    f"{r_new:g}",
                    f"KV share of the pool budget grows (ratio {r_now:g} -> {r_new:g})",
                    f"mamba pool has room (p95 {o.mamba_usage}); current ratio {r_now:g}",
                )
            )
    if not unified and o.mamba_slots and vr.at_least("0.5.15") and not _sglang_blockers_unified(src):
        out.append(
            (
                "--enable-unified-memory",
                "true",
                "KV and mamba share one buffer: idle mamba memory becomes KV tokens at runtime",
                f"SGLang {vr} (>=0.5.15), no PD / speculative / HiCache / DCP",
            )
        )
    return out


def _vllm_common(src: SourceState, srv: ServerState) -> list[tuple[str, str, str, str]]:
    """Flags that give vLLM's shared KV/state pool more blocks."""
    vr = version_range(src)
    out: list[tuple[str, str, str, str]] = []
    kvd = str(src.config.get("kv_cache_dtype") or "auto")
    if "fp8" not in kvd.lower():
        out.append(("--kv-cache-dtype", "fp8", "KV bytes per token halve: about 2x KV tokens", f"kv_cache_dtype is {kvd}"))
    if vllm_is_hybrid(src, srv):
        dt = vllm_ssm_dtype(src)
        if cap.dtype_bytes(dt) > 2:
            # choices of --mamba-ssm-cache-dtype by release (ref §4.1)
            value = "bfloat16" if vr.at_least("0.22") else "float16" if vr.at_least("0.15") else None
            if value:
                out.append(
                    (
                        "--mamba-ssm-cache-dtype",
                        value,
                        "SSM state bytes halve: smaller mamba pages, more blocks",
                        f"SSM state is {dt}; vLLM {vr} accepts {value}",
                    )
                )
    if vr.at_least("0.17") and is_multimodal(src) and not _truthy(src.config.get("language_model_only")):
        out.append(
            (
                "--language-model-only",
                "true",
                "vision tower weights freed for the KV pool",
                f"multimodal architecture {vllm_arch(src) or src.config.get('model')} on vLLM {vr} (>=0.17)",
            )
        )
    util = _num(src.config.get("gpu_memory_utilization")) or (0.92 if vr.at_least("0.20") else 0.9)
    if util < 0.95:
        out.append(
            (
                "--gpu-memory-utilization",
                f"{min(0.95, round(util + 0.03, 2)):g}",
                f"KV pool grows by {round(min(0.95, util + 0.03) - util, 2):g} of GPU memory",
                f"current {util:g}",
            )
        )
    return out


def candidates(src: SourceState, srv: ServerState, rule: str, cfg: RulesConfig | None = None) -> list[tuple[str, str, str, str]]:
    """(flag, value, fallback effect, why) for one rule on one server."""
    cfg = cfg or RulesConfig()
    if src.engine == ev.SGLANG:
        if rule in (MAMBA_BOUND, MAMBA_CAPPED, MAMBA_EXHAUSTED):
            return _sglang_mamba(src, srv, rule, cfg)
        if rule == KV_BOUND:
            return _sglang_kv(src, srv, rule, cfg)
        if rule == RETRACTION_STORM:
            mu = _usage_p(srv, "mamba")
            base = _sglang_mamba(src, srv, rule, cfg) if mu is not None and mu >= cfg.mamba_room else _sglang_kv(src, srv, rule, cfg)
            return [
                (
                    "--schedule-conservativeness",
                    "1.3",
                    "admits fewer new requests while the pool is tight: fewer retractions",
                    "retractions recompute work",
                ),
                *base,
            ]
        if rule == REQUEST_CAP_BOUND:
            eff, _ = effective_max_running(src, srv)
            if not eff:
                return []
            n = _roundup8(max(_peak(srv, "running") + _peak(srv, "queued"), eff + 1))
            mc = mamba_cap(src, srv, cfg)
            if mc is not None:
                n = min(n, mc)
            if n <= eff:
                return []
            dp = _num(src.config.get("dp_size")) or 1
            total = int(n * dp) if _truthy(src.config.get("enable_dp_attention")) and dp > 1 else n
            return [
                (
                    "--max-running-requests",
                    str(total),
                    f"cap {int(eff)} -> {n}",
                    f"running pinned at {int(eff)} with requests waiting; both pools have headroom",
                )
            ]
        return []
    if src.engine == ev.VLLM:
        eff, how = effective_max_running(src, srv)
        if rule == REQUEST_CAP_BOUND:
            if not eff:
                return []
            demand = _peak(srv, "running") + _peak(srv, "queued")
            n = _roundup8(max(demand, eff + 1))
            kvp = _usage_p(srv, "kv")
            if kvp and kvp > 0:
                n = min(n, int(eff * cfg.kv_high / kvp))
            blocks = srv.capacity.get("mamba_blocks")
            if blocks:
                n = min(n, int(blocks))
            if n <= eff:
                return []
            return [
                (
                    "--max-num-seqs",
                    str(n),
                    f"cap {int(eff)} -> {n}",
                    f"max_num_seqs {int(eff)} ({how}) pinned with requests waiting; KV usage p95 {kvp}",
                )
            ]
        if rule == MAMBA_CAPPED:
            out = []
            blocks = srv.capacity.get("mamba_blocks")
            if blocks:
                out.append(
                    (
                        "--max-num-seqs",
                        str(int(blocks)),
                        f"engine starts: max_num_seqs <= {int(blocks)} Mamba cache blocks",
                        "the engine refuses max_num_seqs above the Mamba cache blocks",
                    )
                )
            return out + _vllm_common(src, srv)
        if rule in (KV_BOUND, RETRACTION_STORM, MAMBA_BOUND, MAMBA_EXHAUSTED):
            return _vllm_common(src, srv)
    return []


# --------------------------------------------------------------------------------------------
# entry points used by the rules


def for_rules(src: SourceState, srv: ServerState, rules, cfg: RulesConfig | None = None) -> list[Recommendation]:
    """Recommendations (with expected effects) for the given rule ids of ``srv``."""
    o = observed(src, srv, cfg)
    recs: list[Recommendation] = []
    seen: set[tuple[str, str, str]] = set()
    for rule in rules:
        for flag, value, fallback, why in candidates(src, srv, rule, cfg):
            key = (rule, flag, value)
            if key in seen:
                continue
            seen.add(key)
            text, _ = _effect(o, flag, value, fallback)
            recs.append(Recommendation(rule, flag, value, text, why))
    return recs


def update(src: SourceState, srv: ServerState, cfg: RulesConfig | None = None) -> list[Recommendation]:
    """Recompute recommendations for the live findings of ``srv``."""
    recs = for_rules(src, srv, [r for r, on in srv.findings.items() if on], cfg)
    srv.recommendations = [r.as_tuple() for r in recs]
    srv.rule_memory["recommendations"] = recs
    update_ratio(src, srv, cfg)
    return recs


def inputs(src: SourceState, srv: ServerState, cfg: RulesConfig) -> tuple:
    """What :func:`update` reads, as far as it can change between two batch samples: the live
    findings, the peak demand and the p95 / max usages (``_usage_p``, ``_peak``); plus
    stamps for the rest (config, capacity, release range, engine change only with a non-batch event,
    which bumps the source's ``gen``, or with a restart) and the thresholds.

    Recommendations are a function of these, so a refresh with the inputs of the last one is
    skipped: most refreshes of a long-lived finding are (tests/test_sample_cost.py checks that the
    state is the same as with every refresh computed, sample by sample)."""
    m = srv.rule_memory
    usage, peaks = m["usage"], m["peaks"]
    kv, mamba = usage["kv"], usage["mamba"]
    return (
        src.restarts,
        src.rule_memory.get("gen", 0),
        src.engine,
        tuple(vars(cfg).values()),
        tuple(srv.findings.items()),
        peaks.get("running"),
        peaks.get("queued"),
        kv.quantile(0.95),
        kv.quantile(1.0),
        mamba.quantile(0.95),
    )


RECOMMEND_REFRESH_SECONDS = 30.0
_NEVER = float("-inf")


class Recommender:
    """Observes the rules (:class:`exporter.rules.FindingObserver`): recomputes a server's recommendations
    when one of its findings changes, and refreshes them (their values follow the usage percentiles) every
    30 s of log time while a finding is live, unless nothing they depend on changed (:func:`inputs`)."""

    def transition(self, src: SourceState, srv: ServerState, rule: str, on: bool, cfg: RulesConfig) -> None:
        update(src, srv, cfg)
        srv.rule_memory["reco_inputs"] = None  # the next refresh recomputes

    def sample(self, src: SourceState, srv: ServerState, ts: float, cfg: RulesConfig) -> None:
        m = srv.rule_memory
        if ts - m.get("reco_ts", _NEVER) < RECOMMEND_REFRESH_SECONDS:
            return
        m["reco_ts"] = ts
        now = inputs(src, srv, cfg)
        if now != m.get("reco_inputs"):
            update(src, srv, cfg)
            m["reco_inputs"] = now


def observe(rules: Rules) -> Rules:
    """Make the recommendations follow ``rules`` (idempotent); returns ``rules``."""
    if not any(isinstance(o, Recommender) for o in rules.observers):
        rules.observers.append(Recommender())
    return rules


def update_ratio(src: SourceState, srv: ServerState, cfg: RulesConfig | None = None) -> None:
    f = srv.findings
    if f.get(MAMBA_BOUND) or f.get(KV_BOUND) or f.get(MAMBA_CAPPED):
        srv.recommended_ratio = balanced_ratio(src, srv, cfg)
    else:
        srv.recommended_ratio = None


__all__ = [
    "Recommendation",
    "Recommender",
    "observe",
    "candidates",
    "for_rules",
    "inputs",
    "observed",
    "update",
    "update_ratio",
    "balanced_ratio",
]
