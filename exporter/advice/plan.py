"""``plan`` subcommand: capacity plan for a hybrid model from its HF config.json (no server needed).

Usage (the command line is ``exporter/cli/plan.py``; :func:`build` takes its parsed arguments)::

    hybrid-cache-exporter plan --config fixtures/configs/kimi-k3.json --engine sglang --tp 8 \\
        --kv-budget 27.3 --kv-cache-dtype fp8_e4m3 --mamba-ssm-dtype bfloat16 --mamba-full-memory-ratio 0.15 \\
        --radix-strategy extra_buffer --context-len 19456 --max-running-requests 64

Memory budget: ``--kv-budget GiB`` is the per-GPU memory for KV + state (SGLang's ``rest`` / vLLM's "Available KV
cache memory"). ``--gpu-memory GiB`` instead derives it as ``gpu_memory × --mem-fraction − --weights/tp``.
Exit codes: 0 ok, 2 bad input (missing/invalid config, bad option combination).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .. import capacity as cap
from ..diagnosis.workload import demand_of
from ..state.facts import facts_of
from ..state.revisions import in_force
from . import flags

V1_MAX_NUM_SEQS = (
    "--max-num-seqs frees no KV memory in vLLM V1: the one block pool (KV and mamba state alike) is allocated from the "
    "memory budget at startup, whatever the cap; a lower cap only limits how many requests draw blocks from it"
)


class UsageError(Exception):
    """A bad option value or combination (exit code 2, one line on stderr)."""


@dataclass
class PlanRequest:
    """What ``plan`` is asked, as plain values (the face fills it from its options; defaults as there)."""

    config: str
    engine: str = "sglang"
    tp: int = 1
    kv_budget: float | None = None  # GiB per GPU for KV + state
    gpu_memory: float | None = None  # GiB per GPU; budget = this x mem_fraction - weights / tp
    mem_fraction: float = 0.9
    weights: float | None = None  # GiB over all GPUs
    kv_cache_dtype: str | None = "auto"
    mamba_ssm_dtype: str | None = None
    mamba_full_memory_ratio: float = 0.9
    max_mamba_cache_size: int | None = None
    radix_strategy: str = "auto"
    disable_overlap_schedule: bool = False
    skip_decode_lock: bool = False
    sglang_version: str | None = None
    vllm_version: str | None = None
    mamba_cache_mode: str = "auto"
    prefix_caching: bool | None = None
    platform: str = "hopper"
    cpu_isa: str = "avx512-bf16"
    gdn_prefill_backend: str = "auto"
    num_gpu_blocks_override: int | None = None
    context_len: int | None = None
    max_running_requests: int | None = None
    spec_draft_tokens: int = 0
    use_replayssm: bool = False
    replayssm_buffer_len: int = 16


def _budget_bytes(args: PlanRequest, notes: list[str]) -> int:
    if args.kv_budget is not None:
        if args.kv_budget <= 0:
            raise UsageError("--kv-budget must be > 0")
        return int(args.kv_budget * cap.GiB)
    if args.gpu_memory is not None:
        if args.gpu_memory <= 0:
            raise UsageError("--gpu-memory must be > 0")
        b = args.gpu_memory * args.mem_fraction
        if args.weights is None:
            notes.append("weights not subtracted from --gpu-memory (pass --weights GiB or use --kv-budget)")
        else:
            b -= args.weights / max(1, args.tp)
        if b <= 0:
            raise UsageError("no memory left for KV + state after weights")
        return int(b * cap.GiB)
    return 0


def build(args: PlanRequest) -> tuple[cap.Plan | None, list[cap.Effect], list[str]]:
    """Model + plan + effects for a request. Raises ``cap.ConfigError`` / ``UsageError``."""
    model = cap.load_model(args.config)
    notes: list[str] = []
    if args.tp < 1:
        raise UsageError("--tp must be ≥ 1")
    budget = _budget_bytes(args, notes)
    try:
        kv_dtype = None if args.kv_cache_dtype in (None, "auto") else cap.normalize_dtype(args.kv_cache_dtype)
        ssm = None if args.mamba_ssm_dtype in (None, "auto") else cap.normalize_dtype(args.mamba_ssm_dtype)
    except ValueError as e:
        raise UsageError(str(e)) from None
    inputs = cap.PlanInputs(
        engine=args.engine,
        tp=args.tp,
        budget_bytes=budget,
        kv_dtype=kv_dtype,
        ssm_dtype=ssm,
        ratio=args.mamba_full_memory_ratio,
        radix_strategy=args.radix_strategy,
        context_len=args.context_len,
        max_running_requests=args.max_running_requests,
        spec_draft_tokens=args.spec_draft_tokens,
        max_mamba_cache_size=args.max_mamba_cache_size,
        skip_decode_lock=args.skip_decode_lock,
        overlap=not args.disable_overlap_schedule,
        sglang_version=args.sglang_version,
        vllm_mode=args.mamba_cache_mode,
        platform=args.platform,
        cpu_isa=args.cpu_isa,
        gdn_backend=args.gdn_prefill_backend,
        prefix_caching=args.prefix_caching,
        vllm_version=args.vllm_version,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
        use_replayssm=args.use_replayssm,
        replayssm_buffer_len=args.replayssm_buffer_len,
    )
    if args.use_replayssm and args.engine != "vllm":
        raise UsageError("--use-replayssm is vLLM's")
    model = cap.as_served(model, args.engine)
    notes.extend(cap.unmodelled_notes(model, inputs, gpu_memory=args.gpu_memory is not None))
    if args.engine == "vllm" and model.is_hybrid:
        notes.append(V1_MAX_NUM_SEQS)
    if model.attention_free:
        notes.append(
            f"attention-free model ({model.linear_layers} state layers, no attention): the per-request state is the "
            "engine's; its pool sizes and caps are not modelled"
        )
        return _per_unit_only(model, inputs), [], notes
    if not budget:
        notes.append("no --kv-budget/--gpu-memory: pool sizes and caps not computed")
        return _per_unit_only(model, inputs), [], notes
    try:
        plan = cap.make_plan(model, inputs)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return plan, flags.plan_effects(model, inputs), notes


def _per_unit_only(model: cap.ModelSpec, inputs: cap.PlanInputs) -> cap.Plan:
    try:
        st = cap.state_of(model, inputs)
    except ValueError as e:
        raise UsageError(str(e)) from None
    kvt = cap.kv_bytes_per_token(model, inputs.kv_dtype, inputs.tp)
    spr = None
    if inputs.engine == "sglang" and model.is_hybrid:
        try:
            spr = cap.sglang_slots_per_request(
                inputs.radix_strategy,
                inputs.sglang_version,
                overlap=inputs.overlap,
                spec=inputs.spec_draft_tokens > 0,
                skip_decode_lock=inputs.skip_decode_lock,
            )
        except ValueError as e:
            raise UsageError(str(e)) from None
    return cap.Plan(model, inputs, kvt, kvt * inputs.tp, st, spr)


def _h(n: float) -> str:
    """Human bytes: 65536 -> '64 KiB', 150994944 -> '144 MiB'."""
    for unit, size in (("GiB", cap.GiB), ("MiB", cap.MiB), ("KiB", cap.KiB)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if abs(v - round(v)) < 0.005 else f"{v:.2f} {unit}"
    return f"{int(n)} B"


def to_dict(plan: cap.Plan, effects: list[cap.Effect], notes: list[str]) -> dict[str, Any]:
    m, st = plan.model, plan.state
    d: dict[str, Any] = {
        "model": {
            "name": m.name,
            "layers": m.num_layers,
            "full_attention_layers": m.full_layers,
            "linear_layers": m.linear_layers,
            "linear_kind": m.linear_kind,
            "attention": m.attention,
            "family": m.family,
        },
        "engine": plan.inputs.engine,
        "tp": plan.inputs.tp,
        "platform": plan.inputs.platform,
        **({"cpu_isa": plan.inputs.cpu_isa} if plan.inputs.platform == "cpu" else {}),
        "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token,
        "kv_bytes_per_token_all_gpus": plan.kv_bytes_per_token_all_gpus,
        "state": {
            "conv_dtype": st.conv_dtype,
            "ssm_dtype": st.ssm_dtype,
            "conv_bytes_per_request_per_gpu": st.conv_bytes,
            "ssm_bytes_per_request_per_gpu": st.ssm_bytes,
            "bytes_per_request_per_gpu": st.per_request,
            "bytes_per_request_all_gpus": st.all_gpus,
            **({"replayssm_ring_bytes_per_request_per_gpu": st.ring_bytes} if st.ring_bytes else {}),
        },
        "slots_per_request": plan.slots_per_request,
        "notes": notes,
    }
    if plan.sglang is not None:
        d["sglang"] = asdict(plan.sglang)
    if plan.vllm is not None:
        d["vllm"] = asdict(plan.vllm)
    if plan.sglang is not None or plan.vllm is not None:
        d["cap"] = plan.cap
        d["binding_pool"] = plan.binding_pool
    d["effects"] = [asdict(e) for e in effects]
    return d


def render(plan: cap.Plan, effects: list[cap.Effect], notes: list[str]) -> str:
    m, st, i = plan.model, plan.state, plan.inputs
    out = [
        f"model: {m.name} — {m.num_layers} layers: {m.full_layers} full-attention ({m.attention.upper()}) + "
        f"{m.linear_layers} linear ({m.linear_kind or 'none'}); engine {i.engine}, TP{i.tp}",
        f"KV per token: {plan.kv_bytes_per_token:,} B ({_h(plan.kv_bytes_per_token)}) per GPU, "
        f"{plan.kv_bytes_per_token_all_gpus:,} B over {i.tp} GPU(s)",
    ]
    if m.is_hybrid:
        ssm = f"ssm {_h(st.ssm_bytes)} ({st.ssm_dtype})" if st.ssm_dtype else "no SSM state"
        if st.ring_bytes:
            ssm += f" + ReplaySSM rings {_h(st.ring_bytes)}"
        out.append(
            f"state per request: {st.per_request:,} B ({_h(st.per_request)}) per GPU = conv {_h(st.conv_bytes)} ({st.conv_dtype}) + "
            f"{ssm}; {_h(st.all_gpus)} over {i.tp} GPU(s)"
        )
    if plan.slots_per_request is not None:
        label = "mamba slots per request" if i.engine == "sglang" else "mamba blocks per request (all groups)"
        out.append(f"{label}: {plan.slots_per_request}")
    sp, vp = plan.sglang, plan.vllm
    if sp is not None:
        out.append(f"budget (KV + state) per GPU: {_h(sp.rest_bytes)}, --mamba-full-memory-ratio {sp.ratio:g}")
        if m.is_hybrid:
            out.append(
                f"mamba pool: {sp.mamba_slots:,} slots = {_h(sp.mamba_bytes)}; cap {sp.mamba_slots:,} // {sp.slots_per_request} = {sp.mamba_cap:,}"
            )
        out.append(
            f"KV pool: {sp.kv_tokens:,} tokens = {_h(sp.kv_bytes)}"
            + (f"; {sp.requests_at_context:,} requests of {sp.context_len:,} tokens" if sp.context_len else "")
        )
        out.append(f"max_running_requests: {sp.max_running_requests:,} (bound by {sp.bound_by}); pool that binds: {sp.binding_pool}")
        if not sp.fits:
            out.append("WARNING: does not fit (no KV memory left or 0 mamba slots)")
        elif sp.context_len and sp.kv_tokens < sp.context_len:
            out.append(
                f"WARNING: the KV pool ({sp.kv_tokens:,} tokens) holds less than one request of the context length ({sp.context_len:,})"
            )
    if vp is not None:
        out.append(
            f"block size {vp.block_size} tokens, page {vp.page_bytes:,} B (mamba page {vp.mamba_page:,} B, padding {vp.padding_pct:.2f}%), "
            f"group size {vp.group_size}: {vp.n_attn_groups} attention + {vp.n_mamba_groups} mamba groups"
        )
        ck = f" incl. {vp.checkpoint_blocks} prefill checkpoint block" if vp.checkpoint_blocks else ""
        out.append(f"mamba cache mode {vp.mode}: {vp.blocks_per_request} state block(s) per request per mamba group{ck}")
        out.append(f"num_blocks: {vp.num_blocks:,}; state per running sequence {_h(vp.state_bytes_per_request)} (padded)")
        out.append(f"mamba-bound concurrency: {vp.mamba_bound_concurrency:,}")
        if vp.max_concurrency is not None:
            out.append(
                f"Maximum concurrency for {vp.max_model_len:,} tokens per request: {vp.max_concurrency:.2f}x; GPU KV cache size {vp.kv_cache_tokens_new:,} tokens (0.22+ formula), {vp.kv_cache_tokens_old:,} (≤0.20 formula)"
            )
        else:
            out.append(f"GPU KV cache size: {vp.kv_cache_tokens_old:,} tokens (≤0.20 formula)")
        out.append(f"cap: {vp.cap:,}; pool that binds: {vp.binding_pool}")
        if vp.max_concurrency is not None and vp.max_concurrency < 1:
            out.append(f"WARNING: less than one request of {vp.max_model_len:,} tokens fits: vLLM refuses to start (lower --max-model-len)")
    if effects:
        out.append("flag effects:")
        out.extend(f"  {e.summary}" for e in effects)
    out.extend(f"note: {n}" for n in notes)
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# plan --from-log: the capacity model on the pools a log shows


def from_log(pipe, cfg=None) -> list[dict]:
    """Per server of a replayed log: its logged pools, the capacity model against them (the ratio arithmetic's
    pool for the logged ratio, by how much they disagree and what the model leaves out) and the effect of every
    catalogued flag, started from the logged pools (``flags.effect_from_log``); effects that change nothing are
    left out."""
    out = []
    for name, src in sorted(pipe.sources.items()):
        for dp, srv in sorted(src.servers.items()):
            f = facts_of(src, srv, cfg)
            o = f.observed(demand_of(srv))
            effects = []
            for e in flags.CATALOGUE:
                if e.from_log is None or (f.engine or "") not in e.engines:
                    continue
                for engine, value in e.plan_value:
                    if engine != f.engine:
                        continue
                    try:
                        eff = flags.effect_from_log(o, e.flag, value)
                    except (ValueError, ZeroDivisionError, TypeError):
                        eff = None
                    if eff is not None and not eff.changes_nothing:
                        effects.append(eff)
            out.append(
                {
                    "source": name,
                    "dp_rank": dp,
                    "engine": f.engine,
                    "kv_budget": _kv_budget(srv),
                    "pools": {
                        "mamba_slots": o.mamba_slots,
                        "slots_per_request": o.slots_per_request,
                        "kv_tokens": o.kv_tokens,
                        "cap": f.max_running,
                        "mamba_full_memory_ratio": o.mamba_full_memory_ratio if f.engine == "sglang" else None,
                    },
                    "model_check": cap.ratio_model_check(o),
                    "effects": effects,
                }
            )
    return out


def _kv_budget(srv) -> dict | None:
    """The KV pool's bytes as the log gives them (``plan --kv-budget`` takes the final figure): the value in force and,
    where this boot sized the pool again after warmup (vLLM 0.34), the estimate before it, each with its line."""
    hist = srv.revisions.get("kv_capacity_bytes") or []
    cur = in_force(hist)
    if cur is None or "kv_capacity_bytes" not in srv.capacity:
        return None
    first = hist[0]
    out = {"gib": round(cur.value / cap.GiB, 2), "stage": cur.stage, "line": cur.text}
    if first is not cur and first.value != cur.value:
        out.update(estimate_gib=round(first.value / cap.GiB, 2), estimate_line=first.text)
    return out


def render_from_log(servers: list[dict]) -> str:
    lines = []
    for s in servers:
        p = s["pools"]
        lines.append(f"source {s['source']} dp_rank {s['dp_rank']} ({s['engine'] or 'engine not detected'}): the pools as logged")
        kb = s.get("kv_budget")
        if kb:
            est = f"; {kb['estimate_gib']:g} GiB was the estimate before warmup ({kb['estimate_line']})" if kb.get("estimate_gib") else ""
            src = f" ({kb['line']})" if kb.get("line") else ""
            lines.append(f"  KV budget {kb['gib']:g} GiB per GPU{src}{est}: plan --kv-budget {kb['gib']:g}")
        lines.append(
            "  "
            + ", ".join(
                f"{label} {v:,}" if isinstance(v, int) else f"{label} {v:g}"
                for label, v in (
                    ("mamba slots", p["mamba_slots"]),
                    ("slots per request", p["slots_per_request"]),
                    ("KV tokens", p["kv_tokens"]),
                    ("cap", int(p["cap"]) if p["cap"] else None),
                    ("ratio", p["mamba_full_memory_ratio"]),
                )
                if v is not None
            )
        )
        mc = s["model_check"]
        if mc:
            gap = (mc["gap"] or 0.0) * 100
            lines.append(
                f"  model check: the ratio arithmetic gives {mc['model_slots']:,} mamba slots for ratio {mc['ratio']:g}, the log "
                f"{mc['logged_slots']:,} ({gap:+.0f} %): "
                + (
                    "within 5 %, the model's predictions hold"
                    if mc["agrees"]
                    else "ratio predictions withheld"
                    if abs(gap) >= cap.MODEL_WITHHOLD * 100
                    else "ratio predictions scaled from the logged pools"
                )
            )
            if mc["leaves_out"]:
                lines.append("  the model leaves out: " + "; ".join(mc["leaves_out"]))
        if s["effects"]:
            lines.append("  flag effects from the logged pools:")
            lines.extend(f"    {e.summary}" for e in s["effects"])
        else:
            lines.append("  no catalogued flag changes what this log shows")
        if s["engine"] == "vllm":
            lines.append(f"  note: {V1_MAX_NUM_SEQS}")
    return "\n".join(lines)
