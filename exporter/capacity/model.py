"""The model side of the capacity model: dtypes and what a HuggingFace ``config.json`` says (layers, heads,
linear-attention kind, dtype sources, context length). The only I/O of the package is :func:`load_config`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import families
from .readers import ConfigError as ConfigError
from .readers import cfg_int as _int

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
    linear_kind: str | None  # "gdn" | "kda" | "mamba2" | "mamba1" | "short_conv" | "lightning" | None (plain transformer)
    attention: str  # "gqa" | "mla"
    num_kv_heads: int = 0
    head_dim: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    # linear layers (gdn/kda: k/v heads and dims; mamba2: v_heads = mamba heads, v_dim = mamba head dim; lightning:
    # v_heads/v_dim its heads and head dim; mamba1 and short_conv: mamba_intermediate, the conv width)
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
    family_key: str = ""  # the catalogue's family (exporter/capacity/families.py), when the architecture names one
    # what an engine reads differently from this config (``ModelSpec`` fields; :meth:`for_engine` applies them)
    sglang_fields: tuple[tuple[str, Any], ...] = ()
    not_served: tuple[tuple[str, str], ...] = ()  # (engine, why): an engine that does not serve this config

    def for_engine(self, engine: str) -> ModelSpec:
        """This config as ``engine`` reads it (SGLang takes some widths and layer counts differently)."""
        if engine == "sglang" and self.sglang_fields:
            return replace(self, sglang_fields=(), **dict(self.sglang_fields))
        return self

    def refusal(self, engine: str) -> str | None:
        """Why ``engine`` does not serve this config, or None."""
        return dict(self.not_served).get(engine)

    @property
    def attention_free(self) -> bool:
        return self.full_layers == 0 and self.is_hybrid

    @property
    def catalogue_family(self) -> families.Family | None:
        return families.BY_KEY.get(self.family)

    @property
    def prefill_checkpoints(self) -> bool:
        """Whether vLLM's state layer of this family exports prefill checkpoints where its kind does (OLMo-hybrid's
        GDN layer does not)."""
        fam = self.catalogue_family
        return fam.prefill_checkpoints if fam is not None else True

    @property
    def cpu_state_backend(self) -> str | None:
        """``gdn`` when vLLM's CPU build keeps a 16-bit SSM state of this model on an AVX512-BF16 CPU (its accelerated
        GDN backend: the catalogue's ``cpu_gdn_backend``), else the linear kind (``capacity.vllm_ssm_dtype``)."""
        fam = self.catalogue_family
        return "gdn" if fam is not None and fam.cpu_gdn_backend else self.linear_kind

    @property
    def family(self) -> str:
        """Which engine config class reads this model: the catalogue's key (``granite_h``, ``falcon_h1`` …) when the
        architecture names a family, else ``kimi`` | ``qwen3_5`` | ``qwen3_next`` | ``nemotron_h`` | ``other`` from
        the config's shape. The engines take the SSM dtype from a different place per family (:func:`resolve_ssm_dtype`)."""
        if self.family_key:
            return self.family_key
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


def _kv(cfg: dict[str, Any]) -> dict[str, Any]:
    """The generic reading of the full-attention layers: MLA when the config has ``kv_lora_rank``, else GQA."""
    kv_lora = _int(cfg, "kv_lora_rank")
    if kv_lora:
        return {"attention": "mla", "kv_lora_rank": kv_lora, "qk_rope_head_dim": _int(cfg, "qk_rope_head_dim", default=64)}
    n_heads = _int(cfg, "num_attention_heads", default=0) or 0
    hidden = _int(cfg, "hidden_size", default=0) or 0
    head_dim = _int(cfg, "head_dim", "attention_head_dim", default=None)
    if head_dim is None:
        head_dim = hidden // n_heads if n_heads else 0
    return {"attention": "gqa", "num_kv_heads": _int(cfg, "num_key_value_heads", default=n_heads) or n_heads, "head_dim": head_dim}


def _structural(cfg: dict[str, Any], n_layers: int | None, who: str) -> tuple[int | None, int, int, dict[str, Any]]:
    """The layouts read from the config's shape (the families whose classes ``model.py`` has always read): kimi
    ``linear_attn_config`` (``full_attn_layers``/``kda_layers``), Nemotron-H ``hybrid_override_pattern`` (``M``
    mamba, ``*`` attention), a ``layer_types`` list, ``full_attention_interval`` (layer i is full iff ``(i+1) %
    interval == 0``) with Gated DeltaNet keys; else every layer full attention. Returns (layers, full, linear, state)."""
    lin: dict[str, Any] = {}
    lac = cfg.get("linear_attn_config")
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(lac, dict):  # kimi (KDA)
        full_l = lac.get("full_attn_layers")
        kda_l = lac.get("kda_layers")
        if full_l is None and kda_l is None:
            raise ConfigError(f"{who}: linear_attn_config has neither full_attn_layers nor kda_layers")
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
        return n_layers or n_full + n_lin, n_full, n_lin, lin
    if isinstance(pattern, str) and pattern:  # Nemotron-H (mamba2)
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
        return n_layers or len(pattern), pattern.count("*"), pattern.count("M"), lin
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
            raise ConfigError(f"{who}: config has no num_hidden_layers / layer layout")
        return n_layers, n_layers, 0, {}
    if n_lin:
        if cfg.get("linear_num_value_heads") is None:
            kinds = sorted({t for t in types or () if _is_linear_type(t)}) or ["linear_attention (full_attention_interval)"]
            raise ConfigError(
                f"{who}: {n_lin} of its layers are {', '.join(kinds)}, and the config lacks 'linear_num_value_heads' "
                "(a Gated DeltaNet key): a recurrent layer kind the capacity model does not know; refused rather than "
                "planned without its state"
            )
        lin = dict(
            linear_kind="gdn",
            lin_k_heads=_int(cfg, "linear_num_key_heads", default=0),
            lin_v_heads=_int(cfg, "linear_num_value_heads", default=0),
            lin_k_dim=_int(cfg, "linear_key_head_dim", default=128),
            lin_v_dim=_int(cfg, "linear_value_head_dim", default=128),
            conv_kernel=_int(cfg, "linear_conv_kernel_dim", default=4),
        )
    return n_layers, n_full, n_lin, lin


