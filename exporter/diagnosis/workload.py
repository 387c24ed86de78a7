"""The workload behind the ratio: the request lengths a log shows, and the ``--mamba-full-memory-ratio`` that serves them.

A request holds a fixed number of mamba slots however long it is, and KV tokens in proportion to its length: short
requests want a larger share of the memory for the mamba pool, long ones for the KV pool. The rules keep two
distributions per server (:class:`~exporter.diagnosis.memory.LengthStats`, from the samples): the KV tokens per running
request (SGLang decode ``#full token / #running-req``; vLLM stats ``GPU KV cache usage`` x the logged pool /
``Running``) and the prompt tokens per new request (SGLang prefill ``(#new-token + #cached-token) / #new-seq``; a
chunked prefill shows one chunk, at most ``chunked_prefill_size``).

From the first: the ratio at which the mamba pool's cap equals the number of such requests the KV pool holds
(``capacity.balanced_ratio_for_context`` with the logged bytes per slot and per token), at the median and at the
90th percentile of the KV tokens per running request. The 90th percentile is the one that serves the workload: the
KV pool then binds in at most one sample in ten. Batch lines show batch averages, so the spread of single requests
is wider than these figures; a log with fewer than ``MIN_SAMPLES`` samples is too short to say.
"""

from __future__ import annotations

import math
import re

from parsers import events as ev

from ..capacity import balanced_ratio_for_context
from ..state.facts import GDN_ARCH_RE, Demand, ServerFacts
from ..state.store import ServerState
from .memory import LengthStats, peek_memory

MIN_SAMPLES = 30  # samples (one per 10 s of a busy server's log): five minutes


def demand_of(srv: ServerState) -> Demand:
    """What ``srv`` was asked to do so far, as its samples showed it: usage percentiles and peaks."""
    m = peek_memory(srv)
    usage, peaks = m.usage, m.peaks

    def q(pool: str, p: float) -> float | None:
        u = usage.get(pool)
        return u.quantile(p) if u is not None and u.n else None

    return Demand(
        kv_p95=q("kv", 0.95),
        kv_max=q("kv", 1.0),
        mamba_p95=q("mamba", 0.95),
        peak_running=float(peaks.get("running", 0) or 0),
        peak_queued=float(peaks.get("queued", 0) or 0),
    )


def _summary(ls: LengthStats | None) -> dict | None:
    if ls is None or not ls.n:
        return None
    return {"samples": ls.n, "p10": ls.quantile(0.1), "p50": ls.quantile(0.5), "p90": ls.quantile(0.9), "max": ls.max}


def _histogram(ls: LengthStats) -> list[dict]:
    """Octave bins (powers of two) with their share of the samples, for the report's picture."""
    octaves: dict[int, int] = {}
    for b, c in enumerate(ls.counts):
        if c:
            lo = LengthStats.low(b - b % 4) if b >= 4 else 0
            octaves[lo] = octaves.get(lo, 0) + c
    return [{"lo": lo, "hi": lo * 2 if lo else 1, "samples": c, "share": round(c / ls.n, 4)} for lo, c in sorted(octaves.items())]


def workload(lengths: dict, facts: ServerFacts) -> dict:
    """What the report and the status page say about the request lengths of one server."""
    running, prompt = lengths.get("running"), lengths.get("prompt")
    out: dict = {"running": _summary(running), "prompt": _summary(prompt)}
    n = running.n if running is not None else 0
    if n < MIN_SAMPLES:
        out["verdict"] = (
            f"too short to know: {n} sample(s) of running requests, {MIN_SAMPLES} needed (five minutes of a busy log)"
            if n
            else "no batch line showed the tokens of the running requests"
        )
        return out
    out["histogram"] = _histogram(running)
    o = facts.capacity
    if facts.engine != ev.SGLANG or facts.unified_memory:
        out["verdict"] = (
            "vLLM's V1 block pool holds KV and mamba state alike: no ratio to set"
            if facts.engine == ev.VLLM
            else "unified memory: the pools share one buffer at runtime, no ratio to set"
        )
        return out
    slot, kpt, spr = o.bytes_per_slot, o.kv_bytes_per_token, o.slots_per_request
    if not slot or not kpt or not spr:
        out["verdict"] = "the log lacks the pool sizes (Mamba Cache / KV Cache lines) for a ratio"
        return out
    rs = {q: running.quantile(p) for q, p in (("p50", 0.5), ("p90", 0.9))}
    ratios = {q: float(f"{balanced_ratio_for_context(int(slot), spr, int(kpt), max(1, t)):.2g}") for q, t in rs.items() if t}
    out["ratio"] = ratios
    now = o.mamba_full_memory_ratio
    out["current_ratio"] = now
    r = ratios.get("p90")
    if r is not None and now:
        if r > now * 1.05:
            out["verdict"] = f"the workload wants more memory for the mamba pool: ratio {r:g} (now {now:g})"
        elif r < now * 0.95:
            out["verdict"] = f"the workload wants more memory for the KV pool: ratio {r:g} (now {now:g})"
        else:
            out["verdict"] = f"the current ratio {now:g} serves the workload (the 90th percentile wants {r:g})"
    return out


