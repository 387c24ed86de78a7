"""The model side of the capacity model: dtypes and what a HuggingFace ``config.json`` says (layers, heads,
linear-attention kind, dtype sources, context length). The only I/O of the package is :func:`load_config`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

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


def short_dtype(dtype: str) -> str:
    """A dtype as the effects write it: bf16, fp16, fp32, fp8."""
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
