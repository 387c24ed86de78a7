"""vLLM (0.32.0-0.34.0): the hybrid families beyond Qwen3-Next / Qwen3.5, Nemotron-H and Kimi, as each model class
reads its config: the layer rule, the state shapes (``MambaStateShapeCalculator``), the state dtypes
(``MambaStateDtypeCalculator``), the attention page and the prefill checkpoints. ``vllm_0_33_0.py`` takes these
steps for a config whose architecture is one of :data:`ARCH`; its pool arithmetic is the same for every family.

Every shape and dtype function cited here is the same source in the 0.33.0 and 0.34.0 wheels (``same since``
lines; ``make oracle`` compares them), and in the 0.32.0 engine the real-engine suite calls them
(tests/engine/test_family_shapes.py).
"""

from __future__ import annotations

import math

from .hf_config import ITEMSIZE, text_config

# cite: vllm/model_executor/models/registry.py::_TEXT_GENERATION_MODELS (architecture -> module, class)
ARCH = {
    "GraniteMoeHybridForCausalLM": "granitemoehybrid",
    "FalconH1ForCausalLM": "falcon_h1",
    "JambaForCausalLM": "jamba",
    "MambaForCausalLM": "mamba",
    "FalconMambaForCausalLM": "mamba",
    "Mamba2ForCausalLM": "mamba2",
    "Zamba2ForCausalLM": "zamba2",
    "Lfm2ForCausalLM": "lfm2",
    "Lfm2MoeForCausalLM": "lfm2_moe",
    "BailingMoeV2_5ForCausalLM": "bailing_moe_linear",
    "BailingMoeV3ForCausalLM": "bailing_moe_v3",
    "OlmoHybridForCausalLM": "olmo_hybrid",
}
# MiniCPM-V 4.6 is not here: its state is Qwen3.5's text model's (GDN keys in text_config, no config hook for its
# architecture, the Qwen GDN layer's checkpoints), which vllm_0_33_0.py's GDN steps read as they are.
# cite: vllm/model_executor/models/minicpmv4_6.py::MiniCPMV4_6ForConditionalGeneration.get_mamba_state_shape_from_config


def family(cfg: dict) -> str | None:
    return ARCH.get((cfg.get("architectures") or [""])[0])


def divide(a: int, b: int) -> int:
    """cite: vllm/distributed/utils.py::divide (asserts divisibility)"""
    assert a % b == 0, (a, b)
    return a // b


# --------------------------------------------------------------------------------------------------------------
# MambaStateShapeCalculator (vllm/model_executor/layers/mamba/mamba_utils.py), conv layout SD: (state_len, dim)


def extra_groups_for_head_shards(ngroups: int, tp: int) -> int:
    """cite: vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateShapeCalculator.extra_groups_for_head_shards"""
    return 0 if ngroups % tp == 0 else tp - ngroups


def mamba1_state_shape(tp, intermediate_size, state_size, conv_kernel):
    """cite: vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateShapeCalculator.mamba1_state_shape"""
    return [(conv_kernel - 1, divide(intermediate_size, tp)), (divide(intermediate_size, tp), state_size)]


def mamba2_state_shape(tp, intermediate_size, n_groups, num_heads, head_dim, state_size, conv_kernel, num_spec=0):
    """cite: vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateShapeCalculator.mamba2_state_shape"""
    n_groups = n_groups + extra_groups_for_head_shards(n_groups, tp)
    conv_dim = intermediate_size + 2 * n_groups * state_size
    return [(conv_kernel - 1 + num_spec, divide(conv_dim, tp)), (divide(num_heads, tp), head_dim, state_size)]


def short_conv_state_shape(tp, intermediate_size, conv_kernel, num_spec=0):
    """cite: vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateShapeCalculator.short_conv_state_shape"""
    return [(conv_kernel - 1 + num_spec, divide(intermediate_size, tp))]


