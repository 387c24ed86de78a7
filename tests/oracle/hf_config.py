"""What both engines read the same way from a Hugging Face config dict: the text part and the layer counts.

Shared by the two oracle modules only (still no code from ``exporter.capacity``): SGLang and vLLM derive these two
facts identically, so one transcription serves both and each engine module keeps its own steps.
"""

from __future__ import annotations

ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}


def text_config(cfg: dict) -> dict:
    """cite: sglang/srt/configs/kimi_k3.py::KimiK3Config (text_config built as KimiLinearConfig); Qwen3.5 keeps its
    text part in text_config the same way (sglang/srt/configs/qwen3_5.py::Qwen3_5Config)."""
    tc = cfg.get("text_config")
    return tc if isinstance(tc, dict) else cfg


def layer_counts(cfg: dict) -> tuple[int, int]:
    """(full attention layers, linear layers). cite: sglang/srt/configs/kimi_linear.py::KimiLinearConfig.is_kda_layer
    and vllm/transformers_utils/configs/kimi_linear.py::KimiLinearConfig.is_kda_layer (1-based kda_layers);
    sglang/srt/configs/nemotron_h.py::NemotronHConfig.mamba_layer_ids ('M' mamba, '*' attention);
    sglang/srt/configs/qwen3_next.py::Qwen3NextConfig.layers_block_type (layer_types, else (i+1) % interval == 0
    is attention)"""
    tc = text_config(cfg)
    n = tc["num_hidden_layers"]
    if "linear_attn_config" in tc:
        kda = set(tc["linear_attn_config"]["kda_layers"])
        lin = sum(1 for i in range(n) if (i + 1) in kda)
        return n - lin, lin
    if "hybrid_override_pattern" in tc:
        pat = tc["hybrid_override_pattern"]
        return pat.count("*"), pat.count("M")
    if "layer_types" in tc:
        lt = tc["layer_types"]
        full = sum(1 for t in lt if t == "full_attention")
        return full, len(lt) - full
    iv = tc["full_attention_interval"]
    full = sum(1 for i in range(n) if (i + 1) % iv == 0)
    return full, n - full
