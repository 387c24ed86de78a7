"""How each hybrid family's config is read: one reader per family, as its engine classes read the config (the layer
rule, the state shape's inputs), returning a :class:`Reading`. The family catalogue (:mod:`.families`) names the
reader of each family; :mod:`.model` builds the :class:`~.model.ModelSpec` from what it returns.

Shapes per layer and per GPU (``tp`` GPUs, ``K`` the conv kernel), as ``MambaStateShapeCalculator``
(vLLM ``model_executor/layers/mamba/mamba_utils.py``) and SGLang's ``configs/mamba_utils.py`` build them:

* ``mamba2``     conv ``(intermediate + 2·groups'·d_state)/tp × (K−1)``, SSM ``heads/tp × head_dim × d_state``
* ``mamba1``     conv ``intermediate/tp × (K−1)``, SSM ``intermediate/tp × d_state``
* ``short_conv`` conv ``dim/tp × (K−1)``, no SSM state
* ``lightning``  no conv, SSM ``heads/tp × head_dim × head_dim`` (vLLM: in the model dtype, not the SSM dtype)
* ``gdn`` / ``kda`` as before (docs/sizing.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """The config file is missing, unreadable, not JSON, or not a hybrid/attention LM config we understand."""


def cfg_int(d: dict[str, Any], *keys: str, default: int | None = None) -> int | None:
    """The first of ``keys`` that ``d`` sets to a number (a JSON bool is no number)."""
    for k in keys:
        v = d.get(k)
        if v is not None and not isinstance(v, bool):
            try:
                return int(v)
            except (TypeError, ValueError):
                raise ConfigError(f"config field {k!r} is not a number: {v!r}") from None
    return default


# --------------------------------------------------------------------------------------------------------------
# what a reader returns


@dataclass(frozen=True)
class Reading:
    """One config as a family's engine classes read it: the layers and the per-layer state (fields of
    :class:`~.model.ModelSpec`), what overrides the generic KV reading, and what SGLang reads differently."""

    num_layers: int
    full_layers: int
    linear_layers: int
    state: dict[str, Any]
    kv: dict[str, Any] = field(default_factory=dict)
    sglang: dict[str, Any] = field(default_factory=dict)
    not_served: dict[str, str] = field(default_factory=dict)  # engine -> why it cannot serve this config


def _need(cfg: dict[str, Any], title: str, *keys: str) -> int:
    v = cfg_int(cfg, *keys)
    if v is None:
        raise ConfigError(f"{title}: the config lacks {keys[0]!r}, which the engines read for its state")
    return v


def _layers(cfg: dict[str, Any], title: str) -> int:
    return _need(cfg, title, "num_hidden_layers")


def _types(cfg: dict[str, Any], key: str, title: str, n: int) -> list[str]:
    t = cfg.get(key)
    if not isinstance(t, list) or not t:
        raise ConfigError(f"{title}: the config lacks {key!r}, the per-layer list its model class builds the layers from")
    if len(t) != n:
        raise ConfigError(f"{title}: {key!r} has {len(t)} entries for {n} layers")
    return [str(x) for x in t]


def _count(types: list[str], kinds: tuple[str, ...], title: str, key: str, other: tuple[str, ...]) -> int:
    bad = sorted({t for t in types if t not in kinds + other})
    if bad:
        raise ConfigError(f"{title}: {key!r} has layer types the model class does not build: {', '.join(bad)}")
    return sum(1 for t in types if t in kinds)


def _mamba2(intermediate: int, groups: int, heads: int, head_dim: int, d_state: int, kernel: int) -> dict[str, Any]:
    return dict(
        linear_kind="mamba2",
        lin_v_heads=heads,
        lin_v_dim=head_dim,
        conv_kernel=kernel,
        mamba_n_groups=groups,
        mamba_d_state=d_state,
        mamba_intermediate=intermediate,
    )


# --------------------------------------------------------------------------------------------------------------
# readers: one per family, as its model class reads the config (the vLLM class cited; SGLang's where it differs)


def read_granite(cfg: dict[str, Any]) -> Reading:
    """vLLM ``granitemoehybrid.py::GraniteMoeHybridModel`` (``config.layer_types[i]``: mamba / attention; transformers
    5 spells them linear_attention / full_attention) and ``::GraniteMoeHybridForCausalLM.get_mamba_state_shape_from_config``
    (intermediate ``mamba_expand × hidden_size``); SGLang ``configs/granitemoehybrid.py::GraniteMoeHybridConfig
    .mamba2_cache_params`` the same (``mamba_intermediate_size``)."""
    t = "Granite-4.0-H"
    n = _layers(cfg, t)
    types = _types(cfg, "layer_types", t, n)
    lin = _count(types, ("mamba", "linear_attention"), t, "layer_types", ("attention", "full_attention"))
    hidden = _need(cfg, t, "hidden_size")
    st = _mamba2(
        (cfg_int(cfg, "mamba_expand", default=2) or 2) * hidden,
        cfg_int(cfg, "mamba_n_groups", default=1) or 1,
        _need(cfg, t, "mamba_n_heads"),
        _need(cfg, t, "mamba_d_head"),
        _need(cfg, t, "mamba_d_state"),
        cfg_int(cfg, "mamba_d_conv", default=4) or 4,
    )
    return Reading(n, n - lin, lin, st)


def read_falcon_h1(cfg: dict[str, Any]) -> Reading:
    """vLLM ``falcon_h1.py``: every decoder layer is a ``FalconH1ParallelHybrid`` (attention and a Mamba2 mixer side by
    side), and ``::FalconH1ForCausalLM.get_mamba_state_shape_from_config`` takes ``mamba_d_ssm`` when set, else
    ``int(mamba_expand × hidden_size)``; SGLang ``configs/falcon_h1.py::FalconH1Config`` the same
    (``mamba_intermediate``; ``mamba_d_head`` "auto" is intermediate // heads)."""
    t = "Falcon-H1"
    n = _layers(cfg, t)
    hidden = _need(cfg, t, "hidden_size")
    d_ssm = cfg_int(cfg, "mamba_d_ssm")
    inter = d_ssm if d_ssm is not None else int((cfg.get("mamba_expand") or 2) * hidden)
    heads = _need(cfg, t, "mamba_n_heads")
    d_head = cfg.get("mamba_d_head")
    head_dim = inter // heads if d_head in (None, "auto") else _need(cfg, t, "mamba_d_head")
    st = _mamba2(
        inter,
        cfg_int(cfg, "mamba_n_groups", default=1) or 1,
        heads,
        head_dim,
        _need(cfg, t, "mamba_d_state"),
        cfg_int(cfg, "mamba_d_conv", default=4) or 4,
    )
    return Reading(n, n, n, st)


def read_jamba(cfg: dict[str, Any]) -> Reading:
    """vLLM ``jamba.py::JambaModel`` (``config.layers_block_type``: transformers' ``JambaConfig`` makes layer i attention
    when ``i % attn_layer_period == attn_layer_offset``) and ``::JambaForCausalLM.get_mamba_state_shape_from_config``
    (Mamba1: intermediate ``mamba_expand × hidden_size``, ``mamba_d_state``, ``mamba_d_conv``; no speculative widening).
    SGLang 0.5.23 has no Jamba."""
    t = "Jamba"
    n = _layers(cfg, t)
    period = cfg_int(cfg, "attn_layer_period", default=8) or 8
    offset = cfg_int(cfg, "attn_layer_offset", default=4) or 0
    full = sum(1 for i in range(n) if i % period == offset)
    hidden = _need(cfg, t, "hidden_size")
    st = dict(
        linear_kind="mamba1",
        mamba_intermediate=(cfg_int(cfg, "mamba_expand", default=2) or 2) * hidden,
        mamba_d_state=cfg_int(cfg, "mamba_d_state", default=16) or 16,
        conv_kernel=cfg_int(cfg, "mamba_d_conv", default=4) or 4,
    )
    return Reading(n, full, n - full, st)


def read_mamba(cfg: dict[str, Any]) -> Reading:
    """vLLM ``mamba.py::MambaForCausalLM`` (also ``FalconMambaForCausalLM``): every layer a Mamba1 mixer, no attention;
    ``get_mamba_state_shape_from_config`` reads ``intermediate_size`` (transformers' ``MambaConfig``: ``expand ×
    hidden_size``), ``state_size``, ``conv_kernel``. SGLang ``configs/mamba.py::_mamba1_cache_params``
    (``Mamba2StateShape.create_full_rank``: the same numbers, head dim 1)."""
    t = "Mamba"
    n = _layers(cfg, t)
    inter = cfg_int(cfg, "intermediate_size")
    if inter is None:
        inter = (cfg_int(cfg, "expand", default=2) or 2) * _need(cfg, t, "hidden_size")
    st = dict(
        linear_kind="mamba1",
        mamba_intermediate=inter,
        mamba_d_state=cfg_int(cfg, "state_size", default=16) or 16,
        conv_kernel=cfg_int(cfg, "conv_kernel", default=4) or 4,
    )
    return Reading(n, 0, n, st)


def read_mamba2(cfg: dict[str, Any]) -> Reading:
    """vLLM ``mamba2.py::Mamba2ForCausalLM``: every layer a Mamba2 mixer, no attention; intermediate ``expand ×
    hidden_size``. SGLang ``configs/mamba2.py::Mamba2Config.mamba2_cache_params`` reads ``intermediate_size`` instead
    (a key transformers' ``Mamba2Config`` does not define: the config must carry it)."""
    t = "Mamba2"
    n = _layers(cfg, t)
    hidden = _need(cfg, t, "hidden_size")
    st = _mamba2(
        (cfg_int(cfg, "expand", default=2) or 2) * hidden,
        cfg_int(cfg, "n_groups", default=1) or 1,
        _need(cfg, t, "num_heads"),
        _need(cfg, t, "head_dim"),
        _need(cfg, t, "state_size"),
        cfg_int(cfg, "conv_kernel", default=4) or 4,
    )
    sg = cfg_int(cfg, "intermediate_size")
    if sg is None:
        why = "SGLang 0.5.23's Mamba2Config reads 'intermediate_size' for its conv state, and this config lacks it"
        return Reading(n, 0, n, st, not_served={"sglang": why})
    return Reading(n, 0, n, st, sglang={"mamba_intermediate": sg})


def read_zamba2(cfg: dict[str, Any]) -> Reading:
    """vLLM ``zamba2.py::Zamba2Model``: a Mamba2 mixer in every layer, and in the ``hybrid`` layers of
    ``layers_block_type`` the shared transformer block too, with an attention (and KV cache) of its own per hybrid
    layer (``Zamba2Attention.dpa_list``: ``Attention(num_attention_heads, attention_head_dim)``, no separate KV
    heads); ``::Zamba2ForCausalLM.get_mamba_state_shape_from_config`` (``mamba_expand × hidden_size``,
    ``mamba_ngroups``, ``n_mamba_heads``, ``mamba_headdim``). SGLang 0.5.23 has no Zamba2."""
    t = "Zamba2"
    n = _layers(cfg, t)
    types = _types(cfg, "layers_block_type", t, n)
    full = _count(types, ("hybrid",), t, "layers_block_type", ("mamba", "linear_attention"))
    hidden = _need(cfg, t, "hidden_size")
    inter = (cfg_int(cfg, "mamba_expand", default=2) or 2) * hidden
    heads = cfg_int(cfg, "n_mamba_heads", default=8) or 8
    st = _mamba2(
        inter,
        cfg_int(cfg, "mamba_ngroups", default=1) or 1,
        heads,
        cfg_int(cfg, "mamba_headdim", default=inter // heads) or inter // heads,
        cfg_int(cfg, "mamba_d_state", default=64) or 64,
        cfg_int(cfg, "mamba_d_conv", default=4) or 4,
    )
    n_heads = _need(cfg, t, "num_attention_heads")
    head_dim = cfg_int(cfg, "attention_head_dim", default=None)
    if head_dim is None:  # transformers' Zamba2Config: attention_hidden_size 2 × hidden over the heads
        head_dim = (cfg_int(cfg, "attention_hidden_size", default=2 * hidden) or 2 * hidden) // n_heads
    return Reading(n, full, n, st, kv={"attention": "gqa", "num_kv_heads": n_heads, "head_dim": head_dim})


def _short_conv(cfg: dict[str, Any], title: str, dim_key: str) -> tuple[int, int, dict[str, Any]]:
    n = _layers(cfg, title)
    types = _types(cfg, "layer_types", title, n)
    lin = _count(types, ("conv", "short_conv"), title, "layer_types", ("full_attention", "attention"))
    st = dict(
        linear_kind="short_conv",
        mamba_intermediate=_need(cfg, title, dim_key),
        conv_kernel=_need(cfg, title, "conv_L_cache"),
    )
    return n, lin, st


def read_lfm2(cfg: dict[str, Any]) -> Reading:
    """vLLM ``lfm2.py::Lfm2Model`` (``layer_types``: conv / full_attention) and ``::Lfm2ForCausalLM
    .get_mamba_state_shape_from_config`` (``short_conv_state_shape`` of ``conv_dim`` and ``conv_L_cache``: conv only,
    no SSM state, no speculative widening); SGLang ``configs/lfm2.py::Lfm2Config.mamba2_cache_params`` takes
    ``hidden_size`` for the conv width instead (state size 0)."""
    t = "LFM2"
    n, lin, st = _short_conv(cfg, t, "conv_dim")
    return Reading(n, n - lin, lin, st, sglang={"mamba_intermediate": _need(cfg, t, "hidden_size")})


def read_lfm2_moe(cfg: dict[str, Any]) -> Reading:
    """vLLM ``lfm2_moe.py::Lfm2MoeForCausalLM.get_mamba_state_shape_from_config`` and ``lfm2_vl.py::
    Lfm2VLForConditionalGeneration`` (its text config): conv width ``hidden_size``; SGLang
    ``configs/lfm2_moe.py::Lfm2MoeConfig.mamba2_cache_params`` the same."""
    t = "LFM2-MoE"
    n, lin, st = _short_conv(cfg, t, "hidden_size")
    return Reading(n, n - lin, lin, st)


def _mla(cfg: dict[str, Any]) -> dict[str, Any]:
    """vLLM's Bailing MLA attention reads ``kv_lora_rank`` (default 512) and ``qk_rope_head_dim`` (default 64)."""
    return {
        "attention": "mla",
        "kv_lora_rank": cfg_int(cfg, "kv_lora_rank", default=512),
        "qk_rope_head_dim": cfg_int(cfg, "qk_rope_head_dim", default=64),
    }


def _bailing_heads(cfg: dict[str, Any], title: str) -> tuple[int, int]:
    heads = _need(cfg, title, "num_attention_heads")
    hd = cfg_int(cfg, "head_dim")
    return heads, hd if hd is not None else _need(cfg, title, "hidden_size") // heads


def _group_size(cfg: dict[str, Any], title: str) -> int:
    g = cfg.get("layer_group_size", 1)
    if isinstance(g, bool) or not isinstance(g, int):
        raise ConfigError(f"{title}: 'layer_group_size' {g!r} is not the integer vLLM's model class reads")
    return g


def read_bailing_linear(cfg: dict[str, Any]) -> Reading:
    """vLLM ``bailing_moe_linear.py::BailingMoeV25Model`` (``is_linear_layer``: linear unless ``(i + 1) %
    layer_group_size == 0``; the others MLA) and ``::BailingMoeV25ForCausalLM.get_mamba_state_shape_from_config``
    (``linear_attention_state_shape``: heads // tp × head_dim × head_dim, no conv; dtype the model's). SGLang
    ``configs/bailing_hybrid.py::BailingHybridConfig.mamba2_cache_params`` (no KDA): the same layers and shape
    (``Mamba2StateShape`` of no conv), in SGLang's SSM dtype."""
    t = "Bailing (Ling) linear"
    n = _layers(cfg, t)
    g = _group_size(cfg, t)
    lin = sum(1 for i in range(n) if g > 0 and (i + 1) % g != 0)
    heads, hd = _bailing_heads(cfg, t)
    st = dict(linear_kind="lightning", lin_v_heads=heads, lin_v_dim=hd, conv_kernel=1)
    return Reading(n, n - lin, lin, st, kv=_mla(cfg))


def read_bailing_v3(cfg: dict[str, Any]) -> Reading:
    """vLLM ``bailing_moe_v3.py::_is_kda_layer`` (KDA unless ``(i + 1) % layer_group_size == 0`` or i past the last
    whole group; the others MLA) and ``::_get_kda_state_shape_for_config`` (``kda_state_shape`` of
    ``num_attention_heads``, ``head_dim``, ``short_conv_kernel_size``); SGLang ``configs/bailing_hybrid.py``
    (``use_kda``: ``KimiLinearStateShape``) counts the layers by ``(i + 1) % layer_group_size`` alone, so the tail of
    a layer count that is not a multiple of the group is KDA there."""
    t = "Bailing (Ling) V3"
    n = _layers(cfg, t)
    g = _group_size(cfg, t)
    if g <= 0:
        raise ConfigError(f"{t}: 'layer_group_size' must be positive")
    lin = sum(1 for i in range(n) if not ((i + 1) % g == 0 or i >= n // g * g))
    heads, hd = _bailing_heads(cfg, t)
    st = dict(
        linear_kind="kda",
        lin_k_heads=heads,
        lin_v_heads=heads,
        lin_k_dim=hd,
        lin_v_dim=hd,
        conv_kernel=_need(cfg, t, "short_conv_kernel_size"),
    )
    sg_lin = sum(1 for i in range(n) if (i + 1) % g != 0)
    sglang = {"full_layers": n - sg_lin, "linear_layers": sg_lin} if sg_lin != lin else {}
    return Reading(n, n - lin, lin, st, kv=_mla(cfg), sglang=sglang)
