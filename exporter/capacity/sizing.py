"""Pool sizing of the capacity model for hybrid linear-attention models (full-attention KV + per-request conv/SSM state).

Everything here is arithmetic on a HuggingFace ``config.json`` dict or on numbers read from the SGLang / vLLM logs.
The only I/O is :func:`load_config`. Units: bytes unless a name says otherwise; ``GiB = 2**30`` (SGLang's "GB" is
also ``2**30``).

Formulas (sources: docs/formats/sglang.md#mamba-pool-sizing, docs/formats/vllm.md#mamba-state-sizing, the seed incidents' logs):

* KV bytes per token per GPU
  * GQA/MHA: ``2 * kv_heads_per_rank * head_dim * kv_dtype_bytes * n_full_layers`` with
    ``kv_heads_per_rank = max(1, kv_heads // tp)`` (KV heads are replicated when ``tp > kv_heads``).
  * MLA: ``(kv_lora_rank + qk_rope_head_dim) * kv_dtype_bytes * n_full_layers`` (the latent is replicated on every
    rank, so no TP division).
* Per-request linear state per GPU (per layer, summed over the linear layers), ``K = conv_kernel``:
  * GDN:    conv ``(2*k_heads*k_dim + v_heads*v_dim)/tp * (K-1)``; ssm ``v_heads/tp * v_dim * k_dim``
  * KDA:    conv ``(3*heads*head_dim)/tp * (K-1)``;                 ssm ``heads/tp * head_dim * head_dim``
  * Mamba2: conv ``(intermediate + 2*n_groups'*d_state)/tp * (K-1)``; ssm ``n_heads/tp * head_dim * d_state``
    with ``n_groups' = n_groups + (tp - n_groups if n_groups % tp else 0)``.
  conv is bf16 by default; ssm follows ``--mamba-ssm-dtype`` / config ``mamba_ssm_dtype`` / engine default.
* SGLang (≥0.5.17 auto path): ``budget = rest * R/(1+R)``; ``S = floor((budget - per_req)/per_req)`` (one padding
  slot); KV gets ``rest - (S+1)*per_req``; cap ``= S // slots_per_request``. Older versions:
  ``S = floor(budget / (per_req*(1+D)))`` and KV gets ``rest - S*per_req*(1+D)``.
* vLLM V1: shared block pool, page unification, ``num_blocks = budget // (P * group_size)``, mamba-bound
  concurrency ``num_blocks // (n_mamba_groups * blocks_per_group)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import families
from .model import ModelSpec, dtype_bytes, normalize_dtype
from .version import require_version

LATEST_SGLANG = (0, 5, 23, 0)

# --------------------------------------------------------------------------------------------------------------
# per-token KV and per-request state
# --------------------------------------------------------------------------------------------------------------


def kv_heads_per_rank(model: ModelSpec, tp: int = 1) -> int:
    """``max(1, kv_heads // tp)``: KV heads are split over TP and replicated once ``tp > kv_heads``."""
    return max(1, model.num_kv_heads // max(1, tp))


def kv_bytes_per_token_per_layer(model: ModelSpec, kv_dtype: str | None = None, tp: int = 1) -> int:
    """Per GPU, one full-attention layer. MLA is not divided by TP."""
    b = dtype_bytes(kv_dtype, model.model_dtype)
    if model.attention == "mla":
        return (model.kv_lora_rank + model.qk_rope_head_dim) * b
    return 2 * kv_heads_per_rank(model, tp) * model.head_dim * b


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str | None = None, tp: int = 1) -> int:
    """Per-token KV bytes **per GPU** over all full-attention layers.

    Qwen3.8-27B: 65,536 (bf16) / 32,768 (fp8). kimi-k3: 27,648 = 27 KiB (bf16) / 13,824 (fp8), any TP.
    The sum over the ``tp`` GPUs is ``tp *`` this value; the logical (TP1) cost is ``kv_bytes_per_token(model, d, 1)``.
    """
    return kv_bytes_per_token_per_layer(model, kv_dtype, tp) * model.full_layers


def ssm_dtype_rule(model: ModelSpec, engine: str = "sglang") -> tuple[str, ...] | None:
    """Where ``engine`` takes this model's SSM state dtype from: the family catalogue's rule
    (exporter/capacity/families.py), the engine's default for a config no family names. None: no SSM state."""
    fam = families.BY_KEY.get(model.family)
    return fam.dtype_rule(engine) if fam is not None else families.DEFAULT_SSM_DTYPE[engine]


def has_ssm_lever(model: ModelSpec, engine: str) -> bool:
    """Whether the engine's SSM dtype flag (``--mamba-ssm-dtype`` / ``--mamba-ssm-cache-dtype``) changes this model's
    state: it has an SSM part and its class reads the flag (the catalogue's rule)."""
    rule = ssm_dtype_rule(model, engine)
    return rule is not None and "flag" in rule


def resolve_ssm_dtype(model: ModelSpec, engine: str = "sglang", override: str | None = None) -> str | None:
    """SSM (temporal) state dtype, from where each engine reads it for this model family (the catalogue's rule,
    first step that applies):

    * ``flag``: ``override`` (``--mamba-ssm-dtype`` / ``--mamba-ssm-cache-dtype``), when not auto;
    * ``config:<key>``: the config's ``mamba_ssm_dtype`` (text config first) or ``mamba_ssm_cache_dtype``;
    * ``conv``: the conv dtype, i.e. the model's (vLLM ``MambaStateDtypeCalculator._mamba_state_dtype`` on auto);
    * ``model``: the model dtype whatever the flag (vLLM ``linear_attention_state_dtype``);
    * ``fp32``: float32.

    SGLang 0.5.23 (``configs/mamba_utils.py::mamba2_state_dtype``): flag, then the config for the families that pass
    it (Qwen3-Next, Qwen3.5, Nemotron-H, Falcon-H1, LFM2), float32; Kimi, Granite-4.0-H, Mamba, Bailing pass no
    config. vLLM 0.32-0.34 (``model_executor/models/config.py`` hooks and each class's
    ``get_mamba_state_dtype_from_config``): Qwen3.5 flag, text config ``mamba_ssm_dtype``, conv dtype; Nemotron-H
    flag, ``mamba_ssm_cache_dtype``, float32; KDA (Kimi) flag, float32; Bailing V3 float32 (its class passes no
    flag); Bailing linear the model dtype; the others flag, then the conv dtype. None for a state without an SSM
    part (LFM2's short convolution).
    """
    rule = ssm_dtype_rule(model, engine)
    if rule is None:
        return None
    for step in rule:
        if step == "flag":
            if override is not None and str(override).lower() != "auto":
                return normalize_dtype(override)
        elif step == "config:mamba_ssm_dtype":
            if model.config_ssm_dtype:
                return model.config_ssm_dtype
        elif step == "config:mamba_ssm_cache_dtype":
            if model.config_ssm_cache_dtype:
                return model.config_ssm_cache_dtype
        elif step in ("conv", "model"):
            return model.model_dtype
        elif step == "fp32":
            return "float32"
    raise ValueError(f"SSM dtype rule {rule!r} ends without a dtype")


@dataclass(frozen=True)
class LinearState:
    """Per-request linear-layer state, per GPU, summed over the linear layers."""

    layers: int
    tp: int
    conv_elements_per_layer: int
    ssm_elements_per_layer: int
    conv_dtype: str
    ssm_dtype: str | None  # None: the state has no SSM part (LFM2's short convolution)
    ring_bytes_per_layer: int = 0  # vLLM --use-replayssm: the x / dt / B rings appended to a Mamba2 layer's state

    @property
    def conv_bytes_per_layer(self) -> int:
        return self.conv_elements_per_layer * dtype_bytes(self.conv_dtype)

    @property
    def ssm_bytes_per_layer(self) -> int:
        return self.ssm_elements_per_layer * dtype_bytes(self.ssm_dtype) if self.ssm_dtype else 0

    @property
    def page_bytes(self) -> int:
        """One layer's conv+ssm (+ the ReplaySSM rings): vLLM's un-padded mamba page."""
        return self.conv_bytes_per_layer + self.ssm_bytes_per_layer + self.ring_bytes_per_layer

    @property
    def ring_bytes(self) -> int:
        return self.layers * self.ring_bytes_per_layer

    @property
    def conv_bytes(self) -> int:
        return self.layers * self.conv_bytes_per_layer

    @property
    def ssm_bytes(self) -> int:
        return self.layers * self.ssm_bytes_per_layer

    @property
    def per_request(self) -> int:
        """SGLang's ``mamba_cache_per_req`` (per GPU); vLLM's state per request (with the ReplaySSM rings)."""
        return self.conv_bytes + self.ssm_bytes + self.ring_bytes

    @property
    def all_gpus(self) -> int:
        return self.per_request * self.tp


def linear_state(
    model: ModelSpec,
    tp: int = 1,
    ssm_dtype: str | None = None,
    conv_dtype: str | None = None,
    engine: str = "sglang",
    conv_extra_tokens: int = 0,
    replayssm_len: int = 0,
) -> LinearState:
    """Per-request conv + SSM state per GPU (formulas in the module docstring).

    ``conv_extra_tokens``: vLLM widens the conv window by ``num_speculative_tokens`` (the families whose class
    passes ``num_spec``: not Jamba, Mamba1 or LFM2, whose state this ignores it for). SGLang keeps the spec
    intermediate states in a separate buffer, so leave it 0 there. The model is read as ``engine`` reads it
    (:meth:`ModelSpec.for_engine`). ``replayssm_len``: vLLM's ``--use-replayssm`` ring length (``--replayssm-buffer-len``
    with the default Triton backend), whose rings ``MambaStateShapeCalculator.append_replayssm_ring`` appends to a
    Mamba2 layer's state: x ``heads/tp × L × head_dim`` and B ``groups'/tp × L × d_state`` in the model dtype, dt
    ``heads/tp × L`` in float32 (``MambaStateDtypeCalculator.append_replayssm_ring``).
    """
    model = model.for_engine(engine)
    tp = max(1, tp)
    fam = families.BY_KEY.get(model.family)
    if fam is not None and not fam.spec_widens_conv:
        conv_extra_tokens = 0
    k1 = max(0, model.conv_kernel - 1) + conv_extra_tokens
    kind = model.linear_kind
    if not model.is_hybrid:
        conv = ssm = 0
    elif kind == "gdn":
        # SGLang builds GDN state with Mamba2StateShape.create(n_groups=k_heads), which pads the groups to a
        # multiple of TP; vLLM's gated_delta_net_state_shape does not (identical when TP divides k_heads)
        kh = model.lin_k_heads
        if engine == "sglang" and kh % tp:
            kh += tp - kh
        conv = (2 * kh * model.lin_k_dim + model.lin_v_heads * model.lin_v_dim) // tp * k1
        ssm = model.lin_v_heads // tp * model.lin_v_dim * model.lin_k_dim
    elif kind == "kda":
        conv = (model.lin_v_heads * model.lin_v_dim + 2 * model.lin_k_heads * model.lin_k_dim) // tp * k1
        ssm = model.lin_v_heads // tp * model.lin_v_dim * model.lin_v_dim
    elif kind == "mamba2":
        g = model.mamba_n_groups
        g_eff = g + (tp - g if g % tp else 0)
        conv = (model.mamba_intermediate + 2 * g_eff * model.mamba_d_state) // tp * k1
        ssm = model.lin_v_heads // tp * model.lin_v_dim * model.mamba_d_state
    elif kind == "mamba1":
        # vLLM mamba1_state_shape: conv (K-1, I/tp), SSM (I/tp, d_state); SGLang create_full_rank: the same numbers
        conv = model.mamba_intermediate // tp * k1
        ssm = model.mamba_intermediate // tp * model.mamba_d_state
    elif kind == "short_conv":
        # vLLM short_conv_state_shape: conv (K-1, dim/tp), no SSM; SGLang Mamba2StateShape of state size 0
        conv = model.mamba_intermediate // tp * k1
        ssm = 0
    elif kind == "lightning":
        # vLLM linear_attention_state_shape: (heads // tp, head_dim, head_dim), no conv; SGLang the same (no conv)
        conv = 0
        ssm = model.lin_v_heads // tp * model.lin_v_dim * model.lin_v_dim
    else:  # pragma: no cover - model_from_config never produces another kind
        raise ValueError(f"unknown linear kind {kind!r}")
    ring = 0
    if replayssm_len and kind == "mamba2" and model.is_hybrid:
        g = model.mamba_n_groups
        g_eff = g + (tp - g if g % tp else 0)
        act = dtype_bytes(model.model_dtype)
        heads = model.lin_v_heads // tp
        ring = (
            heads * replayssm_len * model.lin_v_dim * act
            + heads * replayssm_len * 4
            + g_eff // tp * replayssm_len * model.mamba_d_state * act
        )
    return LinearState(
        ring_bytes_per_layer=ring,
        layers=model.linear_layers if model.is_hybrid else 0,
        tp=tp,
        conv_elements_per_layer=conv,
        ssm_elements_per_layer=ssm,
        conv_dtype=normalize_dtype(conv_dtype, model.model_dtype) if conv_dtype else "bfloat16",
        ssm_dtype=resolve_ssm_dtype(model, engine, ssm_dtype),
    )


def per_sequence_bytes(model: ModelSpec, context_len: int, kv_dtype: str | None = None, tp: int = 1, ssm_dtype: str | None = None) -> int:
    """KV for ``context_len`` tokens + one copy of the linear state, per GPU (the seed's "合计" column at TP1)."""
    return context_len * kv_bytes_per_token(model, kv_dtype, tp) + linear_state(model, tp, ssm_dtype).per_request


def tokens_for_bytes(model: ModelSpec, nbytes: float, kv_dtype: str | None = None, tp: int = 1) -> int:
    """How many tokens of KV fit in ``nbytes`` (per GPU). 4.5 GiB fp8 on Qwen3.8-27B -> 147,456."""
    return int(nbytes // kv_bytes_per_token(model, kv_dtype, tp))


# --------------------------------------------------------------------------------------------------------------
# SGLang: slots per request, pool sizing, request cap
# --------------------------------------------------------------------------------------------------------------

SGLANG_STRATEGIES = ("disable", "no_buffer", "extra_buffer", "extra_buffer_lazy", "auto")


def norm_strategy(strategy: str | None, overlap: bool = True) -> str:
    s = (strategy or "auto").strip().lower().replace("-", "_")
    if s in ("disable", "disabled", "disable_radix", "disable_radix_cache", "off", "none", "radix_off"):
        return "disable"
    if s == "auto":
        return "extra_buffer" if overlap else "no_buffer"
    if s not in SGLANG_STRATEGIES:
        raise ValueError(f"unknown mamba radix cache strategy {strategy!r}")
    return s


def sglang_slots_per_request(
    strategy: str | None = "auto",
    version: str | tuple[int, ...] | None = None,
    *,
    overlap: bool = True,
    spec: bool = False,
    skip_decode_lock: bool = False,
) -> int:
    """Mamba slots reserved per running request (docs/formats/sglang.md#slots-per-running-request).

    ``strategy``: ``disable`` (``--disable-radix-cache``), ``no_buffer``, ``extra_buffer``, ``extra_buffer_lazy``,
    ``auto`` (extra_buffer when overlap is on, else no_buffer). ``skip_decode_lock`` is
    ``SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1`` (≥0.5.17 only; ignored before). Raises ``ValueError`` for a strategy
    that does not exist in that version.
    """
    v = require_version(version, LATEST_SGLANG)
    s = norm_strategy(strategy, overlap)
    if s == "disable" or v < (0, 5, 3, 3):  # 0.5.2-0.5.3: radix forced off for hybrid GDN
        return 1
    skip = 1 if (skip_decode_lock and v >= (0, 5, 17, 0)) else 0
    if s == "no_buffer":
        if v < (0, 5, 7, 0):
            return 3
        if v < (0, 5, 8, 0):
            return 5  # the 0.5.7 quirk: +2 unless extra_buffer *and* spec
        return 3  # ≥0.5.17 with skip: base 2 + MAMBA_CACHE_V2_ADDITIONAL_RATIO_NO_BUFFER 1 = 3
    if s == "extra_buffer":
        if v < (0, 5, 7, 0):
            raise ValueError(f"extra_buffer does not exist in SGLang {'.'.join(map(str, v[:3]))} (≥0.5.7)")
        if v < (0, 5, 10, 0):
            return 4 if spec else 5
        return (5 if overlap else 4) - skip
    # extra_buffer_lazy
    if v < (0, 5, 13, 0):
        raise ValueError("extra_buffer_lazy needs SGLang ≥0.5.13")
    return 4 - skip


def sglang_mamba_cap(mamba_slots: int, slots_per_request: int) -> int:
    """``max_mamba_cache_size // slots_per_request``: 80//5=16, 186//3=62, 47//5=9."""
    return mamba_slots // max(1, slots_per_request)


@dataclass(frozen=True)
class SGLangPool:
    """Result of sizing the SGLang pools for one TP rank."""

    rest_bytes: int
    ratio: float
    per_req: int
    slots_per_request: int
    mamba_slots: int
    mamba_bytes: int  # (S + padding) * per_req (+ spec intermediate)
    kv_bytes: int
    kv_bytes_per_token: int
    kv_tokens: int
    mamba_cap: int  # S // slots_per_request
    kv_cap: int  # token_capacity // 2
    max_running_requests: int  # effective, after every cap
    bound_by: str  # what limits max_running_requests: mamba | kv | requested | estimate
    context_len: int | None = None
    requests_at_context: int | None = None  # kv_tokens // context_len
    binding_pool: str = "mamba"  # which pool runs out first at context_len: mamba | kv
    spec_intermediate_bytes: int = 0
    fits: bool = True

    @property
    def mamba_usage_at_cap(self) -> float:
        return self.max_running_requests * self.slots_per_request / self.mamba_slots if self.mamba_slots else 0.0


def sglang_pool(
    rest_bytes: float,
    per_req: int,
    kv_bytes_per_tok: int,
    *,
    ratio: float = 0.9,
    slots_per_request: int = 5,
    max_mamba_cache_size: int | None = None,
    max_running_requests: int | None = None,
    radix: bool = True,
    spec_draft_tokens: int = 0,
    context_len: int | None = None,
    version: str | tuple[int, ...] | None = None,
    page_size: int = 1,
) -> SGLangPool:
    """Split ``rest_bytes`` (per-rank memory left for KV + mamba) between the two pools like SGLang does.

    ≥0.5.17 (default): explicit ``max_mamba_cache_size`` → S = it; radix off + ``max_running_requests`` → S = mrr;
    else ``budget = rest·R/(1+R)``, ``S = floor((budget − per_req)/per_req)`` (no spec) or
    ``floor((budget − per_req(1+D))/(per_req(1+D/spr)))`` (spec). KV = ``rest − (S+1)·per_req − intermediate``.
    Older versions use ``S = floor(budget/(per_req(1+D)))`` and no padding slot in the budget.
    KV tokens are floored to whole pages (``page_size``: 1 on Hopper, 64 with the Blackwell TRT-LLM backends).
    Cap (``kv_cache_configurator.py::resolve_max_num_reqs``): ``min(requested or estimate, kv_tokens // 2,
    S // spr)`` with the estimate ``clamp(int(kv_tokens / context_len * 512), 2048, 4096)``; ``context_len`` is
    ``--context-length`` or the model's (``make_plan`` passes ``ModelSpec.context_length``), so without
    ``--max-running-requests`` SGLang never runs more than 4,096 requests.
    """
    v = require_version(version, LATEST_SGLANG)
    rest = int(rest_bytes)
    D = max(0, spec_draft_tokens)
    spr = max(1, slots_per_request)
    new = v >= (0, 5, 17, 0)
    pad = 1 if new else 0
    inter = 0
    if per_req <= 0:  # not a hybrid model: everything is KV
        S = 0
        mamba_bytes = 0
    else:
        if max_mamba_cache_size is not None:
            S = int(max_mamba_cache_size)
        elif not radix and max_running_requests:
            S = max(1, int(max_running_requests))
        else:
            budget = rest * ratio / (1 + ratio)
            if new:
                if D:
                    S = math.floor((budget - per_req * (1 + D)) / (per_req * (1 + D / spr)))
                else:
                    S = math.floor((budget - per_req) / per_req)
            else:
                S = math.floor(budget / (per_req * (1 + D)))
        S = max(0, S)
        if D:
            mrr_for_inter = min(max_running_requests or S // spr, S // spr) if radix else S
            inter = per_req * (mrr_for_inter + pad) * D if new else per_req * S * D
        mamba_bytes = (S + pad) * per_req + inter
    kv_bytes = rest - mamba_bytes
    fits = kv_bytes > 0 and (per_req <= 0 or S > 0)
    kv_tokens = max(0, kv_bytes) // kv_bytes_per_tok if kv_bytes_per_tok else 0
    page = max(1, int(page_size))
    kv_tokens = kv_tokens // page * page
    mamba_cap = S // spr if per_req > 0 else 10**9
    kv_cap = kv_tokens // 2
    if max_running_requests:
        first, first_name = int(max_running_requests), "requested"
    elif context_len:
        first, first_name = min(4096, max(2048, int(kv_tokens / context_len * 512))), "estimate"
    else:
        first, first_name = 10**9, "none"
    limits = [(first, first_name), (kv_cap, "kv"), (mamba_cap, "mamba")]
    mrr, bound = min(limits, key=lambda x: x[0])
    # ties: report mamba if it is one of the minima (that is the one SGLang warns about)
    if mamba_cap == mrr and per_req > 0:
        bound = "mamba"
    req_ctx = kv_tokens // context_len if context_len else None
    if req_ctx is not None:
        binding = "mamba" if per_req > 0 and mamba_cap < req_ctx else "kv"
    else:
        binding = "mamba" if bound == "mamba" else "kv"
    return SGLangPool(
        rest_bytes=rest,
        ratio=ratio,
        per_req=per_req,
        slots_per_request=spr,
        mamba_slots=S,
        mamba_bytes=mamba_bytes,
        kv_bytes=max(0, kv_bytes),
        kv_bytes_per_token=kv_bytes_per_tok,
        kv_tokens=kv_tokens,
        mamba_cap=mamba_cap if per_req > 0 else 0,
        kv_cap=kv_cap,
        max_running_requests=max(0, mrr),
        bound_by=bound,
        context_len=context_len,
        requests_at_context=req_ctx,
        binding_pool=binding,
        spec_intermediate_bytes=inter,
        fits=fits,
    )


def sglang_page_size(model: ModelSpec, platform: str, strategy: str, spec: bool, version: str | tuple[int, ...] | None = None) -> int:
    """The ``page_size`` SGLang (0.5.15-0.5.23) picks for a hybrid model when none is given, as its released code
    does: 1 on Hopper; on Blackwell (SM100) it follows the attention backend the model's override picks
    (``arg_groups/model_overrides/qwen3_5.py``, ``nemotron_h.py``, ``kimi_k3.py``; before 0.5.19
    ``arg_groups/overrides.py``) and ``_mla_backend_page_constraints`` (TRT-LLM MHA / MLA: 64):

    * Qwen3-Next / Qwen3.5+ (GDN): Triton and page 1 when the mamba radix cache is on without an extra buffer
      (``no_buffer``) and there is no speculative decoding, else TRT-LLM MHA and page 64;
    * Nemotron-H: TRT-LLM MHA (page 64) from 0.5.19; before, FlashInfer (page 1) unless speculative decoding;
    * kimi-k3 (MLA): TRT-LLM MLA, page 64; other MLA models FlashInfer MLA, page 1;
    * any other: TRT-LLM MHA, page 64.
    """
    if platform != "blackwell":
        return 1
    arch = f"{model.architecture} {model.model_type}".lower()
    v = require_version(version, LATEST_SGLANG)
    if "qwen3next" in arch or "qwen3_5" in arch or "qwen3_next" in arch or "qwen4" in arch:
        return 1 if strategy == "no_buffer" and not spec else 64
    if "nemotronh" in arch or "nemotron_h" in arch:
        return 64 if v >= (0, 5, 19, 0) or spec else 1
    if model.attention == "mla":
        return 64 if "kimi_k3" in arch or "kimik3" in arch else 1
    return 64


def balanced_ratio_for_context(per_req: int, slots_per_request: int, kv_bytes_per_tok: int, context_len: int) -> float:
    """``--mamba-full-memory-ratio`` at which the mamba cap equals the number of ``context_len``-token requests the
    KV pool holds: ``R = spr·per_req / (context_len·kv_bytes_per_token)`` (mamba bytes per request over KV bytes
    per request; padding slot ignored). Short requests → large R, long requests → small R.
    """
    return slots_per_request * per_req / (context_len * kv_bytes_per_tok)