def linear_attention_state_shape(num_heads, tp, head_dim):
    """cite: vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateShapeCalculator.linear_attention_state_shape
    (``num_heads // tp_size``: no divisibility check)"""
    return [(num_heads // tp, head_dim, head_dim)]


def gated_delta_net_state_shape(tp, num_k_heads, num_v_heads, head_k_dim, head_v_dim, conv_kernel_size, num_spec=0):
    """cite: vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateShapeCalculator.gated_delta_net_state_shape"""
    conv_dim = head_k_dim * num_k_heads * 2 + head_v_dim * num_v_heads
    return [(conv_kernel_size - 1 + num_spec, divide(conv_dim, tp)), (divide(num_v_heads, tp), head_v_dim, head_k_dim)]


def kda_state_shape(tp, num_heads, head_dim, conv_kernel_size=4, num_spec=0):
    """cite: vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateShapeCalculator.kda_state_shape (num_k_heads,
    head_k_dim left to their defaults: num_heads, head_dim)"""
    conv_dim = num_heads * head_dim + 2 * num_heads * head_dim
    return [(conv_kernel_size - 1 + num_spec, divide(conv_dim, tp)), (divide(num_heads, tp), head_dim, head_dim)]


# --------------------------------------------------------------------------------------------------------------
# each class's get_mamba_state_shape_from_config / get_mamba_state_dtype_from_config


def state_shapes(cfg: dict, tp: int, num_spec: int = 0) -> list[tuple[int, ...]]:
    """cite: vllm/model_executor/models/granitemoehybrid.py::GraniteMoeHybridForCausalLM.get_mamba_state_shape_from_config
    cite: vllm/model_executor/models/falcon_h1.py::FalconH1ForCausalLM.get_mamba_state_shape_from_config
    cite: vllm/model_executor/models/jamba.py::JambaForCausalLM.get_mamba_state_shape_from_config
    cite: vllm/model_executor/models/mamba.py::MambaForCausalLM.get_mamba_state_shape_from_config
    cite: vllm/model_executor/models/mamba2.py::Mamba2ForCausalLM.get_mamba_state_shape_from_config
    cite: vllm/model_executor/models/zamba2.py::Zamba2ForCausalLM.get_mamba_state_shape_from_config
    cite: vllm/model_executor/models/lfm2.py::Lfm2ForCausalLM.get_mamba_state_shape_from_config
    cite: vllm/model_executor/models/lfm2_moe.py::Lfm2MoeForCausalLM.get_mamba_state_shape_from_config
    cite: vllm/model_executor/models/bailing_moe_linear.py::BailingMoeV25ForCausalLM.get_mamba_state_shape_from_config
    cite: vllm/model_executor/models/bailing_moe_v3.py::_get_kda_state_shape_for_config
    cite: vllm/model_executor/models/olmo_hybrid.py::OlmoHybridForCausalLM.get_mamba_state_shape_from_config
    (Jamba, Mamba1 and LFM2 pass no num_spec.)"""
    f, c = family(cfg), text_config(cfg)
    if f == "granitemoehybrid":
        return mamba2_state_shape(
            tp,
            c["mamba_expand"] * c["hidden_size"],
            c["mamba_n_groups"],
            c["mamba_n_heads"],
            c["mamba_d_head"],
            c["mamba_d_state"],
            c["mamba_d_conv"],
            num_spec,
        )
    if f == "falcon_h1":
        inter = c["mamba_d_ssm"] if c.get("mamba_d_ssm") is not None else int(c["mamba_expand"] * c["hidden_size"])
        return mamba2_state_shape(
            tp, inter, c["mamba_n_groups"], c["mamba_n_heads"], c["mamba_d_head"], c["mamba_d_state"], c["mamba_d_conv"], num_spec
        )
    if f == "jamba":
        return mamba1_state_shape(tp, c["mamba_expand"] * c["hidden_size"], c["mamba_d_state"], c["mamba_d_conv"])
    if f == "mamba":
        return mamba1_state_shape(tp, c["intermediate_size"], c["state_size"], c["conv_kernel"])
    if f == "mamba2":
        return mamba2_state_shape(
            tp, c["expand"] * c["hidden_size"], c["n_groups"], c["num_heads"], c["head_dim"], c["state_size"], c["conv_kernel"], num_spec
        )
    if f == "zamba2":
        return mamba2_state_shape(
            tp,
            c["mamba_expand"] * c["hidden_size"],
            c["mamba_ngroups"],
            c["n_mamba_heads"],
            c["mamba_headdim"],
            c["mamba_d_state"],
            c["mamba_d_conv"],
            num_spec,
        )
    if f == "lfm2":
        return short_conv_state_shape(tp, c["conv_dim"], c["conv_L_cache"])
    if f == "lfm2_moe":
        return short_conv_state_shape(tp, c["hidden_size"], c["conv_L_cache"])
    if f == "bailing_moe_linear":
        return linear_attention_state_shape(c["num_attention_heads"], tp, c.get("head_dim", c["hidden_size"] // c["num_attention_heads"]))
    if f == "bailing_moe_v3":
        return kda_state_shape(tp, c["num_attention_heads"], c["head_dim"], c["short_conv_kernel_size"], num_spec)
    if f == "olmo_hybrid":
        return gated_delta_net_state_shape(
            tp,
            c["linear_num_key_heads"],
            c["linear_num_value_heads"],
            c["linear_key_head_dim"],
            c["linear_value_head_dim"],
            c["linear_conv_kernel_dim"],
            num_spec,
        )
    raise KeyError(f)


def state_dtypes(cfg: dict, mamba_ssm_cache_dtype: str = "auto") -> list[str]:
    """The model dtype for the conv state (``mamba_cache_dtype`` auto), then:
    cite: vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateDtypeCalculator._mamba_state_dtype (mamba1, mamba2,
    GDN: the SSM dtype flag, auto -> the conv dtype; no MODELS_CONFIG_MAP hook for these architectures:
    vllm/model_executor/models/config.py::MODELS_CONFIG_MAP)
    cite: vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateDtypeCalculator.short_conv_state_dtype (conv only)
    cite: vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateDtypeCalculator.linear_attention_state_dtype (one
    state in the conv dtype)
    cite: vllm/model_executor/models/bailing_moe_v3.py::BailingMoeV3ForCausalLM.get_mamba_state_dtype_from_config
    (kda_state_dtype without the SSM flag: float32)"""
    f = family(cfg)
    model = text_config(cfg).get("torch_dtype") or cfg.get("torch_dtype") or "bfloat16"
    ssm = model if mamba_ssm_cache_dtype == "auto" else mamba_ssm_cache_dtype
    if f in ("lfm2", "lfm2_moe", "bailing_moe_linear"):
        return [model]
    if f == "bailing_moe_v3":
        return [model, "float32"]
    return [model, ssm]


def mamba_page_size(cfg: dict, tp: int, mamba_ssm_cache_dtype: str = "auto", num_spec: int = 0) -> int:
    """One state layer's bytes. cite: vllm/v1/kv_cache_interface.py::MambaSpec.page_size_bytes"""
    return sum(
        math.prod(s) * ITEMSIZE[d] for s, d in zip(state_shapes(cfg, tp, num_spec), state_dtypes(cfg, mamba_ssm_cache_dtype), strict=True)
    )


def layer_counts(cfg: dict) -> tuple[int, int]:
    """(attention layers, state layers) as each model class builds them.
    cite: vllm/model_executor/models/granitemoehybrid.py::GraniteMoeHybridModel (config.layer_types: mamba / attention,
    or transformers 5's linear_attention / full_attention)
    cite: vllm/model_executor/models/falcon_h1.py::FalconH1ParallelHybrid (attention and mamba in every layer)
    cite: vllm/model_executor/models/jamba.py::JambaModel (config.layers_block_type: transformers' JambaConfig makes
    layer i attention when i % attn_layer_period == attn_layer_offset)
    cite: vllm/model_executor/models/zamba2.py::Zamba2Model (mamba in every layer, attention in the hybrid ones)
    cite: vllm/model_executor/models/lfm2.py::Lfm2Model (layer_types full_attention / conv)
    cite: vllm/model_executor/models/bailing_moe_linear.py::is_linear_layer
    cite: vllm/model_executor/models/bailing_moe_v3.py::_is_kda_layer
    cite: vllm/model_executor/models/olmo_hybrid.py::OlmoHybridDecoderLayer (layer_types)"""
    f, c = family(cfg), text_config(cfg)
    n = c["num_hidden_layers"]
    if f == "granitemoehybrid":
        attn = sum(1 for t in c["layer_types"] if t in ("attention", "full_attention"))
        return attn, n - attn
    if f == "falcon_h1":
        return n, n
    if f == "jamba":
        attn = sum(1 for i in range(n) if i % c["attn_layer_period"] == c["attn_layer_offset"])
        return attn, n - attn
    if f in ("mamba", "mamba2"):
        return 0, n
    if f == "zamba2":
        return sum(1 for t in c["layers_block_type"] if t == "hybrid"), n
    if f in ("lfm2", "lfm2_moe", "olmo_hybrid"):
        attn = sum(1 for t in c["layer_types"] if t == "full_attention")
        return attn, n - attn
    g = c.get("layer_group_size", 1)
    if f == "bailing_moe_linear":
        lin = sum(1 for i in range(n) if g > 0 and (i + 1) % g != 0)
        return n - lin, lin
    if f == "bailing_moe_v3":
        lin = sum(1 for i in range(n) if not ((i + 1) % g == 0 or i >= n // g * g))
        return n - lin, lin
    raise KeyError(f)


def attn_page_size_1_token(cfg: dict, tp: int, cache_dtype: str) -> int:
    """cite: vllm/model_executor/models/zamba2.py::Zamba2Attention (Attention(num_attention_heads,
    attention_head_dim): no separate KV heads)
    cite: vllm/model_executor/models/bailing_moe_linear.py::BailingMoeV25MLAAttention (kv_lora_rank 512,
    qk_rope_head_dim 64 by default: one latent per token)
    cite: vllm/model_executor/models/bailing_moe_v3.py::BailingMoeV3MLAAttention
    others: 2 x max(1, kv_heads // tp) x head_dim (head_dim, else hidden // heads)"""
    f, c = family(cfg), text_config(cfg)
    size = ITEMSIZE[cache_dtype]
    if f in ("bailing_moe_linear", "bailing_moe_v3"):
        return (c.get("kv_lora_rank", 512) + c.get("qk_rope_head_dim", 64)) * size
    if f == "zamba2":
        return 2 * divide(c["num_attention_heads"], tp) * c["attention_head_dim"] * size
    heads = max(1, c["num_key_value_heads"] // tp)
    return 2 * heads * (c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]) * size


def checkpoint(cfg: dict, mode: str) -> tuple[int, int]:
    """(prefill checkpoint blocks, alignment) in align mode.
    cite: vllm/model_executor/layers/mamba/mamba_mixer2.py::MambaMixer2.get_kv_cache_spec (every Mamba2 mixer: 1, 1);
    the Mamba1 mixer, the short conv, the linear attention, Bailing V3's KDA and OLMo's GDN layer keep the base spec
    (vllm/model_executor/layers/mamba/abstract.py::MambaBase.get_kv_cache_spec: none)."""
    if mode != "align":
        return 0, 1
    return (1, 1) if family(cfg) in ("granitemoehybrid", "falcon_h1", "mamba2", "zamba2") else (0, 1)
