"""Pure capacity model for hybrid linear-attention models (full-attention KV + per-request conv/SSM state).

Everything here is arithmetic on a HuggingFace ``config.json`` dict or on numbers read from the SGLang / vLLM logs.
The only I/O is :func:`load_config`. Units: bytes unless a name says otherwise; ``GiB = 2**30`` (SGLang's "GB" is
also ``2**30``).

Formulas (sources: ``/work/shared/reference/sglang-log-formats.md`` §7, ``vllm-log-formats.md`` §4, the seeds):

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

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .version import parse_version as parse_version  # the one parser, re-exported
from .version import require_version

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

LATEST_SGLANG = (0, 5, 23, 0)

# --------------------------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------------------------

_DTYPE_ALIASES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "torch.bfloat16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "torch.float16": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "torch.float32": "float32",
}
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1}


class ConfigError(ValueError):
    """The config file is missing, unreadable, not JSON, or not a hybrid/attention LM config we understand."""


def normalize_dtype(name: str | None, auto: str = "bfloat16") -> str:
    """Canonical dtype name: ``bfloat16``, ``float16``, ``float32`` or ``fp8`` (any fp8/float8 variant).

    ``None``/``"auto"`` resolve to ``auto``. Raises ``ValueError`` on unknown names.
    """
    if name is None:
        return normalize_dtype(auto, "bfloat16")
    key = str(name).strip().lower()
    if key in ("auto", ""):
        return normalize_dtype(auto, "bfloat16")
    if key in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[key]
    if "fp8" in key or "float8" in key:
        return "fp8"
    raise ValueError(f"unknown dtype {name!r}")


def dtype_bytes(name: str | None, auto: str = "bfloat16") -> int:
    """Bytes per element: bf16/fp16 2, fp32 4, fp8 1."""
    return _DTYPE_BYTES[normalize_dtype(name, auto)]


def _short(dtype: str) -> str:
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "fp8": "fp8"}[normalize_dtype(dtype)]


# --------------------------------------------------------------------------------------------------------------
# model spec from config.json
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """What the capacity model needs from a HF config (text part)."""

    name: str
    num_layers: int
    full_layers: int
    linear_layers: int
    linear_kind: str | None  # "gdn" | "kda" | "mamba2" | None (plain transformer)
    attention: str  # "gqa" | "mla"
    num_kv_heads: int = 0
    head_dim: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    # linear layers (gdn/kda: k/v heads and dims; mamba2: v_heads = mamba heads, v_dim = mamba head dim)
    lin_k_heads: int = 0
    lin_v_heads: int = 0
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    conv_kernel: int = 4
    mamba_n_groups: int = 0
    mamba_d_state: int = 0
    mamba_intermediate: int = 0
    model_dtype: str = "bfloat16"
    config_ssm_dtype: str | None = None  # ``mamba_ssm_dtype`` (text_config first), as SGLang / Qwen3.5 hooks read it
    config_ssm_cache_dtype: str | None = None  # ``mamba_ssm_cache_dtype`` (vLLM's NemotronH hook reads only this)
    vision_params: int | None = None  # rough parameter count of the vision tower, if any
    architecture: str = ""  # ``architectures[0]`` of the top-level config
    model_type: str = ""  # ``model_type`` of the text config (``kimi_linear``, ``qwen3_next``, ``nemotron_h`` …)
    kda_bounded_gate: bool = False  # ``linear_attn_config.gate_lower_bound`` set (vLLM's FlashKDA needs it)
    context_length: int = 2048  # SGLang's ``get_context_length`` of the text config (``--context-length`` unset)

    @property
    def family(self) -> str:
        """Which engine config class reads this model: ``kimi`` | ``qwen3_5`` | ``qwen3_next`` | ``nemotron_h`` | ``other``.

        The engines take the SSM dtype from a different place per family (see :func:`resolve_ssm_dtype`)."""
        a, t = self.architecture.lower(), self.model_type.lower()
        if "kimi" in a or t.startswith("kimi") or self.linear_kind == "kda":
            return "kimi"
        if "qwen3_5" in a or t.startswith("qwen3_5"):
            return "qwen3_5"
        if "qwen3next" in a or t == "qwen3_next":
            return "qwen3_next"
        if "nemotronh" in a or t.startswith("nemotron_h") or self.linear_kind == "mamba2":
            return "nemotron_h"
        return "other"

    @property
    def is_hybrid(self) -> bool:
        return self.linear_layers > 0 and self.linear_kind is not None

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """576 for kimi MLA (512 + 64); ``2*kv_heads*head_dim`` for GQA at TP1."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a config.json into a dict. Raises :class:`ConfigError` with a one-line message."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file is not UTF-8 text: {p}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"config file is not valid JSON: {p} (line {e.lineno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file must contain a JSON object: {p}")
    return data


def _int(d: dict[str, Any], *keys: str, default: int | None = None) -> int | None:
    for k in keys:
        v = d.get(k)
        if v is not None and not isinstance(v, bool):
            try:
                return int(v)
            except (TypeError, ValueError):
                raise ConfigError(f"config field {k!r} is not a number: {v!r}") from None
    return default


_LT_EXPR = re.compile(r"(\d+)\s*[×x*]\s*([A-Za-z_]+)")


def _is_linear_type(t: str) -> bool:
    t = t.lower()
    return any(s in t for s in ("linear", "mamba", "kda", "gdn", "deltanet", "ssm", "conv"))


def _layer_types(cfg: dict[str, Any], n_layers: int | None) -> list[str] | None:
    lt = cfg.get("layer_types")
    if isinstance(lt, list) and lt:
        return [str(x) for x in lt]
    if isinstance(lt, str):  # compressed "48 × linear_attention + 16 × full_attention"
        out: list[str] = []
        for n, t in _LT_EXPR.findall(lt):
            out.extend([t] * int(n))
        if out:
            return out
    return None


def _config_dtype(text: dict[str, Any], top: dict[str, Any], key: str) -> str | None:
    """``key`` from the text config, else the top level (SGLang's ``mamba2_state_dtype`` order); normalised."""
    v = text.get(key) if key in text else top.get(key)
    if v in (None, "", "auto"):
        return None
    try:
        return normalize_dtype(v)
    except ValueError:
        raise ConfigError(f"config field {key!r} is not a dtype: {v!r}") from None


# SGLang ``utils/hf_transformers/common.py::CONTEXT_LENGTH_KEYS`` (0.5.23), first match wins
_CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")


