"""Expected effects of flags: from what a log says (:class:`ObservedCapacity`) and from a plan.

The flags themselves (which engine, which gates, which value, which effect function) are catalogued in
``exporter/advice/flags.py``; these are the effect computations it points to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from . import defaults
from .model import GiB, MiB, ModelSpec, dtype_bytes, normalize_dtype, short_dtype
from .planning import Plan, PlanInputs, make_plan
from .sizing import balanced_ratio_for_context, has_ssm_lever, norm_strategy

# --------------------------------------------------------------------------------------------------------------
# effects of flags
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Effect:
    """Expected effect of one flag. ``*_before``/``*_after`` are ``None`` when unknown/unchanged-unknown."""

    flag: str
    value: str | None
    summary: str  # human string, e.g. "ssm bf16: mamba slots 80 → 160, cap 16 → 32"
    mamba_slots_before: int | None = None
    mamba_slots_after: int | None = None
    slots_per_request_before: int | None = None
    slots_per_request_after: int | None = None
    kv_tokens_before: int | None = None
    kv_tokens_after: int | None = None
    cap_before: int | None = None
    cap_after: int | None = None
    notes: tuple[str, ...] = ()
    # what the prediction needs that the log does not show (the memory behind an explicit --max-total-tokens): a
    # recommendation made of it is held, with this as its caveat, never exported
    unproven: tuple[str, ...] = ()
    model_gap: float | None = None  # how far the model's pool for the logged configuration is from the logged pool (0.1: 10 %)
    scaled: bool = False  # the prediction is scaled from the logged pools (the model disagrees by more than MODEL_TOLERANCE)

    def __str__(self) -> str:
        return self.summary

    @property
    def changes_nothing(self) -> bool:
        """No figure it knows moves (``max-num-seqs 4: cap 4 → 4``): ``plan`` does not print such an effect."""
        pairs = [
            (getattr(self, k + "_before"), getattr(self, k + "_after")) for k in ("mamba_slots", "slots_per_request", "kv_tokens", "cap")
        ]
        known = [(a, b) for a, b in pairs if a is not None or b is not None]
        return bool(known) and all(a == b for a, b in known)

    @property
    def cap_gain(self) -> int | None:
        if self.cap_before is None or self.cap_after is None:
            return None
        return self.cap_after - self.cap_before


def _fmt(n: int | float | None) -> str:
    if n is None:
        return "?"
    if isinstance(n, float) and not n.is_integer():
        return f"{n:.3g}"
    return f"{int(n):,}"


def _arrow(label: str, a: int | None, b: int | None) -> str | None:
    if a is None and b is None:
        return None
    return f"{label} {_fmt(a)} → {_fmt(b)}"


def _make_effect(
    flag: str,
    value: str | None,
    head: str,
    *,
    notes: tuple[str, ...] = (),
    slot_label: str = "mamba slots",
    model_gap: float | None = None,
    scaled: bool = False,
    unproven: tuple[str, ...] = (),
    **ba: int | None,
) -> Effect:
    parts = []
    for label, key in (
        (slot_label, "mamba_slots"),
        ("slots/request" if slot_label == "mamba slots" else "blocks/request", "slots_per_request"),
        ("KV tokens", "kv_tokens"),
        ("cap", "cap"),
    ):
        a, b = ba.get(f"{key}_before"), ba.get(f"{key}_after")
        if key != "cap" and a == b:
            continue  # only show what moves; the cap is always shown
        s = _arrow(label, a, b)
        if s:
            parts.append(s)
    summary = f"{head}: " + ", ".join(parts) if parts else head
    if notes:
        summary += " (" + "; ".join(notes) + ")"
    return Effect(flag=flag, value=value, summary=summary, notes=notes, model_gap=model_gap, scaled=scaled, unproven=unproven, **ba)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ObservedCapacity:
    """What the logs say (one TP/DP rank). All optional.

    ``conv_bytes``/``ssm_bytes``/``kv_bytes`` are **pool totals** in bytes as logged ("Mamba Cache is allocated …
    conv_state size", "KV Cache is allocated … KV size" × 2**30). ``mamba_slots`` is ``max_mamba_cache_size``;
    SGLang allocates ``mamba_slots + padding_slots`` slots, so bytes per slot = (conv+ssm)/(slots+padding).
    For vLLM fill ``mamba_slots`` = ``num_blocks``, ``slots_per_request`` = ``n_mamba_groups × blocks_per_group``,
    ``padding_slots=0`` and ``conv_bytes``/``ssm_bytes`` = ``num_blocks × group_size ×`` per-layer conv/ssm bytes
    (so a dtype change scales ``num_blocks`` like the page size does; the padding to a whole attention block is
    ignored).
    """

    mamba_slots: int | None = None
    slots_per_request: int | None = None
    conv_bytes: float | None = None
    ssm_bytes: float | None = None
    kv_tokens: int | None = None
    kv_bytes: float | None = None
    max_running_requests: int | None = None
    mamba_full_memory_ratio: float | None = None
    ssm_dtype: str | None = None
    mamba_usage: float | None = None
    kv_usage: float | None = None
    # extras (optional)
    kv_dtype: str | None = None
    requested_max_running_requests: int | None = None
    radix_strategy: str | None = None
    engine: str = "sglang"
    padding_slots: int = 1
    context_len: int | None = None  # tokens one request may reach: a KV pool below it cannot hold one
    # what the log shows the server has that the ratio arithmetic leaves out (pre-capture reserve, ReplaySSM rings,
    # a speculative draft pool, an explicit --max-mamba-cache-size ...): said when model and log disagree
    unmodelled: tuple[str, ...] = ()
    explicit_mamba_size: bool = False  # --max-mamba-cache-size set: the ratio does not size the mamba pool
    # SGLang's --max-total-tokens, rounded down to the page as SGLang does: the KV pool is at most this; a logged pool
    # at it was cut by the flag, and the memory behind the flag is not in the log (_log_split)
    kv_token_limit: int | None = None
    # vLLM: the device's memory and the gpu_memory_utilization in force as the log shows them, and the memory 0.34's
    # cap warning says a gpu_memory_utilization below 1.0 keeps out of the KV cache (what unsetting it gives back)
    device_bytes: float | None = None
    memory_utilization: float | None = None
    withheld_bytes: float | None = None

    @property
    def state_bytes(self) -> float | None:
        if self.conv_bytes is None and self.ssm_bytes is None:
            return None
        return (self.conv_bytes or 0.0) + (self.ssm_bytes or 0.0)

    @property
    def bytes_per_slot(self) -> float | None:
        """Bytes of one slot; None when unknown, and when the log prints the state as 0.00 GB (a pool below the
        line's precision, as a tiny model's: its size is not known, and nothing can be divided by it)."""
        sb = self.state_bytes
        if not sb or not self.mamba_slots:
            return None
        return sb / (self.mamba_slots + self.padding_slots)

    @property
    def kv_bytes_per_token(self) -> float | None:
        if self.kv_bytes and self.kv_tokens:
            return self.kv_bytes / self.kv_tokens
        return None

    @property
    def mamba_cap(self) -> int | None:
        if self.mamba_slots is None or not self.slots_per_request:
            return None
        return self.mamba_slots // self.slots_per_request


def _other_limit(obs: ObservedCapacity) -> int | None:
    """A limit on max_running_requests that is neither the mamba pool nor the KV pool (requested/estimate)."""
    if obs.requested_max_running_requests:
        return obs.requested_max_running_requests
    mrr, mc = obs.max_running_requests, obs.mamba_cap
    if mrr is None or (mc is not None and mrr >= mc):
        return None
    if obs.kv_tokens and mrr == obs.kv_tokens // 2:
        return None  # KV-bound: it moves with kv_tokens
    return mrr


def _cap(obs: ObservedCapacity, slots: int | None, spr: int | None, kv_tokens: int | None) -> int | None:
    lim = []
    if slots is not None and spr:
        lim.append(slots // spr)
    if kv_tokens and obs.engine == "sglang":
        lim.append(kv_tokens // 2)
    o = _other_limit(obs)
    if o:
        lim.append(o)
    return min(lim) if lim else None


def _current_cap(obs: ObservedCapacity) -> int | None:
    if obs.max_running_requests is not None:
        return obs.max_running_requests
    return _cap(obs, obs.mamba_slots, obs.slots_per_request, obs.kv_tokens)


def norm_flag(flag: str) -> str:
    """``--Mamba_SSM-dtype`` -> ``mamba-ssm-dtype``; ``SGLANG_OPT_X=1`` -> ``SGLANG_OPT_X`` (catalogue keys)."""
    f = flag.strip()
    if f.upper().startswith("SGLANG_"):
        return f.upper().split("=")[0]
    return f.lstrip("-").lower().replace("_", "-")


def _resize_slots(obs: ObservedCapacity, new_slot_bytes: float) -> int | None:
    """Slots that fit in the current mamba budget at ``new_slot_bytes`` each."""
    sb = obs.state_bytes
    if sb is None or not obs.mamba_slots or new_slot_bytes <= 0:
        return None
    return max(0, int(sb // new_slot_bytes) - obs.padding_slots)


def _below_context(kv_tokens: int | None, context_len: int | None) -> tuple[str, ...]:
    """The note every pool-moving effect carries when it leaves the KV pool below one request's context."""
    if kv_tokens is None or not context_len or kv_tokens >= context_len:
        return ()
    return (f"KV pool {kv_tokens:,} tokens < context length {context_len:,}: a full-length request no longer fits",)


# --------------------------------------------------------------------------------------------------------------
# effects from what the log says, one function per flag (exporter/advice/flags.py points to them)
#
# * ssm dtype: slot bytes = conv + ssm·(new/old); the same mamba budget holds ``floor(budget/slot) − padding``
#   slots, i.e. ≈ ``(S+1)·(conv+ssm)/(conv+ssm/2) − 1`` for fp32 → bf16.
# * ratio R': ``total = mamba_bytes + kv_bytes``; mamba budget' = ``total·R'/(1+R')``; slots' =
#   ``floor(budget'/slot) − padding``; KV tokens scale with the KV bytes left.
# * cap' = ``min(slots'//spr', kv_tokens'//2 (SGLang), other limit)`` where "other" is the requested
#   max_running_requests when known (or the current value if it was below both pool limits).


def log_ssm_dtype(o: ObservedCapacity, value: str | None, flag: str = "--mamba-ssm-dtype") -> Effect | None:
    S0, spr = o.mamba_slots, o.slots_per_request
    new = normalize_dtype(value or "bfloat16")
    old = normalize_dtype(o.ssm_dtype or "float32")
    if new == old or o.ssm_bytes is None or o.bytes_per_slot is None:
        return None
    conv_slot = (o.conv_bytes or 0.0) / (S0 + o.padding_slots)  # type: ignore[operator]
    ssm_slot = o.ssm_bytes / (S0 + o.padding_slots)  # type: ignore[operator]
    new_slot = conv_slot + ssm_slot * dtype_bytes(new) / dtype_bytes(old)
    notes = (f"ssm {short_dtype(old)} → {short_dtype(new)}: state {_mib(o.bytes_per_slot)} → {_mib(new_slot)} per slot",)
    if o.explicit_mamba_size:
        # --max-mamba-cache-size sizes the pool, not its memory: SGLang keeps the slot count, the smaller state frees
        # memory nothing takes (seen on the real SGLang: 3,000 slots and cap 1,000 at both boots, SSM 0.37 -> 0.18 GB)
        notes += (EXPLICIT_SLOTS_NOTE,)
        return _log_state(o, flag, new, f"ssm {short_dtype(new)}", S0, spr, notes)
    S1 = _resize_slots(o, new_slot)
    return _log_state(o, flag, new, f"ssm {short_dtype(new)}", S1, spr, notes)


EXPLICIT_SLOTS_NOTE = (
    "--max-mamba-cache-size fixes the slot count: the state shrinks, the slots and the cap stay; "
    "raise --max-mamba-cache-size with it to use the memory it frees"
)


def _log_state(
    o: ObservedCapacity,
    flag: str,
    shown: str | None,
    head: str,
    S1: int | None,
    spr1: int | None,
    notes: tuple[str, ...],
    *,
    kv_moves: bool = False,
    kv1: int | None = None,
    unproven: tuple[str, ...] = (),
) -> Effect:
    """The effect of a change read from the log: ``S1`` mamba slots, ``spr1`` slots per request and, when
    ``kv_moves``, ``kv1`` KV tokens (otherwise the KV pool stays as it is and its tokens are not reported)."""
    kv = {"kv_tokens_before": o.kv_tokens, "kv_tokens_after": kv1} if kv_moves else {}
    return _make_effect(
        flag,
        shown,
        head,
        notes=notes,
        mamba_slots_before=o.mamba_slots,
        mamba_slots_after=S1,
        slots_per_request_before=o.slots_per_request,
        slots_per_request_after=spr1,
        cap_before=_current_cap(o),
        cap_after=_cap(o, S1, spr1, kv1 if kv_moves else o.kv_tokens),
        unproven=unproven,
        **kv,
    )


def _log_split(o: ObservedCapacity, flag: str, S1: int, shown: str, head: str) -> Effect:
    """The effect of moving the mamba/KV split to ``S1`` slots (ratio or explicit size).

    The two logged pools are the memory SGLang split, unless the KV pool sits at an explicit ``--max-total-tokens``:
    SGLang cut it there, and the memory behind the cut is not in the two pools. A smaller mamba pool leaves the KV
    pool at the limit (it cannot grow past the flag). Whether a larger one fits is unknown: neither "does not fit" nor
    a prediction, but a caveat that holds the advice. The real SGLang on this CPU, both from a KV pool of 8,192 tokens
    at the limit: Nemotron-H booted with a mamba pool 0.40 GiB larger; Qwen3-Next refused one 1.85 GiB larger ("Loaded
    weights leave no GPU memory for the KV cache under --mem-fraction-static=0.05")."""
    grow = (S1 + o.padding_slots) * o.bytes_per_slot - o.state_bytes  # type: ignore[operator]
    lim = o.kv_token_limit
    if lim is not None and o.kv_tokens is not None and o.kv_tokens >= lim:
        if grow <= 0:
            note = f"the KV pool stays at --max-total-tokens {lim:,}"
            return _log_state(o, flag, shown, head, S1, o.slots_per_request, (note,), kv_moves=True, kv1=o.kv_tokens)
        unknown = (
            f"the KV pool is cut at --max-total-tokens {lim:,}: whether {grow / GiB:.2f} GiB more is free behind the cut is "
            "not in the log (SGLang refuses to start when it is not)"
        )
        return _log_state(o, flag, shown, head, S1, o.slots_per_request, (), unproven=(unknown,))
    kv1_bytes = o.kv_bytes - grow  # type: ignore[operator]
    kpt = o.kv_bytes_per_token
    kv1 = int(max(0.0, kv1_bytes) // kpt) if kpt else None
    notes: tuple[str, ...] = ("does not fit: no memory left for the KV pool",) if kv1_bytes <= 0 else _below_context(kv1, o.context_len)
    return _log_state(o, flag, shown, head, S1, o.slots_per_request, notes, kv_moves=True, kv1=kv1)


MODEL_TOLERANCE = 0.05  # the model's pool for the logged configuration within 5 % of the logged pool: predict from the model
MODEL_WITHHOLD = 0.5  # 50 % or more apart: the model does not describe this server; no prediction


def _ratio_slots(o: ObservedCapacity, r: float) -> int | None:
    """Mamba slots the ratio arithmetic gives for ratio ``r`` on the logged pool memory."""
    slot, sb = o.bytes_per_slot, o.state_bytes
    if slot is None or sb is None or o.kv_bytes is None or r <= 0:
        return None
    return max(0, int((sb + o.kv_bytes) * r / (1 + r) // slot) - o.padding_slots)


def ratio_model_check(o: ObservedCapacity) -> dict | None:
    """The capacity model against the log: the mamba slots the ratio arithmetic gives for the logged ratio, the
    logged slots, how far apart (relative to the model) and what the model leaves out. None: not computable."""
    r0 = o.mamba_full_memory_ratio
    model = _ratio_slots(o, r0) if r0 else None
    if model is None or not o.mamba_slots or o.engine != "sglang":
        return None
    gap = (o.mamba_slots - model) / model if model else None
    return {
        "ratio": r0,
        "model_slots": model,
        "logged_slots": o.mamba_slots,
        "gap": None if gap is None else round(gap, 4),
        "agrees": gap is not None and abs(gap) <= MODEL_TOLERANCE and not o.explicit_mamba_size,
        "leaves_out": o.unmodelled,
    }


def ratio_moves_pools(o: ObservedCapacity) -> bool:
    """Whether a prediction for another ``--mamba-full-memory-ratio`` can be made for this log: the ratio sizes the
    pools (no ``--max-mamba-cache-size``) and the ratio arithmetic is within MODEL_WITHHOLD of the logged pools."""
    if o.explicit_mamba_size:
        return False
    check = ratio_model_check(o)
    return check is None or check["gap"] is None or abs(check["gap"]) < MODEL_WITHHOLD


def log_ratio(o: ObservedCapacity, value: str | None, flag: str = "--mamba-full-memory-ratio") -> Effect | None:
    """The pools at ratio ``value``: the ratio arithmetic on the logged pool memory where it gives the logged pool
    for the logged ratio (within MODEL_TOLERANCE); else the logged pools scaled by the model's ratio of the new to
    the old split, said in a note, or nothing where the model misses by MODEL_WITHHOLD or more (or where
    ``--max-mamba-cache-size`` sizes the pool, not the ratio)."""
    slot, sb = o.bytes_per_slot, o.state_bytes
    if slot is None or sb is None or o.kv_bytes is None:
        return None
    R = float(value) if value is not None else balanced_mamba_full_memory_ratio(o)
    if R is None or R <= 0:
        return None
    head = f"mamba-full-memory-ratio {_fmt(o.mamba_full_memory_ratio)} → {_fmt(R)}"
    S1 = _ratio_slots(o, R)
    check = ratio_model_check(o)
    if o.explicit_mamba_size or check is None or check["agrees"] or check["gap"] is None:
        if o.explicit_mamba_size:
            return None
        eff = _log_split(o, flag, S1, f"{R:g}", head)  # type: ignore[arg-type]
        return replace(eff, model_gap=check["gap"]) if check else eff
    gap = check["gap"]
    if abs(gap) >= MODEL_WITHHOLD:
        return None
    # scaled: S1 = S0 * model(R1) / model(R0); the KV pool by its share of the memory the same way
    S0, m0 = o.mamba_slots, check["model_slots"]
    S1s = int(round(S0 * (S1 or 0) / m0)) if m0 else None
    r0 = o.mamba_full_memory_ratio or defaults.SGLANG_MAMBA_FULL_MEMORY_RATIO
    kv1 = int(o.kv_tokens * (1 + r0) / (1 + R)) if o.kv_tokens else None
    leaves = "; it leaves out " + ", ".join(o.unmodelled) if o.unmodelled else ""
    note = (
        f"model and log disagree by {gap * 100:+.0f} % (the model gives {m0:,} mamba slots for ratio {r0:g}, the log {S0:,}): "
        f"scaled from the logged pools{leaves}"
    )
    eff = _log_state(o, flag, f"{R:g}", head, S1s, o.slots_per_request, (note, *_below_context(kv1, o.context_len)), kv_moves=True, kv1=kv1)
    return replace(eff, model_gap=gap, scaled=True)


ZERO_STATE_NOTE = (
    "the mamba state prints as 0.00 GB (below the log's precision): its bytes per slot are unknown, so the KV pool is taken as unchanged"
)


def log_max_mamba_cache_size(o: ObservedCapacity, value: str | None, flag: str = "--max-mamba-cache-size") -> Effect | None:
    if value is None:
        return None
    S1 = int(value)
    if o.state_bytes == 0.0 and o.mamba_slots:
        # a pool too small for the log to size (a tiny model's): the slots are the value, the KV pool as it was
        return _log_state(o, flag, str(S1), f"max-mamba-cache-size {S1:,}", S1, o.slots_per_request, (ZERO_STATE_NOTE,))
    if o.bytes_per_slot is None or o.state_bytes is None or o.kv_bytes is None:
        return None
    return _log_split(o, flag, S1, str(S1), f"max-mamba-cache-size {S1:,}")


def _log_slots(o: ObservedCapacity, flag: str, shown: str | None, head: str, spr1: int, notes: tuple[str, ...]) -> Effect | None:
    spr, S0 = o.slots_per_request, o.mamba_slots
    if spr is None or S0 is None or spr1 >= spr:
        return None
    return _log_state(o, flag, shown, head, S0, spr1, notes)


def log_skip_decode_lock(o: ObservedCapacity, value: str | None, flag: str = "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK") -> Effect | None:
    spr = o.slots_per_request
    if spr is None or (value is not None and value.strip().lower() in ("0", "false", "no", "off")):
        return None
    strat = (o.radix_strategy or "").replace("-", "_").lower()
    # no_buffer stays at 3 (base 2 + 1); disable stays at 1; extra_buffer(_lazy) drop one
    spr1 = spr if (spr <= 1 or strat == "no_buffer" or (spr == 3 and not strat)) else spr - 1
    return _log_slots(o, flag, "1", "skip decode lock", spr1, ("SGLang ≥0.5.17",))


def log_radix_strategy(o: ObservedCapacity, value: str | None, flag: str = "--mamba-radix-cache-strategy") -> Effect | None:
    s = norm_strategy(value or "extra_buffer_lazy")
    spr1, notes = {
        "extra_buffer_lazy": (4, ("needs overlap schedule; no PD disaggregation / DFLASH",)),
        "no_buffer": (3, ("no_buffer disables the overlap scheduler",)),
        "extra_buffer": (5, ()),
    }.get(s, (1, ("radix prefix cache off",)))
    return _log_slots(o, flag, s, f"radix strategy {s}", spr1, notes)


def log_disable_radix_cache(o: ObservedCapacity, value: str | None, flag: str = "--disable-radix-cache") -> Effect | None:
    return _log_slots(o, flag, None, "disable radix cache", 1, ("loses prefix-cache hits",))


def log_kv_dtype(o: ObservedCapacity, value: str | None, flag: str = "--kv-cache-dtype") -> Effect | None:
    new = normalize_dtype(value or "fp8")
    old = normalize_dtype(o.kv_dtype or "bfloat16")
    if new == old or not o.kv_tokens:
        return None
    kv1 = int(o.kv_tokens * dtype_bytes(old) / dtype_bytes(new))
    cap0 = _current_cap(o)
    return _make_effect(
        flag,
        value or "fp8",
        f"kv {short_dtype(new)}",
        notes=() if o.kv_dtype else ("assuming the current KV dtype is 16-bit",),
        mamba_slots_before=o.mamba_slots,
        mamba_slots_after=o.mamba_slots,
        kv_tokens_before=o.kv_tokens,
        kv_tokens_after=kv1,
        cap_before=cap0,
        cap_after=_cap(o, o.mamba_slots, o.slots_per_request, kv1) if o.engine == "sglang" else cap0,
    )


def log_max_num_seqs(o: ObservedCapacity, value: str | None, flag: str = "--max-num-seqs") -> Effect | None:
    if value is None:
        return None
    n = int(value)
    lim = [n] + ([o.mamba_cap] if o.mamba_cap is not None else [])
    return _make_effect(
        flag,
        str(n),
        f"max-num-seqs {n:,}",
        cap_before=_current_cap(o),
        cap_after=min(lim),
        notes=("vLLM V1 draws state blocks per running sequence; must be ≤ mamba-bound concurrency",),
    )


def log_gpu_memory_utilization(o: ObservedCapacity, value: str | None, flag: str = "--gpu-memory-utilization") -> Effect | None:
    """vLLM: the one block pool grows by the memory the change adds, and its KV tokens with it (the cap stays).
    ``unset`` (or ``None``, ``plan --from-log``), on 0.34 with the extensible KV cache: the memory the cap warning
    says the cap keeps out of the KV cache (``withheld_bytes``, vLLM's own figure). A number: (new - in force) x the
    device's memory, both as the log shows them. None where the log lacks the figure, or the value would not grow
    the pool."""
    if o.engine != "vllm" or not o.kv_tokens or not o.kv_bytes:
        return None
    if value in (None, "unset"):
        gain, shown = o.withheld_bytes, "unset"
        note = f"+{(gain or 0) / GiB:.2f} GiB: what vLLM's warning says the cap keeps out of the KV cache"
        head = "unset (1.0 with the extensible KV cache)"
    else:
        new, old, dev = float(value), o.memory_utilization, o.device_bytes
        if old is None or dev is None or new <= old:
            return None
        gain, shown = (new - old) * dev, value
        note = f"+{gain / GiB:.2f} GiB: ({new:g} - {old:g}) x {dev / GiB:.2f} GiB of device memory"
        head = f"gpu-memory-utilization {new:g}"
    if not gain or gain <= 0:
        return None
    kv1 = int(o.kv_tokens * (o.kv_bytes + gain) / o.kv_bytes)
    cap0 = _current_cap(o)
    return _make_effect(
        flag, shown, head, notes=(note,), kv_tokens_before=o.kv_tokens, kv_tokens_after=kv1, cap_before=cap0, cap_after=cap0
    )


def _mib(b: float | None) -> str:
    return "?" if b is None else f"{b / MiB:.2f} MiB"


def balanced_mamba_full_memory_ratio(observed: ObservedCapacity) -> float | None:
    """Ratio R (mamba bytes : full-KV bytes) at which both pools would show the same usage for the observed load.

    Bytes in use: ``U_m = mamba_usage · M`` and ``U_k = kv_usage · K`` where M, K are the current pool bytes.
    Keeping ``M + K`` fixed, equal usage ``U_m/M' = U_k/K'`` gives ``M'/K' = U_m/U_k``, so
    ``R = (mamba_usage · M) / (kv_usage · K)``. When the pool bytes are unknown but the current ratio is,
    ``M/K ≈ R_now`` and ``R = R_now · mamba_usage / kv_usage``.
    Returns ``None`` when the usages are missing or ``kv_usage`` is 0 (no KV in use: any R works / infinite).
    """
    um, uk = observed.mamba_usage, observed.kv_usage
    if um is None or uk is None or uk <= 0 or um < 0:
        return None
    M, K, r0 = observed.state_bytes, observed.kv_bytes, observed.mamba_full_memory_ratio
    if not ratio_moves_pools(observed):
        return None
    check = ratio_model_check(observed)
    if M and K and (check is None or check["agrees"] or not r0):
        return (um * M) / (uk * K)
    if r0:  # the model misses the logged split: the ratio scales like the pools do in log_ratio's scaled prediction
        return r0 * um / uk
    return None


# --------------------------------------------------------------------------------------------------------------
# effects from a plan (re-plan the config with the flag), one function per flag


def _plan_effect(before: Plan, after: Plan, flag: str, value: str | None, head: str, notes: tuple[str, ...] = ()) -> Effect:
    ctx = after.inputs.context_len or after.model.context_length
    return _make_effect(
        flag,
        value,
        head,
        notes=notes + (_below_context(after.kv_tokens, ctx) if after.kv_tokens < before.kv_tokens else ()),
        slot_label="mamba slots" if before.inputs.engine == "sglang" else "blocks",
        mamba_slots_before=before.mamba_slots,
        mamba_slots_after=after.mamba_slots,
        slots_per_request_before=before.slots_per_request,
        slots_per_request_after=after.slots_per_request,
        kv_tokens_before=before.kv_tokens,
        kv_tokens_after=after.kv_tokens,
        cap_before=before.cap,
        cap_after=after.cap,
    )


def plan_ssm_dtype(model: ModelSpec, inputs: PlanInputs, value: str | None, flag: str) -> Effect | None:
    """Offered only where the family's class reads the engine's SSM dtype flag and the state has an SSM part (the
    catalogue's rule: not LFM2's conv-only state, not vLLM's Bailing linear attention or KDA)."""
    if not model.is_hybrid or not has_ssm_lever(model, inputs.engine):
        return None
    base = make_plan(model, inputs)
    new = normalize_dtype(value or "bfloat16")
    if new == base.state.ssm_dtype:
        return None
    after = make_plan(model, replace(inputs, ssm_dtype=new))
    note = f"state {_mib(base.state.per_request)} → {_mib(after.state.per_request)} per request per GPU"
    return _plan_effect(base, after, flag, new, f"ssm {short_dtype(new)}", (note,))


def plan_kv_dtype(model: ModelSpec, inputs: PlanInputs, value: str | None, flag: str = "--kv-cache-dtype") -> Effect | None:
    new = normalize_dtype(value or "fp8")
    if new == normalize_dtype(inputs.kv_dtype, model.model_dtype):
        return None
    base = make_plan(model, inputs)
    after = make_plan(model, replace(inputs, kv_dtype=new))
    return _plan_effect(base, after, flag, value or "fp8", f"kv {short_dtype(new)}")


def plan_ratio(model: ModelSpec, inputs: PlanInputs, value: str | None, flag: str = "--mamba-full-memory-ratio") -> Effect | None:
    if not model.is_hybrid:
        return None
    base = make_plan(model, inputs)
    if value is None:
        if not inputs.context_len:
            return None
        r = balanced_ratio_for_context(base.state.per_request, base.slots_per_request or 1, base.kv_bytes_per_token, inputs.context_len)
        value = f"{r:.3g}"
    R = float(value)
    if abs(R - inputs.ratio) < 1e-9:
        return None
    after = make_plan(model, replace(inputs, ratio=R, max_mamba_cache_size=None))
    return _plan_effect(base, after, flag, value, f"mamba-full-memory-ratio {inputs.ratio:g} → {R:g}")


def plan_max_mamba_cache_size(
    model: ModelSpec, inputs: PlanInputs, value: str | None, flag: str = "--max-mamba-cache-size"
) -> Effect | None:
    if not model.is_hybrid:
        return None
    base = make_plan(model, inputs)
    if value is None:
        if not inputs.max_running_requests:
            return None
        value = str(inputs.max_running_requests * (base.slots_per_request or 1))
    after = make_plan(model, replace(inputs, max_mamba_cache_size=int(value)))
    notes = () if after.sglang and after.sglang.fits else ("does not fit: no memory left for the KV pool",)
    return _plan_effect(base, after, flag, value, f"max-mamba-cache-size {int(value):,}", notes)


def plan_skip_decode_lock(
    model: ModelSpec, inputs: PlanInputs, value: str | None, flag: str = "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK"
) -> Effect | None:
    if not model.is_hybrid or inputs.skip_decode_lock:
        return None
    base = make_plan(model, inputs)
    after = make_plan(model, replace(inputs, skip_decode_lock=True))
    if after.slots_per_request == base.slots_per_request:
        return None
    return _plan_effect(base, after, flag, "1", "skip decode lock", ("SGLang ≥0.5.17",))


def plan_radix_strategy(
    model: ModelSpec, inputs: PlanInputs, value: str | None, flag: str = "--mamba-radix-cache-strategy"
) -> Effect | None:
    if not model.is_hybrid:
        return None
    s = norm_strategy(value or "extra_buffer_lazy", inputs.overlap)
    base = make_plan(model, inputs)
    after = make_plan(model, replace(inputs, radix_strategy=s))
    if after.slots_per_request == base.slots_per_request:
        return None
    notes = ("needs overlap schedule; no PD disaggregation / DFLASH",) if s == "extra_buffer_lazy" else ()
    return _plan_effect(base, after, flag, s, f"radix strategy {s}", notes)


def plan_disable_radix_cache(model: ModelSpec, inputs: PlanInputs, value: str | None, flag: str = "--disable-radix-cache") -> Effect | None:
    if not model.is_hybrid or norm_strategy(inputs.radix_strategy, inputs.overlap) == "disable":
        return None
    base = make_plan(model, inputs)
    after = make_plan(model, replace(inputs, radix_strategy="disable"))
    return _plan_effect(base, after, flag, None, "disable radix cache", ("loses prefix-cache hits",))


def plan_max_num_seqs(model: ModelSpec, inputs: PlanInputs, value: str | None, flag: str = "--max-num-seqs") -> Effect | None:
    base = make_plan(model, inputs)
    vp = base.vllm
    if vp is None:
        return None
    if value is None:
        # what the pool can actually run: whole requests at max_model_len (floor: a fraction of a request
        # does not run), at most the mamba bound
        need = math.floor(vp.max_concurrency) if vp.max_concurrency else vp.mamba_bound_concurrency
        if model.is_hybrid:
            need = min(need, vp.mamba_bound_concurrency)
        if inputs.max_running_requests is not None and inputs.max_running_requests <= need:
            return None
        value = str(max(1, need))
    after = make_plan(model, replace(inputs, max_running_requests=int(value)))
    notes: tuple[str, ...] = ()
    if model.is_hybrid and int(value) > vp.num_blocks:
        notes = (f"vLLM ≥0.20 refuses to start: max_num_seqs > {vp.num_blocks} mamba cache blocks",)
    return _plan_effect(base, after, flag, value, f"max-num-seqs {int(value):,}", notes)


def plan_language_model_only(model: ModelSpec, inputs: PlanInputs, value: str | None, flag: str = "--language-model-only") -> Effect | None:
    if not model.vision_params or inputs.language_model_only:
        return None
    base = make_plan(model, inputs)
    vb = model.vision_params * dtype_bytes(model.model_dtype) // max(1, inputs.tp)
    after = make_plan(model, replace(inputs, budget_bytes=inputs.budget_bytes + vb, language_model_only=True))
    note = f"≥{vb / GiB:.2f} GiB of vision-tower weights freed per GPU (lower bound; encoder cache not counted)"
    return _plan_effect(base, after, flag, None, "language-model-only", (note,))
