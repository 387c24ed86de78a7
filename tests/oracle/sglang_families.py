"""SGLang 0.5.23: the hybrid families beyond Qwen3-Next / Qwen3.5, Nemotron-H and Kimi that it serves, as each config
class reads the config (``mamba2_cache_params``: the layers, the state shape, the dtype) and how its ``ModelConfig``
sizes their full-attention KV. ``sglang_0_5_23.py`` takes these steps for a config whose architecture is one of
:data:`ARCH`; the pool arithmetic is the same for every family. SGLang 0.5.23 has no Jamba, Zamba2 or OLMo-hybrid
(no config class, no model in ``srt/models``); MiniCPM-V 4.6's text config is a Qwen3.5 one
(sglang/srt/configs/minicpmv4_6.py::_resolve_text_config_class: ``Qwen3_5TextConfig``, a ``Qwen3NextConfig``), which
``sglang_0_5_23.py`` reads as it is.
"""

from __future__ import annotations

import math

from . import sglang_0_5_23 as sg
from .hf_config import ITEMSIZE, text_config

# cite: sglang/srt/configs/hybrid_arch.py::mamba2_config (FalconH1Config, Lfm2Config, Lfm2MoeConfig, Mamba2Config,
# MambaConfig, FalconMambaConfig, GraniteMoeHybridConfig with mamba layers) and ::hybrid_lightning_config /
# ::kimi_linear_config (BailingHybridConfig without / with KDA)
ARCH = {
    "GraniteMoeHybridForCausalLM": "granitemoehybrid",
    "FalconH1ForCausalLM": "falcon_h1",
    "MambaForCausalLM": "mamba",
    "FalconMambaForCausalLM": "mamba",
    "Mamba2ForCausalLM": "mamba2",
    "Lfm2ForCausalLM": "lfm2",
    "Lfm2MoeForCausalLM": "lfm2_moe",
    "BailingMoeV2_5ForCausalLM": "bailing_linear",
    "BailingMoeV3ForCausalLM": "bailing_kda",
}


def family(cfg: dict) -> str | None:
    return ARCH.get((cfg.get("architectures") or [""])[0])


def full_rank_state_shape(tp, intermediate_size, state_size, conv_kernel):
    """cite: sglang/srt/configs/mamba_utils.py::Mamba2StateShape.create_full_rank (Mamba-1: head_dim 1)"""
    return [(sg.divide(intermediate_size, tp), conv_kernel - 1)], (sg.divide(intermediate_size, tp), 1, state_size)


def layers(cfg: dict) -> tuple[list[int], list[int]]:
    """(full attention layer ids, linear layer ids).
    cite: sglang/srt/configs/granitemoehybrid.py::GraniteMoeHybridConfig.mamba_layer_ids (after _to_sglang_layer_types:
    linear_attention -> mamba, full_attention -> attention)
    cite: sglang/srt/configs/falcon_h1.py::FalconH1Config.linear_layer_ids (every layer, and every layer full attention:
    ::FalconH1Config.full_attention_layer_ids)
    cite: sglang/srt/configs/mamba.py::MambaConfig.full_attention_layer_ids (none; every layer mamba)
    cite: sglang/srt/configs/mamba2.py::Mamba2Config.full_attention_layer_ids
    cite: sglang/srt/configs/lfm2.py::Lfm2Config.linear_layer_ids (conv / short_conv)
    cite: sglang/srt/configs/bailing_hybrid.py::BailingHybridConfig.layers_block_type ((l + 1) % layer_group_size)"""
    f, c = family(cfg), text_config(cfg)
    n = c["num_hidden_layers"]
    if f == "granitemoehybrid":
        alias = {"linear_attention": "mamba", "full_attention": "attention"}
        t = [alias.get(x, x) for x in c["layer_types"]]
        return [i for i in range(n) if t[i] == "attention"], [i for i in range(n) if t[i] == "mamba"]
    if f == "falcon_h1":
        return list(range(n)), list(range(n))
    if f in ("mamba", "mamba2"):
        return [], list(range(n))
    if f in ("lfm2", "lfm2_moe"):
        t = c["layer_types"]
        return [i for i in range(n) if t[i] == "full_attention"], [i for i in range(n) if t[i] in ("conv", "short_conv")]
    g = c["layer_group_size"]
    full = [i for i in range(n) if (i + 1) % g == 0]
    return full, [i for i in range(n) if i not in full]