def context_length_of(text_config: dict[str, Any]) -> int:
    """The context length SGLang derives without ``--context-length``: the first of its context keys in the text
    config, times the rope-scaling factor (1 for llama3 / ``original_max_position_embeddings``); 2048 if none."""
    rs = text_config.get("rope_scaling")
    factor = 1.0
    if isinstance(rs, dict) and rs:
        factor = float(rs.get("factor", 1) or 1)
        if "original_max_position_embeddings" in rs or rs.get("rope_type") == "llama3":
            factor = 1.0
    for k in _CONTEXT_LENGTH_KEYS:
        v = text_config.get(k)
        if v is not None and not isinstance(v, bool):
            try:
                return int(factor * int(v))
            except (TypeError, ValueError):
                raise ConfigError(f"config field {k!r} is not a number: {v!r}") from None
    return 2048


def model_from_config(config: dict[str, Any], name: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a HF config dict (top level, or nested ``text_config``).

    Layer layout, in order of preference: kimi ``linear_attn_config`` (``full_attn_layers``/``kda_layers``),
    Nemotron-H ``hybrid_override_pattern`` (``M`` mamba, ``*`` attention), ``layer_types`` list,
    ``full_attention_interval`` (layer i is full iff ``(i+1) % interval == 0``); else all layers are full attention.
    """
    if not isinstance(config, dict):
        raise ConfigError("config must be a JSON object")
    top = config
    tc = config.get("text_config")
    cfg: dict[str, Any] = {**top, **tc} if isinstance(tc, dict) else dict(top)
    name = name or str(cfg.get("_name_or_path") or (top.get("architectures") or [top.get("model_type") or "model"])[0])

    n_layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    model_dtype = normalize_dtype(cfg.get("torch_dtype") or cfg.get("dtype") or top.get("torch_dtype") or "bfloat16")
    text = tc if isinstance(tc, dict) else top
    ssm_cfg = _config_dtype(text, top, "mamba_ssm_dtype")
    ssm_cache_cfg = _config_dtype(text, top, "mamba_ssm_cache_dtype")

    kv: dict[str, Any] = {}
    kv_lora = _int(cfg, "kv_lora_rank")
    if kv_lora:
        kv["attention"] = "mla"
        kv["kv_lora_rank"] = kv_lora
        kv["qk_rope_head_dim"] = _int(cfg, "qk_rope_head_dim", default=64)
    else:
        n_heads = _int(cfg, "num_attention_heads", default=0) or 0
        hidden = _int(cfg, "hidden_size", default=0) or 0
        head_dim = _int(cfg, "head_dim", "attention_head_dim", default=None)
        if head_dim is None:
            head_dim = hidden // n_heads if n_heads else 0
        kv["attention"] = "gqa"
        kv["num_kv_heads"] = _int(cfg, "num_key_value_heads", default=n_heads) or n_heads
        kv["head_dim"] = head_dim

    lin: dict[str, Any] = {}
    lac = cfg.get("linear_attn_config")
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(lac, dict):  # kimi (KDA)
        full_l = lac.get("full_attn_layers")
        kda_l = lac.get("kda_layers")
        if full_l is None and kda_l is None:
            raise ConfigError("linear_attn_config has neither full_attn_layers nor kda_layers")
        n_full = len(full_l) if full_l is not None else (n_layers or 0) - len(kda_l)
        n_lin = len(kda_l) if kda_l is not None else (n_layers or 0) - len(full_l)
        heads = _int(lac, "num_heads", default=0) or 0
        hd = _int(lac, "head_dim", default=128) or 128
        lin = dict(
            linear_kind="kda",
            lin_k_heads=_int(lac, "num_k_heads", default=heads),
            lin_v_heads=heads,
            lin_k_dim=_int(lac, "head_k_dim", default=hd),
            lin_v_dim=hd,
            conv_kernel=_int(lac, "short_conv_kernel_size", "conv_kernel", default=4),
            kda_bounded_gate=lac.get("gate_lower_bound") is not None,
        )
        n_layers = n_layers or n_full + n_lin
    elif isinstance(pattern, str) and pattern:  # Nemotron-H (mamba2)
        n_lin = pattern.count("M")
        n_full = pattern.count("*")
        n_layers = n_layers or len(pattern)
        mheads = _int(cfg, "mamba_num_heads", default=0) or 0
        mhd = _int(cfg, "mamba_head_dim", default=0) or 0
        hidden = _int(cfg, "hidden_size", default=0) or 0
        inter = mheads * mhd or (_int(cfg, "expand", default=2) or 2) * hidden
        lin = dict(
            linear_kind="mamba2",
            lin_v_heads=mheads,
            lin_v_dim=mhd,
            conv_kernel=_int(cfg, "conv_kernel", "mamba_d_conv", default=4),
            mamba_n_groups=_int(cfg, "n_groups", "mamba_n_groups", default=1),
            mamba_d_state=_int(cfg, "ssm_state_size", "mamba_d_state", "state_size", default=128),
            mamba_intermediate=inter,
        )
    else:
        types = _layer_types(cfg, n_layers)
        interval = _int(cfg, "full_attention_interval")
        if types is not None:
            n_lin = sum(1 for t in types if _is_linear_type(t))
            n_full = len(types) - n_lin
            n_layers = n_layers or len(types)
        elif interval and n_layers:
            n_full = sum(1 for i in range(n_layers) if (i + 1) % interval == 0)
            n_lin = n_layers - n_full
        else:
            if not n_layers:
                raise ConfigError("config has no num_hidden_layers / layer layout")
            n_full, n_lin = n_layers, 0
        if n_lin:
            if cfg.get("linear_num_value_heads") is None:
                raise ConfigError("config has linear layers but no linear_num_value_heads (unknown linear-attention kind)")
            lin = dict(
                linear_kind="gdn",
                lin_k_heads=_int(cfg, "linear_num_key_heads", default=0),
                lin_v_heads=_int(cfg, "linear_num_value_heads", default=0),
                lin_k_dim=_int(cfg, "linear_key_head_dim", default=128),
                lin_v_dim=_int(cfg, "linear_value_head_dim", default=128),
                conv_kernel=_int(cfg, "linear_conv_kernel_dim", default=4),
            )
    if not n_layers:
        raise ConfigError("config has no num_hidden_layers")
    if kv["attention"] == "gqa" and n_full and not (kv["num_kv_heads"] and kv["head_dim"]):
        raise ConfigError("config lacks num_key_value_heads/head_dim for the full-attention layers")

    vision_params = None
    vc = top.get("vision_config")
    if isinstance(vc, dict):
        depth = _int(vc, "depth", "num_hidden_layers", "vt_num_hidden_layers", default=0) or 0
        h = _int(vc, "hidden_size", "embed_dim", "vt_hidden_size", default=0) or 0
        inter = _int(vc, "intermediate_size", "vt_intermediate_size", default=4 * h) or 4 * h
        # attention (qkv + proj = 4h^2) + MLP (2*h*inter) per block; embeddings/merger ignored -> lower bound
        vision_params = depth * (4 * h * h + 2 * h * inter) or None

    return ModelSpec(
        name=name,
        num_layers=n_layers,
        full_layers=n_full,
        linear_layers=n_lin if lin else 0,
        model_dtype=model_dtype,
        config_ssm_dtype=ssm_cfg,
        config_ssm_cache_dtype=ssm_cache_cfg,
        vision_params=vision_params,
        architecture=str((top.get("architectures") or [""])[0]),
        model_type=str(text.get("model_type") or top.get("model_type") or ""),
        context_length=context_length_of(text),
        linear_kind=lin.pop("linear_kind", None),
        **kv,
        **lin,
    )


def load_model(path: str | Path) -> ModelSpec:
    """:func:`load_config` + :func:`model_from_config` (name = file stem)."""
    cfg = load_config(path)
    try:
        return model_from_config(cfg, name=Path(path).stem)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


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


def resolve_ssm_dtype(model: ModelSpec, engine: str = "sglang", override: str | None = None) -> str:
    """SSM (temporal) state dtype, from where each engine reads it for this model family.

    ``override`` (``--mamba-ssm-dtype`` / ``--mamba-ssm-cache-dtype``) always wins. Otherwise:

    * SGLang 0.5.23 (``configs/mamba_utils.py::mamba2_state_dtype``): the config's ``mamba_ssm_dtype``
      (``text_config`` first) for the families that pass their config (Qwen3-Next, Qwen3.5, Nemotron-H), else
      float32. ``configs/kimi_linear.py::KimiLinearConfig.mamba2_cache_params`` passes no config, so a Kimi
      ``mamba_ssm_dtype`` is ignored: float32 unless ``--mamba-ssm-dtype``.
    * vLLM 0.33.0 (``model_executor/models/config.py`` hooks, ``layers/mamba/mamba_utils.py``): Qwen3.5 takes the
      text config's ``mamba_ssm_dtype``; Nemotron-H takes ``mamba_ssm_cache_dtype`` else float32; KDA (Kimi) is
      float32 on ``auto``; anything else (Qwen3-Next GDN) follows the conv dtype, i.e. the model dtype.
    """
    if override is not None and str(override).lower() != "auto":
        return normalize_dtype(override)
    fam = model.family
    if engine == "vllm":
        if fam == "qwen3_5" and model.config_ssm_dtype:
            return model.config_ssm_dtype
        if fam == "nemotron_h":
            return model.config_ssm_cache_dtype or "float32"
        if fam == "kimi":
            return "float32"
        return model.model_dtype
    if fam == "kimi":
        return "float32"
    return model.config_ssm_dtype or "float32"


@dataclass(frozen=True)
class LinearState:
    """Per-request linear-layer state, per GPU, summed over the linear layers."""

    layers: int
    tp: int
    conv_elements_per_layer: int
    ssm_elements_per_layer: int
    conv_dtype: str
    ssm_dtype: str

    @property
    def conv_bytes_per_layer(self) -> int:
        return self.conv_elements_per_layer * dtype_bytes(self.conv_dtype)

    @property
    def ssm_bytes_per_layer(self) -> int:
        return self.ssm_elements_per_layer * dtype_bytes(self.ssm_dtype)

    @property
    def page_bytes(self) -> int:
        """One layer's conv+ssm (vLLM's un-padded mamba page)."""
        return self.conv_bytes_per_layer + self.ssm_bytes_per_layer

    @property
    def conv_bytes(self) -> int:
        return self.layers * self.conv_bytes_per_layer

    @property
    def ssm_bytes(self) -> int:
        return self.layers * self.ssm_bytes_per_layer

    @property
    def per_request(self) -> int:
        """SGLang's ``mamba_cache_per_req`` (per GPU)."""
        return self.conv_bytes + self.ssm_bytes

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
) -> LinearState:
    """Per-request conv + SSM state per GPU (formulas in the module docstring).

    ``conv_extra_tokens``: vLLM widens the conv window by ``num_speculative_tokens``. SGLang keeps the spec
    intermediate states in a separate buffer, so leave it 0 there.
    """
    tp = max(1, tp)
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
    else:  # pragma: no cover - model_from_config never produces another kind
        raise ValueError(f"unknown linear kind {kind!r}")
    return LinearState(
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


def _norm_strategy(strategy: str | None, overlap: bool = True) -> str:
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
    """Mamba slots reserved per running request (sglang ref §7.2 table).

    ``strategy``: ``disable`` (``--disable-radix-cache``), ``no_buffer``, ``extra_buffer``, ``extra_buffer_lazy``,
    ``auto`` (extra_buffer when overlap is on, else no_buffer). ``skip_decode_lock`` is
    ``SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1`` (≥0.5.17 only; ignored before). Raises ``ValueError`` for a strategy
    that does not exist in that version.
    """
    v = require_version(version, LATEST_SGLANG)
    s = _norm_strategy(strategy, overlap)
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


def balanced_ratio_for_context(per_req: int, slots_per_request: int, kv_bytes_per_tok: int, context_len: int) -> float:
    """``--mamba-full-memory-ratio`` at which the mamba cap equals the number of ``context_len``-token requests the
    KV pool holds: ``R = spr·per_req / (context_len·kv_bytes_per_token)`` (mamba bytes per request over KV bytes
    per request; padding slot ignored). Short requests → large R, long requests → small R.
    """
    return slots_per_request * per_req / (context_len * kv_bytes_per_tok)


# --------------------------------------------------------------------------------------------------------------
# vLLM V1: shared block pool
# --------------------------------------------------------------------------------------------------------------


VLLM_LATEST = (0, 33, 0, 0)
PLATFORMS = ("hopper", "blackwell")


@dataclass(frozen=True)
class VLLMRelease:
    """What a vLLM release does with a hybrid model's cache, by release (the version table).

    Verified against the 0.33.0 wheel (files cited per field); the older gates come from the release notes of
    docs/sizing.md ("vLLM by release") and are kept as they were when not re-verified."""

    version: tuple[int, int, int, int]

    @property
    def prefix_caching_default(self) -> bool:
        """``config/model.py::ModelConfig.is_prefix_caching_supported`` returns True for generative hybrids from
        0.26.0 and ``engine/arg_utils.py::_set_default_chunked_prefill_and_prefix_caching_args`` takes it."""
        return self.version >= (0, 26, 0, 0)

    @property
    def has_modes(self) -> bool:
        """``mamba_cache_mode`` none/align exists from 0.15.0."""
        return self.version >= (0, 15, 0, 0)

    @property
    def spec_blocks_in_none_mode(self) -> bool:
        return self.version >= (0, 15, 0, 0)

    @property
    def checkpoint_blocks(self) -> bool:
        """``kv_cache_interface.py::MambaSpec.max_memory_usage_bytes`` adds ``num_prefill_checkpoint_blocks`` in
        align mode (0.33.0)."""
        return self.version >= (0, 33, 0, 0)

    @property
    def backend_alignment(self) -> bool:
        """``platforms/interface.py::_align_hybrid_block_size`` takes the backend's kernel block (MLA ≥128) and, in
        align mode, the prefill-checkpoint alignment from 0.20; before, A was 16 (64 for MLA)."""
        return self.version >= (0, 20, 0, 0)


def vllm_release(version: str | tuple[int, ...] | None) -> VLLMRelease:
    return VLLMRelease(require_version(version, VLLM_LATEST))


def vllm_default_mode(version: str | tuple[int, ...] | None = None, prefix_caching: bool | None = None) -> str:
    """``model_executor/models/config.py::MambaModelConfig.verify_and_update_config``: prefix caching switches the
    mode to ``align``; prefix caching is on by default for hybrids from 0.26.0."""
    rel = vllm_release(version)
    pc = rel.prefix_caching_default if prefix_caching is None else prefix_caching
    return "align" if pc and rel.has_modes else "none"


def vllm_checkpoint_blocks(model: ModelSpec, mode: str, version: str | tuple[int, ...] | None = None, platform: str = "hopper") -> int:
    """Prefill checkpoint blocks a mamba group holds per request in align mode (0.33.0):

    * Mamba2: always 1 (``layers/mamba/mamba_mixer2.py::MambaMixer2.get_kv_cache_spec``);
    * GDN: 1 when the FlashInfer GDN prefill runs (``layers/mamba/gdn/qwen_gdn_linear_attn.py``:
      ``_resolve_gdn_prefill_backend`` picks it on Hopper, and on Blackwell with ``head_k_dim == 128``);
    * KDA: 1 only with FlashKDA, which needs a bounded gate (``gate_lower_bound`` in ``linear_attn_config``;
      ``models/kimi_k3/nvidia/kda.py::is_flashkda_supported``).
    """
    if mode != "align" or not vllm_release(version).checkpoint_blocks or not model.is_hybrid:
        return 0
    if model.linear_kind == "mamba2":
        return 1
    if model.linear_kind == "gdn":
        return 1 if (platform == "hopper" or model.lin_k_dim == 128) else 0
    if model.linear_kind == "kda":
        return 1 if model.kda_bounded_gate and model.lin_v_dim == 128 else 0
    return 0


def vllm_checkpoint_alignment(model: ModelSpec, mode: str, version: str | tuple[int, ...] | None = None, platform: str = "hopper") -> int:
    """Token alignment of those checkpoints, ``lcm``-ed into the block size in align mode
    (``layers/mamba/abstract.py::get_mamba_prefill_checkpoint_alignment``): FlashInfer GDN 64
    (``v1/attention/backends/gdn_attn.py::FLASHINFER_GDN_CHECKPOINT_ALIGNMENT``), FlashKDA 16
    (``layers/mamba/kda_checkpoint.py``); Mamba2 declares none (1)."""
    if not vllm_checkpoint_blocks(model, mode, version, platform):
        return 1
    return {"gdn": 64, "kda": 16}.get(model.linear_kind or "", 1)


def vllm_blocks_per_request(
    mode: str = "none", spec_tokens: int = 0, version: str | tuple[int, ...] | None = None, checkpoint_blocks: int = 0
) -> int:
    """Mamba blocks per request per mamba group (``MambaSpec.max_memory_usage_bytes / page_size``): none →
    ``1 + spec`` (0.10–0.14: 1), align → ``2 + spec + checkpoint blocks``. ``all`` mode depends on the length;
    not modelled (raises)."""
    rel = vllm_release(version)
    m = (mode or "none").lower()
    if m == "none":
        return 1 + max(0, spec_tokens) if rel.spec_blocks_in_none_mode else 1
    if m == "align":
        return 2 + max(0, spec_tokens) + (checkpoint_blocks if rel.checkpoint_blocks else 0)
    raise ValueError(f"mamba cache mode {mode!r} not modelled (use none or align)")


def vllm_kernel_alignment(
    model: ModelSpec, mode: str, version: str | tuple[int, ...] | None = None, platform: str = "hopper", block_size: int = 16
) -> int:
    """The ``A`` of ``attn_block = A × cdiv(mamba_page, A × attn_page_per_token)``.

    0.20+ (``platforms/interface.py::_align_hybrid_block_size``): the attention backend's smallest kernel block
    raised to the configured block size (16; the Blackwell default backends prefer 128-token blocks), at least
    128 for MLA, ``lcm``-ed with the checkpoint alignment in align mode. Before 0.20: 16, or 64 for MLA."""
    if not vllm_release(version).backend_alignment:
        return 64 if model.attention == "mla" else 16
    a = max(128 if platform == "blackwell" else 16, block_size)
    if model.attention == "mla":
        a = max(a, 128)
    return math.lcm(a, vllm_checkpoint_alignment(model, mode, version, platform))


def vllm_group_size(n_attn: int, n_mamba: int) -> int:
    """``v1/core/kv_cache_planning.py::_get_kv_cache_groups_uniform_page_size``: the smaller layer count, or the
    larger one when it is below 1.5× the smaller (fewer padding layers)."""
    counts = [x for x in (n_attn, n_mamba) if x > 0]
    if not counts:
        return 1
    lo, hi = min(counts), max(counts)
    return hi if hi < lo * 1.5 else lo


@dataclass(frozen=True)
class VLLMPool:
    budget_bytes: int
    attn_page_per_token: int  # bytes per token per attention layer per GPU
    mamba_page: int  # one linear layer's state bytes per GPU (unpadded)
    block_size: int
    page_bytes: int  # P, after unification
    padding_pct: float
    group_size: int
    n_attn_groups: int
    n_mamba_groups: int
    num_blocks: int
    blocks_per_request: int  # per mamba group
    state_bytes_per_request: int  # n_mamba_groups * group_size * P * bpg (per GPU)
    mamba_bound_concurrency: int
    max_model_len: int | None
    max_concurrency: float | None  # "Maximum concurrency for max_model_len tokens per request"
    kv_cache_tokens_old: int  # (num_blocks // num_groups) * block_size   (0.9.1–0.20 log)
    kv_cache_tokens_new: int | None  # int(max_concurrency * max_model_len)  (0.22+ log)
    max_num_seqs: int | None
    cap: int  # min(max_num_seqs, mamba-bound, floor(max_concurrency) if known)
    binding_pool: str
    mode: str = "none"  # mamba cache mode in effect (none | align)
    checkpoint_blocks: int = 0  # prefill checkpoint blocks per request per mamba group (align, 0.33+)


def vllm_pool(
    model: ModelSpec,
    budget_bytes: float,
    *,
    tp: int = 1,
    kv_dtype: str | None = None,
    ssm_dtype: str | None = None,
    mode: str | None = None,
    spec_tokens: int = 0,
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    user_block_size: int = 16,
    version: str | tuple[int, ...] | None = None,
    platform: str = "hopper",
    prefix_caching: bool | None = None,
    num_gpu_blocks_override: int | None = None,
) -> VLLMPool:
    """vLLM V1 hybrid pool: page unification, grouping, blocks, concurrency (docs/sizing.md, "vLLM").

    ``mode`` ``None`` follows prefix caching (``align`` by default for hybrids from 0.26). ``version`` picks the
    release behaviour (default 0.33.0). Qwen3-Next TP2 bf16 with 47,878,721,024 B on 0.10.2 → block 544,
    P 557,056, 7162 blocks, 14.77x at 262,144.
    """
    tp = max(1, tp)
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r} (one of {', '.join(PLATFORMS)})")
    m = (mode or vllm_default_mode(version, prefix_caching)).lower()
    st = linear_state(model, tp, ssm_dtype, engine="vllm", conv_extra_tokens=spec_tokens)
    attn_tok = kv_bytes_per_token_per_layer(model, kv_dtype, tp)
    mamba_page = st.page_bytes
    block = user_block_size
    if platform == "blackwell" and vllm_release(version).backend_alignment:
        block = max(block, 128)
    if model.is_hybrid and attn_tok:
        A = vllm_kernel_alignment(model, m, version, platform, block)
        attn_block = A * math.ceil(mamba_page / (A * attn_tok))
        block = max(block, attn_block)
    P = block * attn_tok
    pad_pct = 100.0 * (P - mamba_page) / mamba_page if model.is_hybrid and mamba_page else 0.0
    n_attn, n_mamba = model.full_layers, (model.linear_layers if model.is_hybrid else 0)
    gs = vllm_group_size(n_attn, n_mamba)
    g_attn = math.ceil(n_attn / gs) if n_attn else 0
    g_mamba = math.ceil(n_mamba / gs) if n_mamba else 0
    budget = int(budget_bytes)
    num_blocks = budget // (P * gs) if P else 0
    if num_gpu_blocks_override is not None:
        num_blocks = int(num_gpu_blocks_override)  # kv_cache_planning.py::may_override_num_blocks
    ckpt = vllm_checkpoint_blocks(model, m, version, platform) if g_mamba else 0
    bpg = vllm_blocks_per_request(m, spec_tokens, version, ckpt) if g_mamba else 0
    state = g_mamba * gs * P * bpg
    mamba_bound = num_blocks // (g_mamba * bpg) if g_mamba else 10**9
    conc = None
    new_tokens = None
    if max_model_len:
        denom = g_attn * math.ceil(max_model_len / block) + g_mamba * bpg
        conc = num_blocks / denom if denom else None
        new_tokens = int(conc * max_model_len) if conc is not None else None
    n_groups = g_attn + g_mamba
    old_tokens = (num_blocks // n_groups) * block if n_groups else 0
    limits = [mamba_bound]
    if max_num_seqs:
        limits.append(int(max_num_seqs))
    if conc is not None:
        limits.append(math.floor(conc))
    cap = min(limits)
    binding = "mamba" if (g_mamba and conc is not None and mamba_bound < conc) or (conc is None and g_mamba) else "kv"
    return VLLMPool(
        budget_bytes=budget,
        attn_page_per_token=attn_tok,
        mamba_page=mamba_page,
        block_size=block,
        page_bytes=P,
        padding_pct=pad_pct,
        group_size=gs,
        n_attn_groups=g_attn,
        n_mamba_groups=g_mamba,
        num_blocks=num_blocks,
        blocks_per_request=bpg,
        state_bytes_per_request=state,
        mamba_bound_concurrency=mamba_bound if g_mamba else 0,
        max_model_len=max_model_len,
        max_concurrency=conc,
        kv_cache_tokens_old=old_tokens,
        kv_cache_tokens_new=new_tokens,
        max_num_seqs=max_num_seqs,
        cap=cap,
        binding_pool=binding,
        mode=m,
        checkpoint_blocks=ckpt,
    )


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

    def __str__(self) -> str:
        return self.summary

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
    flag: str, value: str | None, head: str, *, notes: tuple[str, ...] = (), slot_label: str = "mamba slots", **ba: int | None
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
    return Effect(flag=flag, value=value, summary=summary, notes=notes, **ba)  # type: ignore[arg-type]


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

    @property
    def state_bytes(self) -> float | None:
        if self.conv_bytes is None and self.ssm_bytes is None:
            return None
        return (self.conv_bytes or 0.0) + (self.ssm_bytes or 0.0)

    @property
    def bytes_per_slot(self) -> float | None:
        sb = self.state_bytes
        if sb is None or not self.mamba_slots:
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


def _norm_flag(flag: str) -> str:
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


def project_effect(observed: ObservedCapacity, flag: str, value: Any = None) -> Effect | None:
    """Expected effect of ``flag`` (= ``value``) given only what the logs say. ``None`` if not applicable or not
    computable from ``observed``.

    Flags: ``--mamba-ssm-dtype`` / ``--mamba-ssm-cache-dtype`` (value dtype), ``--mamba-full-memory-ratio`` (R'),
    ``--max-mamba-cache-size`` (N), ``SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK`` (1), ``--mamba-radix-cache-strategy``
    (extra_buffer_lazy), ``--disable-radix-cache``, ``--kv-cache-dtype`` (fp8), ``--max-num-seqs`` (N),
    ``--language-model-only`` (always ``None``: the vision tower size is not in the logs).

    * ssm dtype: slot bytes = conv + ssm·(new/old); the same mamba budget holds ``floor(budget/slot) − padding``
      slots, i.e. ≈ ``(S+1)·(conv+ssm)/(conv+ssm/2) − 1`` for fp32 → bf16.
    * ratio R': ``total = mamba_bytes + kv_bytes``; mamba budget' = ``total·R'/(1+R')``; slots' =
      ``floor(budget'/slot) − padding``; KV tokens scale with the KV bytes left.
    * cap' = ``min(slots'//spr', kv_tokens'//2 (SGLang), other limit)`` where "other" is the requested
      max_running_requests when known (or the current value if it was below both pool limits).
    """
    f = _norm_flag(flag)
    o = observed
    spr = o.slots_per_request
    cap0 = _current_cap(o)
    S0 = o.mamba_slots
    val = None if value is None else str(value)

    if f in ("mamba-ssm-dtype", "mamba-ssm-cache-dtype"):
        new = normalize_dtype(val or "bfloat16")
        old = normalize_dtype(o.ssm_dtype or "float32")
        if new == old or o.ssm_bytes is None or o.bytes_per_slot is None:
            return None
        conv_slot = (o.conv_bytes or 0.0) / (S0 + o.padding_slots)  # type: ignore[operator]
        ssm_slot = o.ssm_bytes / (S0 + o.padding_slots)  # type: ignore[operator]
        new_slot = conv_slot + ssm_slot * dtype_bytes(new) / dtype_bytes(old)
        S1 = _resize_slots(o, new_slot)
        return _make_effect(
            f"--{f}",
            new,
            f"ssm {_short(new)}",
            mamba_slots_before=S0,
            mamba_slots_after=S1,
            slots_per_request_before=spr,
            slots_per_request_after=spr,
            cap_before=cap0,
            cap_after=_cap(o, S1, spr, o.kv_tokens),
            notes=(f"ssm {_short(old)} → {_short(new)}: state {_mib(o.bytes_per_slot)} → {_mib(new_slot)} per slot",),
        )

    if f in ("mamba-full-memory-ratio", "max-mamba-cache-size"):
        slot = o.bytes_per_slot
        sb = o.state_bytes
        if slot is None or sb is None or o.kv_bytes is None:
            return None
        total = sb + o.kv_bytes
        if f == "mamba-full-memory-ratio":
            R = float(val) if val is not None else balanced_mamba_full_memory_ratio(o)
            if R is None or R <= 0:
                return None
            S1 = max(0, int(total * R / (1 + R) // slot) - o.padding_slots)
            head = f"mamba-full-memory-ratio {_fmt(o.mamba_full_memory_ratio)} → {_fmt(R)}"
            shown = f"{R:g}"
        else:
            if val is None:
                return None
            S1 = int(val)
            head = f"max-mamba-cache-size {S1:,}"
            shown = str(S1)
        kv1_bytes = total - (S1 + o.padding_slots) * slot
        kpt = o.kv_bytes_per_token
        kv1 = int(max(0.0, kv1_bytes) // kpt) if kpt else None
        notes = ()
        if kv1_bytes <= 0:
            notes = ("does not fit: no memory left for the KV pool",)
        return _make_effect(
            f"--{f}",
            shown,
            head,
            notes=notes,
            mamba_slots_before=S0,
            mamba_slots_after=S1,
            slots_per_request_before=spr,
            slots_per_request_after=spr,
            kv_tokens_before=o.kv_tokens,
            kv_tokens_after=kv1,
            cap_before=cap0,
            cap_after=_cap(o, S1, spr, kv1),
        )

    if f in ("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", "mamba-radix-cache-strategy", "disable-radix-cache"):
        if spr is None or S0 is None:
            return None
        strat = (o.radix_strategy or "").replace("-", "_").lower()
        if f == "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK":
            if val is not None and val.strip().lower() in ("0", "false", "no", "off"):
                return None
            # no_buffer stays at 3 (base 2 + 1); disable stays at 1; extra_buffer(_lazy) drop one
            spr1 = spr if (spr <= 1 or strat == "no_buffer" or (spr == 3 and not strat)) else spr - 1
            head, shown, notes = "skip decode lock", "1", ("SGLang ≥0.5.17",)
        elif f == "mamba-radix-cache-strategy":
            s = _norm_strategy(val or "extra_buffer_lazy")
            if s == "extra_buffer_lazy":
                spr1 = 4
                notes = ("needs overlap schedule; no PD disaggregation / DFLASH",)
            elif s == "no_buffer":
                spr1 = 3
                notes = ("no_buffer disables the overlap scheduler",)
            elif s == "extra_buffer":
                spr1 = 5
                notes = ()
            else:
                spr1 = 1
                notes = ("radix prefix cache off",)
            head, shown = f"radix strategy {s}", s
        else:
            spr1, head, shown, notes = 1, "disable radix cache", None, ("loses prefix-cache hits",)
        if spr1 >= spr:
            return None
        return _make_effect(
            f if f.startswith("SGLANG_") else f"--{f}",
            shown,
            head,
            notes=notes,
            mamba_slots_before=S0,
            mamba_slots_after=S0,
            slots_per_request_before=spr,
            slots_per_request_after=spr1,
            cap_before=cap0,
            cap_after=_cap(o, S0, spr1, o.kv_tokens),
        )

    if f == "kv-cache-dtype":
        new = normalize_dtype(val or "fp8")
        old = normalize_dtype(o.kv_dtype or "bfloat16")
        if new == old or not o.kv_tokens:
            return None
        kv1 = int(o.kv_tokens * dtype_bytes(old) / dtype_bytes(new))
        notes = () if o.kv_dtype else ("assuming the current KV dtype is 16-bit",)
        return _make_effect(
            "--kv-cache-dtype",
            val or "fp8",
            f"kv {_short(new)}",
            notes=notes,
            mamba_slots_before=S0,
            mamba_slots_after=S0,
            kv_tokens_before=o.kv_tokens,
            kv_tokens_after=kv1,
            cap_before=cap0,
            cap_after=_cap(o, S0, spr, kv1) if o.engine == "sglang" else cap0,
        )

    if f == "max-num-seqs":
        if val is None:
            return None
        n = int(val)
        lim = [n]
        if o.mamba_cap is not None:
            lim.append(o.mamba_cap)
        return _make_effect(
            "--max-num-seqs",
            str(n),
            f"max-num-seqs {n:,}",
            cap_before=cap0,
            cap_after=min(lim),
            notes=("vLLM V1 draws state blocks per running sequence; must be ≤ mamba-bound concurrency",),
        )

    return None  # includes --language-model-only: not computable from logs


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
    M, K = observed.state_bytes, observed.kv_bytes
    if M and K:
        return (um * M) / (uk * K)
    if observed.mamba_full_memory_ratio:
        return observed.mamba_full_memory_ratio * um / uk
    return None


# --------------------------------------------------------------------------------------------------------------
# config-driven plan and its flag effects
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanInputs:
    """Inputs of a capacity plan. ``budget_bytes`` is per GPU, for KV + state."""

    engine: str = "sglang"
    tp: int = 1
    budget_bytes: int = 0
    kv_dtype: str | None = None
    ssm_dtype: str | None = None
    ratio: float = 0.9
    radix_strategy: str = "auto"
    context_len: int | None = None
    max_running_requests: int | None = None
    spec_draft_tokens: int = 0
    max_mamba_cache_size: int | None = None
    skip_decode_lock: bool = False
    overlap: bool = True
    sglang_version: str | None = None
    vllm_mode: str | None = None  # None/"auto": follows prefix caching (align by default for hybrids, 0.26+)
    language_model_only: bool = False
    notes: tuple[str, ...] = field(default=())
    platform: str = "hopper"  # hopper | blackwell: vLLM block alignment, SGLang page size
    prefix_caching: bool | None = None  # vLLM --enable-prefix-caching / --no-enable-prefix-caching (None: default)
    vllm_version: str | None = None  # vLLM release for the version table (default 0.33.0)
    num_gpu_blocks_override: int | None = None

    @property
    def sglang_page_size(self) -> int:
        """SGLang 0.5.23 defaults ``page_size`` to 1 on Hopper; the Blackwell TRT-LLM MHA/MLA backends it picks for
        these models take 64 (``arg_groups/overrides.py::_mla_backend_page_constraints``,
        ``model_overrides/qwen3_5.py``)."""
        return 64 if self.platform == "blackwell" else 1

    @property
    def resolved_vllm_mode(self) -> str:
        m = (self.vllm_mode or "auto").lower()
        return vllm_default_mode(self.vllm_version, self.prefix_caching) if m == "auto" else m


@dataclass(frozen=True)
class Plan:
    model: ModelSpec
    inputs: PlanInputs
    kv_bytes_per_token: int  # per GPU
    kv_bytes_per_token_all_gpus: int
    state: LinearState
    slots_per_request: int | None  # SGLang slots / vLLM blocks per request (all mamba groups)
    sglang: SGLangPool | None = None
    vllm: VLLMPool | None = None

    @property
    def cap(self) -> int:
        if self.sglang is not None:
            return self.sglang.max_running_requests
        assert self.vllm is not None
        return self.vllm.cap

    @property
    def binding_pool(self) -> str:
        return self.sglang.binding_pool if self.sglang is not None else self.vllm.binding_pool  # type: ignore[union-attr]

    @property
    def mamba_slots(self) -> int:
        if self.sglang is not None:
            return self.sglang.mamba_slots
        return self.vllm.num_blocks  # type: ignore[union-attr]

    @property
    def kv_tokens(self) -> int:
        if self.sglang is not None:
            return self.sglang.kv_tokens
        v = self.vllm
        assert v is not None
        return v.kv_cache_tokens_new if v.kv_cache_tokens_new is not None else v.kv_cache_tokens_old


def make_plan(model: ModelSpec, inputs: PlanInputs) -> Plan:
    """Size the pools for ``model`` under ``inputs`` (SGLang or vLLM)."""
    tp = max(1, inputs.tp)
    kvt = kv_bytes_per_token(model, inputs.kv_dtype, tp)
    if inputs.engine == "vllm":
        vp = vllm_pool(
            model,
            inputs.budget_bytes,
            tp=tp,
            kv_dtype=inputs.kv_dtype,
            ssm_dtype=inputs.ssm_dtype,
            mode=inputs.resolved_vllm_mode,
            spec_tokens=inputs.spec_draft_tokens,
            max_model_len=inputs.context_len or model.context_length,
            max_num_seqs=inputs.max_running_requests,
            version=inputs.vllm_version,
            platform=inputs.platform,
            num_gpu_blocks_override=inputs.num_gpu_blocks_override,
        )
        st = linear_state(model, tp, inputs.ssm_dtype, engine="vllm", conv_extra_tokens=inputs.spec_draft_tokens)
        return Plan(model, inputs, kvt, kvt * tp, st, vp.n_mamba_groups * vp.blocks_per_request or None, vllm=vp)
    st = linear_state(model, tp, inputs.ssm_dtype, engine="sglang")
    strat = _norm_strategy(inputs.radix_strategy, inputs.overlap)
    spr = sglang_slots_per_request(
        strat,
        inputs.sglang_version,
        overlap=inputs.overlap,
        spec=inputs.spec_draft_tokens > 0,
        skip_decode_lock=inputs.skip_decode_lock,
    )
    sp = sglang_pool(
        inputs.budget_bytes,
        st.per_request,
        kvt,
        ratio=inputs.ratio,
        slots_per_request=spr,
        max_mamba_cache_size=inputs.max_mamba_cache_size,
        max_running_requests=inputs.max_running_requests,
        radix=strat != "disable",
        spec_draft_tokens=inputs.spec_draft_tokens,
        context_len=inputs.context_len or model.context_length,
        version=inputs.sglang_version,
        page_size=inputs.sglang_page_size,
    )
    return Plan(model, inputs, kvt, kvt * tp, st, spr if model.is_hybrid else None, sglang=sp)


def unmodelled_notes(model: ModelSpec, inputs: PlanInputs, *, gpu_memory: bool = False) -> list[str]:
    """What the engines do that this model does not, said where it changes a number the plan shows."""
    out: list[str] = []
    if inputs.engine == "sglang":
        if model.is_hybrid:
            out.append(
                "not modelled: SGLang re-sizes the KV pool after CUDA-graph capture; that can only lower KV tokens and max_running_requests"
            )
        if not inputs.context_len:
            out.append(f"context length {model.context_length:,} from the config (SGLang's fallback without --context-length)")
        if inputs.spec_draft_tokens:
            out.append("not modelled: the draft model's weights and KV (only the target's mamba intermediate state is)")
    else:
        if not inputs.context_len:
            out.append(f"max_model_len {model.context_length:,} from the config (vLLM's default without --max-model-len)")
        if inputs.spec_draft_tokens:
            out.append("not modelled: the draft model's weights and KV cache (vLLM sizes the pool after loading it)")
        if model.is_hybrid and inputs.resolved_vllm_mode == "align":
            out.append("mamba cache mode align (prefix caching on, the default for hybrids): 2+ state blocks per request")
    if gpu_memory:
        out.append(
            "not modelled with --gpu-memory: activation/CUDA-graph memory and the reserve taken before the split "
            "(SGLang: mamba pre-capture reserve, multimodal reserve); prefer --kv-budget from the log"
        )
    if inputs.platform == "blackwell":
        out.append("blackwell: page/block sizes from the engines' default backends, not checked against a real log")
    return out


def _plan_effect(before: Plan, after: Plan, flag: str, value: str | None, head: str, notes: tuple[str, ...] = ()) -> Effect:
    return _make_effect(
        flag,
        value,
        head,
        notes=notes,
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


def flag_effect(model: ModelSpec, inputs: PlanInputs, flag: str, value: Any = None) -> Effect | None:
    """Effect of one flag computed by re-planning from the config. ``None`` if the flag does not apply
    (wrong engine, already set, not a hybrid, unsupported in that version)."""
    f = _norm_flag(flag)
    base = make_plan(model, inputs)
    val = None if value is None else str(value)
    eng = inputs.engine
    try:
        if f in ("mamba-ssm-dtype", "mamba-ssm-cache-dtype"):
            if not model.is_hybrid or (eng == "sglang") != (f == "mamba-ssm-dtype"):
                return None
            new = normalize_dtype(val or "bfloat16")
            if new == base.state.ssm_dtype:
                return None
            after = make_plan(model, replace(inputs, ssm_dtype=new))
            old_b, new_b = base.state.per_request, after.state.per_request
            return _plan_effect(
                base, after, f"--{f}", new, f"ssm {_short(new)}", (f"state {_mib(old_b)} → {_mib(new_b)} per request per GPU",)
            )
        if f == "kv-cache-dtype":
            new = normalize_dtype(val or "fp8")
            if new == normalize_dtype(inputs.kv_dtype, model.model_dtype):
                return None
            after = make_plan(model, replace(inputs, kv_dtype=new))
            return _plan_effect(base, after, "--kv-cache-dtype", val or "fp8", f"kv {_short(new)}")
        if eng == "sglang":
            if not model.is_hybrid:
                return None
            if f == "mamba-full-memory-ratio":
                if val is None:
                    if not inputs.context_len:
                        return None
                    r = balanced_ratio_for_context(
                        base.state.per_request, base.slots_per_request or 1, base.kv_bytes_per_token, inputs.context_len
                    )
                    val = f"{r:.3g}"
                R = float(val)
                if abs(R - inputs.ratio) < 1e-9:
                    return None
                after = make_plan(model, replace(inputs, ratio=R, max_mamba_cache_size=None))
                return _plan_effect(base, after, "--mamba-full-memory-ratio", val, f"mamba-full-memory-ratio {inputs.ratio:g} → {R:g}")
            if f == "max-mamba-cache-size":
                if val is None:
                    if not inputs.max_running_requests:
                        return None
                    val = str(inputs.max_running_requests * (base.slots_per_request or 1))
                after = make_plan(model, replace(inputs, max_mamba_cache_size=int(val)))
                notes = () if after.sglang and after.sglang.fits else ("does not fit: no memory left for the KV pool",)
                return _plan_effect(base, after, "--max-mamba-cache-size", val, f"max-mamba-cache-size {int(val):,}", notes)
            if f == "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK":
                if inputs.skip_decode_lock:
                    return None
                after = make_plan(model, replace(inputs, skip_decode_lock=True))
                if after.slots_per_request == base.slots_per_request:
                    return None
                return _plan_effect(base, after, f, "1", "skip decode lock", ("SGLang ≥0.5.17",))
            if f == "mamba-radix-cache-strategy":
                s = _norm_strategy(val or "extra_buffer_lazy", inputs.overlap)
                after = make_plan(model, replace(inputs, radix_strategy=s))
                if after.slots_per_request == base.slots_per_request:
                    return None
                notes = ("needs overlap schedule; no PD disaggregation / DFLASH",) if s == "extra_buffer_lazy" else ()
                return _plan_effect(base, after, "--mamba-radix-cache-strategy", s, f"radix strategy {s}", notes)
            if f == "disable-radix-cache":
                if _norm_strategy(inputs.radix_strategy, inputs.overlap) == "disable":
                    return None
                after = make_plan(model, replace(inputs, radix_strategy="disable"))
                return _plan_effect(base, after, "--disable-radix-cache", None, "disable radix cache", ("loses prefix-cache hits",))
            return None
        # vllm
        if f == "max-num-seqs":
            vp = base.vllm
            assert vp is not None
            if val is None:
                # what the pool can actually run: full-length requests at max_model_len, else the mamba bound
                need = math.ceil(vp.max_concurrency) if vp.max_concurrency else vp.mamba_bound_concurrency
                if model.is_hybrid:
                    need = min(need, vp.mamba_bound_concurrency)
                if inputs.max_running_requests is not None and inputs.max_running_requests <= need:
                    return None
                val = str(max(1, need))
            after = make_plan(model, replace(inputs, max_running_requests=int(val)))
            notes = ()
            if model.is_hybrid and int(val) > vp.num_blocks:
                notes = (f"vLLM ≥0.20 refuses to start: max_num_seqs > {vp.num_blocks} mamba cache blocks",)
            return _plan_effect(base, after, "--max-num-seqs", val, f"max-num-seqs {int(val):,}", notes)
        if f == "language-model-only":
            if not model.vision_params or inputs.language_model_only:
                return None
            vb = model.vision_params * dtype_bytes(model.model_dtype) // max(1, inputs.tp)
            after = make_plan(model, replace(inputs, budget_bytes=inputs.budget_bytes + vb, language_model_only=True))
            return _plan_effect(
                base,
                after,
                "--language-model-only",
                None,
                "language-model-only",
                (f"≥{vb / GiB:.2f} GiB of vision-tower weights freed per GPU (lower bound; encoder cache not counted)",),
            )
    except ValueError:
        return None
    return None


SGLANG_FLAGS = (
    ("--mamba-ssm-dtype", "bfloat16"),
    ("--kv-cache-dtype", "fp8_e4m3"),
    ("--mamba-full-memory-ratio", None),
    ("--max-mamba-cache-size", None),
    ("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", "1"),
    ("--mamba-radix-cache-strategy", "extra_buffer_lazy"),
    ("--disable-radix-cache", None),
)
VLLM_FLAGS = (
    ("--max-num-seqs", None),
    ("--kv-cache-dtype", "fp8"),
    ("--mamba-ssm-cache-dtype", "bfloat16"),
    ("--language-model-only", None),
)


def all_flag_effects(model: ModelSpec, inputs: PlanInputs) -> list[Effect]:
    """Every applicable recommended flag for ``inputs.engine``, in the order listed in SGLANG_FLAGS / VLLM_FLAGS."""
    flags = SGLANG_FLAGS if inputs.engine == "sglang" else VLLM_FLAGS
    out = []
    for flag, value in flags:
        e = flag_effect(model, inputs, flag, value)
        if e is not None:
            out.append(e)
    return out