# linear-attention layers per full-attention layer of the hybrid families whose layout the architecture name tells
# (config.json's layer_types / full_attention_interval; Nemotron-H's varies by checkpoint: not listed)
_LAYOUT = (
    (GDN_ARCH_RE, 3, "Qwen3-Next / Qwen3.5+: 3 GDN layers per full-attention layer"),
    (re.compile(r"KimiLinear|KimiK3"), 3, "Kimi Linear / kimi-k3: 3 KDA layers per MLA layer"),
)


def shared_pool(capacity: dict, facts: ServerFacts, arch: str | None, lengths: dict) -> dict | None:
    """vLLM V1: what part of the one block pool a running request's mamba state takes, and the concurrency the state
    alone allows, from the logged block size, the logged concurrency at max_model_len and the architecture's layout.

    Per request, each attention group holds ``ceil(L / B)`` blocks of ``B`` tokens and each mamba group one block
    (its state, padded to the page of a block); the groups come in the layout's ratio. The logged "Maximum
    concurrency for M tokens" is ``num_blocks / (ceil(M/B) + r)`` blocks per attention group (r = linear : full), so
    the state alone allows ``C (ceil(M/B) + r) / r`` requests. Align mode's prefill checkpoint blocks are not counted
    (the share is a lower bound)."""
    if facts.engine != ev.VLLM:
        return None
    B = capacity.get("attention_block_size_tokens")
    layout = next(((r, why) for rx, r, why in _LAYOUT if rx.search(arch or "")), None)
    out: dict = {"block_tokens": int(B) if B else None, "padding": capacity.get("mamba_page_padding_ratio")}
    blocks = capacity.get("mamba_blocks")
    if blocks:  # vLLM said it: "exceeds available Mamba cache blocks (N)"
        out["mamba_bound_concurrency"] = int(blocks)
    if not B or layout is None:
        out["verdict"] = (
            "the log does not say the attention block size (no 'Setting attention block size' line)"
            if not B
            else f"the layout of {arch or 'this model'} (linear : full-attention layers) is not known from the log"
        )
        return out
    r, why = layout
    out["layout"] = why
    running = lengths.get("running")
    L = running.quantile(0.5) if running is not None and running.n else None
    if L:
        kv_blocks = math.ceil(L / B)
        out["tokens_per_request"] = L
        out["state_share"] = round(r / (kv_blocks + r), 4)
    C, M = capacity.get("max_concurrency"), capacity.get("context_length_tokens")
    if C and M and not blocks:
        out["mamba_bound_concurrency"] = int(C * (math.ceil(M / B) + r) / r)
    return out


def pool_words(vp: dict | None) -> list[str]:
    """:func:`shared_pool` in sentences (the report and the status page print these)."""
    if not vp:
        return []
    out = []
    if vp.get("block_tokens"):
        pad = f", the mamba page padded by {vp['padding'] * 100:.2f} %" if vp.get("padding") is not None else ""
        out.append(f"block: {vp['block_tokens']:,} tokens of KV, or one mamba layer group's state{pad}")
    if vp.get("layout"):
        out.append(f"layout: {vp['layout']}")
    if vp.get("state_share") is not None:
        out.append(
            f"a running request's mamba state takes about {vp['state_share'] * 100:.0f} % of its blocks "
            f"(at the median {vp['tokens_per_request']:,} KV tokens; align mode's checkpoint blocks not counted)"
        )
    if vp.get("mamba_bound_concurrency"):
        out.append(f"mamba-bound concurrency (the state alone): {vp['mamba_bound_concurrency']:,} requests")
    if vp.get("verdict"):
        out.append(vp["verdict"])
    out.append("--max-num-seqs frees no KV memory in V1: the pool is sized from the memory budget before any request runs")
    return out


__all__ = ["MIN_SAMPLES", "pool_words", "shared_pool", "workload"]