def state(cfg: dict, tp: int) -> tuple[list[tuple[int, int]], tuple[int, int, int], bool]:
    """(conv shapes, temporal shape, whether the cache params carry the config's dtype).
    cite: sglang/srt/configs/granitemoehybrid.py::GraniteMoeHybridConfig.mamba2_cache_params (intermediate
    mamba_expand x hidden_size; no dtype passed)
    cite: sglang/srt/configs/falcon_h1.py::FalconH1Config.mamba2_cache_params (mamba_intermediate: mamba_d_ssm, else
    mamba_expand x hidden_size; dtype=mamba2_state_dtype(self))
    cite: sglang/srt/configs/mamba.py::_mamba1_cache_params (intermediate_size, state_size, conv_kernel; no dtype)
    cite: sglang/srt/configs/mamba2.py::Mamba2Config.mamba2_cache_params (intermediate_size; no dtype)
    cite: sglang/srt/configs/lfm2.py::Lfm2Config.mamba2_cache_params (hidden_size, conv_L_cache, state size 0;
    dtype=mamba2_state_dtype(self))
    cite: sglang/srt/configs/lfm2_moe.py::Lfm2MoeConfig.mamba2_cache_params (the same; no dtype)
    cite: sglang/srt/configs/bailing_hybrid.py::BailingHybridConfig.mamba2_cache_params (no KDA: no conv, heads x
    head_dim x head_dim; KDA: KimiLinearStateShape; no dtype)"""
    f, c = family(cfg), text_config(cfg)
    if f == "granitemoehybrid":
        conv, t = sg.mamba2_state_shape(
            tp,
            c["mamba_expand"] * c["hidden_size"],
            c["mamba_n_groups"],
            c["mamba_n_heads"],
            c["mamba_d_head"],
            c["mamba_d_state"],
            c["mamba_d_conv"],
        )
        return conv, t, False
    if f == "falcon_h1":
        inter = c["mamba_expand"] * c["hidden_size"] if c.get("mamba_d_ssm") is None else c["mamba_d_ssm"]
        conv, t = sg.mamba2_state_shape(
            tp, inter, c["mamba_n_groups"], c["mamba_n_heads"], c["mamba_d_head"], c["mamba_d_state"], c["mamba_d_conv"]
        )
        return conv, t, True
    if f == "mamba":
        conv, t = full_rank_state_shape(tp, c["intermediate_size"], c["state_size"], c["conv_kernel"])
        return conv, t, False
    if f == "mamba2":
        conv, t = sg.mamba2_state_shape(
            tp, c["intermediate_size"], c["n_groups"], c["num_heads"], c["head_dim"], c["state_size"], c["conv_kernel"]
        )
        return conv, t, False
    if f in ("lfm2", "lfm2_moe"):
        conv, t = sg.mamba2_state_shape(tp, c["hidden_size"], 1, tp, c["hidden_size"], 0, int(c["conv_L_cache"]))
        return conv, t, f == "lfm2"
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    if f == "bailing_kda":
        conv, t = sg.kimi_state_shape(tp, c["num_attention_heads"], hd, c["short_conv_kernel_size"])
        return conv, t, False
    conv, t = sg.mamba2_state_shape(tp, 0, 0, c["num_attention_heads"], hd, hd, 1)
    return conv, t, False


def mamba_cache_per_req(cfg: dict, tp: int, ssm_dtype: str) -> int:
    """cite: sglang/srt/configs/mamba_utils.py::BaseLinearStateParams.mamba_cache_per_req (conv bf16, the temporal
    state in ``ssm_dtype``: sglang_0_5_23.ssm_dtype's rule, the config read only where the class passes it)"""
    conv, temporal, _ = state(cfg, tp)
    _, lin = layers(cfg)
    return (sum(math.prod(x) for x in conv) * 2 + math.prod(temporal) * ITEMSIZE[ssm_dtype]) * len(lin)


def reads_config_dtype(cfg: dict) -> bool:
    return state(cfg, 1)[2]


def cell_size(cfg: dict, tp: int, kv_dtype: str) -> int:
    """KV bytes per token per rank over the full-attention layers.
    cite: sglang/srt/configs/model_config.py::ModelConfig._derive_model_shapes (BailingMoeV2_5ForCausalLM and
    BailingMoeV3ForCausalLM: MLA, kv_lora_rank + qk_rope_head_dim, 0 for the rope part with use_mla_nope on V3;
    else head_dim or hidden // heads)"""
    f, c = family(cfg), text_config(cfg)
    full, _ = layers(cfg)
    size = ITEMSIZE[kv_dtype]
    if not full:
        return 0
    if f in ("bailing_linear", "bailing_kda"):
        rope = 0 if f == "bailing_kda" and c.get("use_mla_nope") else c.get("qk_rope_head_dim", 64)
        return (c.get("kv_lora_rank", 512) + rope) * len(full) * size
    heads = max(1, c["num_key_value_heads"] // tp)
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return heads * (hd + hd) * len(full) * size