def model_from_config(config: dict[str, Any], name: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a HF config dict (top level, or nested ``text_config``).

    The family comes from ``architectures[0]`` (else ``model_type``, the text config's included) through the
    family catalogue (exporter/capacity/families.py): its reader lays the layers out and reads the state as the
    engines' classes do. A family the engines serve that the catalogue refuses, a config whose linear layers are of
    a kind the model does not know, or one with recurrent-state fields (mamba / ssm / conv / linear-attention keys)
    and no family that reads them, is refused with a :class:`ConfigError` that names the architecture and the field.
    Only a config with none of these is planned as a dense transformer.
    """
    if not isinstance(config, dict):
        raise ConfigError("config must be a JSON object")
    top = config
    tc = config.get("text_config")
    cfg: dict[str, Any] = {**top, **tc} if isinstance(tc, dict) else dict(top)
    name = name or str(cfg.get("_name_or_path") or (top.get("architectures") or [top.get("model_type") or "model"])[0])
    text = tc if isinstance(tc, dict) else top
    arch = str((top.get("architectures") or [""])[0])
    model_type = str(text.get("model_type") or top.get("model_type") or "")
    fam = families.family_of(arch, str(top.get("model_type") or "")) or families.family_of("", model_type)
    who = " / ".join(x for x in (arch, model_type) if x) or "config"

    n_layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    model_dtype = normalize_dtype(cfg.get("torch_dtype") or cfg.get("dtype") or top.get("torch_dtype") or "bfloat16")
    ssm_cfg = _config_dtype(text, top, "mamba_ssm_dtype")
    ssm_cache_cfg = _config_dtype(text, top, "mamba_ssm_cache_dtype")

    kv = _kv(cfg)
    extra: dict[str, Any] = {}
    not_served: dict[str, str] = {}
    if fam is not None and fam.refused:
        served = ", ".join(c.split("::")[-1] for c in fam.vllm + fam.sglang)
        raise ConfigError(f"{who}: {fam.title} is a hybrid the engines serve ({served}); plan does not model it: {fam.refused}")
    if fam is not None and fam.read is not None:
        try:
            r = fam.read(cfg)
        except ConfigError as e:
            raise ConfigError(f"{who}: {e}") from None
        n_layers, n_full, n_lin, lin = r.num_layers, r.full_layers, r.linear_layers, dict(r.state)
        kv.update(r.kv)
        extra["sglang_fields"] = tuple(sorted(r.sglang.items()))
        not_served.update(r.not_served)
    else:
        n_layers, n_full, n_lin, lin = _structural(cfg, n_layers, who)
        if fam is not None and not n_lin:
            raise ConfigError(f"{who}: a {fam.title} config with no linear layers (no layer_types, full_attention_interval or pattern)")
        if fam is None and not n_lin:
            fields = families.recurrent_fields(cfg)
            if fields:
                raise ConfigError(
                    f"{who}: the config has recurrent-state fields ({', '.join(fields)}) and no family the capacity model "
                    "reads (exporter/capacity/families.py); refused rather than planned as a dense model with no state"
                )
    if fam is not None:
        extra["family_key"] = fam.key
        for e in ("sglang", "vllm"):
            if e not in fam.engines:
                not_served[e] = f"{'SGLang 0.5.23' if e == 'sglang' else 'vLLM'} does not serve {fam.title} ({arch or model_type})"
        extra["not_served"] = tuple(sorted(not_served.items()))
    if not n_layers:
        raise ConfigError(f"{who}: config has no num_hidden_layers")
    if kv["attention"] == "gqa" and n_full and not (kv["num_kv_heads"] and kv["head_dim"]):
        raise ConfigError(f"{who}: config lacks num_key_value_heads/head_dim for the full-attention layers")

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
        architecture=arch,
        model_type=model_type,
        context_length=context_length_of(text),
        linear_kind=lin.pop("linear_kind", None),
        **kv,
        **lin,
        **extra,
    )


def load_model(path: str | Path) -> ModelSpec:
    """:func:`load_config` + :func:`model_from_config` (name = file stem)."""
    cfg = load_config(path)
    try:
        return model_from_config(cfg, name=Path(path).stem)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
