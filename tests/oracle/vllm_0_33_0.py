"""vLLM 0.33.0: the V1 hybrid KV/state block pool, step by step (default attention backends on Hopper, Blackwell
and the CPU build; the GDN prefill kernel as ``_resolve_gdn_prefill_backend`` picks it)."""

from __future__ import annotations

import math

from . import vllm_families as families
from .hf_config import ITEMSIZE, layer_counts, text_config


def cdiv(a: int, b: int) -> int:
    """cite: vllm/utils/math_utils.py::cdiv"""
    return -(a // -b)


def kind(cfg: dict) -> str:
    tc = text_config(cfg)
    if "linear_attn_config" in tc:
        return "kda"
    if "hybrid_override_pattern" in tc:
        return "mamba2"
    return "gdn"


def ssm_dtype(cfg: dict, mamba_ssm_cache_dtype: str = "auto") -> str:
    """cite: vllm/model_executor/models/config.py::Qwen3_5ForConditionalGenerationConfig.verify_and_update_config
    (auto <- text config mamba_ssm_dtype); ::NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype (auto <- hf
    mamba_ssm_cache_dtype, default float32); vllm/model_executor/layers/mamba/mamba_utils.py::
    MambaStateDtypeCalculator.kda_state_dtype (auto -> float32) and ::_mamba_state_dtype (auto -> conv dtype)."""
    if mamba_ssm_cache_dtype != "auto":
        return mamba_ssm_cache_dtype
    arch = (cfg.get("architectures") or [""])[0]
    k = kind(cfg)
    if arch.startswith("Qwen3_5") and text_config(cfg).get("mamba_ssm_dtype"):
        return text_config(cfg)["mamba_ssm_dtype"]
    if k == "mamba2":
        return cfg.get("mamba_ssm_cache_dtype", "float32")
    if k == "kda":
        return "float32"
    return text_config(cfg).get("torch_dtype") or cfg.get("torch_dtype") or "bfloat16"


def mamba_page_size(cfg: dict, tp: int, mamba_ssm_cache_dtype: str = "auto", num_spec: int = 0) -> int:
    """One mamba layer's state bytes (unpadded). cite: vllm/v1/kv_cache_interface.py::MambaSpec.page_size_bytes over
    vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateShapeCalculator.{gated_delta_net,mamba2,kda}_state_shape;
    conv dtype = model dtype (mamba_cache_dtype auto). The other families: vllm_families.py."""
    if families.family(cfg):
        return families.mamba_page_size(cfg, tp, mamba_ssm_cache_dtype, num_spec)
    tc = text_config(cfg)
    k = kind(cfg)
    if k == "gdn":
        conv_dim = tc["linear_key_head_dim"] * tc["linear_num_key_heads"] * 2 + tc["linear_value_head_dim"] * tc["linear_num_value_heads"]
        conv = (conv_dim // tp) * (tc["linear_conv_kernel_dim"] - 1 + num_spec)
        ssm = tc["linear_num_value_heads"] // tp * tc["linear_value_head_dim"] * tc["linear_key_head_dim"]
    elif k == "mamba2":
        g = tc["n_groups"]
        if g % tp:
            g += tp - g
        conv_dim = tc["mamba_num_heads"] * tc["mamba_head_dim"] + 2 * g * tc["ssm_state_size"]
        conv = conv_dim // tp * (tc["conv_kernel"] - 1 + num_spec)
        ssm = tc["mamba_num_heads"] // tp * tc["mamba_head_dim"] * tc["ssm_state_size"]
    else:
        lac = tc["linear_attn_config"]
        proj = lac["num_heads"] * lac["head_dim"]
        conv = (proj + 2 * proj) // tp * (lac["short_conv_kernel_size"] - 1 + num_spec)
        ssm = lac["num_heads"] // tp * lac["head_dim"] * lac["head_dim"]
    return conv * 2 + ssm * ITEMSIZE[ssm_dtype(cfg, mamba_ssm_cache_dtype)]


def attn_page_size_1_token(cfg: dict, tp: int, cache_dtype: str) -> int:
    """cite: vllm/platforms/interface.py::Platform._align_hybrid_block_size (MLAAttentionSpec / FullAttentionSpec
    with block_size=1): MLA (kv_lora_rank + qk_rope_head_dim) * dtype, one latent head; else 2 * heads * head * dtype."""
    if families.family(cfg):
        return families.attn_page_size_1_token(cfg, tp, cache_dtype)
    tc = text_config(cfg)
    size = ITEMSIZE[cache_dtype]
    if tc.get("kv_lora_rank"):
        return (tc["kv_lora_rank"] + tc["qk_rope_head_dim"]) * size
    heads = max(1, tc["num_key_value_heads"] // tp)
    return 2 * heads * tc["head_dim"] * size


def gdn_prefill_kernel(cfg: dict, platform: str = "hopper", requested: str = "auto", cuda_runtime_major: int = 13) -> str:
    """cite: vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py::_resolve_gdn_prefill_backend: not CUDA ->
    triton (the CPU build logs 'Using CPU GDN prefill kernel', ::_log_gdn_backend_decision); SM90 -> flashinfer
    (auto or flashinfer requested); SM10x / SM12x with head_k_dim == 128 and a CUDA runtime >= 13 -> flashinfer; else
    triton."""
    if platform == "cpu":
        return "cpu"
    if requested == "triton":
        return "triton"
    if platform == "hopper":
        return "flashinfer"
    if platform == "blackwell" and text_config(cfg).get("linear_key_head_dim") == 128 and cuda_runtime_major >= 13:
        return "flashinfer"
    return "triton"


def checkpoint(cfg: dict, mode: str, platform: str = "hopper", gdn_backend: str = "auto") -> tuple[int, int]:
    """(num_prefill_checkpoint_blocks, checkpoint alignment) of a mamba layer.
    cite: vllm/model_executor/layers/mamba/mamba_mixer2.py::MambaMixer2.get_kv_cache_spec (1, alignment None);
    vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py::QwenGatedDeltaNetAttention.get_kv_cache_spec
    (1 with the FlashInfer prefill, see gdn_prefill_kernel; vllm/v1/attention/backends/gdn_attn.py::
    FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64; none with Triton or on the CPU);
    vllm/models/kimi_k3/nvidia/kda.py::is_flashkda_supported (needs gate_lower_bound; else triton, none)."""
    if families.family(cfg):
        return families.checkpoint(cfg, mode)
    if mode != "align":
        return 0, 1
    k = kind(cfg)
    if k == "mamba2":
        return 1, 1
    if k == "gdn":
        return (1, 64) if gdn_prefill_kernel(cfg, platform, gdn_backend) == "flashinfer" else (0, 1)
    lac = text_config(cfg)["linear_attn_config"]
    if lac.get("gate_lower_bound") is not None and lac["head_dim"] == 128:
        return 1, 16
    return 0, 1


def size_pool(
    cfg: dict,
    *,
    available_memory: int,
    tp: int = 1,
    cache_dtype: str = "bfloat16",
    mamba_ssm_cache_dtype: str = "auto",
    enable_prefix_caching: bool = True,
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    platform: str = "hopper",
    gdn_backend: str = "auto",
    gpu_block_size: int = 16,
) -> dict:
    """cite: vllm/model_executor/models/config.py::MambaModelConfig.verify_and_update_config (prefix caching ->
    mode align; vllm/config/model.py::ModelConfig.is_prefix_caching_supported is True for generative hybrids);
    vllm/platforms/interface.py::Platform._align_hybrid_block_size (kernel block 16 for FlashAttention, >=128 for
    MLA, lcm with the checkpoint alignment in align mode); vllm/v1/core/kv_cache_planning.py::
    _get_kv_cache_groups_uniform_page_size (group size, 1.5x rule); ::get_kv_cache_config_from_groups
    (num_blocks = available_memory // bytes_per_block); vllm/v1/kv_cache_interface.py::MambaSpec.max_memory_usage_bytes.
    Platforms: GPUs start from vllm/config/cache.py::CacheConfig.DEFAULT_BLOCK_SIZE (16), which the default GQA
    backends take (FLASH_ATTN on Hopper; FLASHINFER on Blackwell, vllm/platforms/cuda.py::_get_backend_priorities,
    kernel blocks [16, 32, 64] from vllm/v1/attention/backends/flashinfer.py::get_supported_kernel_block_sizes, so
    vllm/v1/attention/backend.py::AttentionBackend.get_preferred_block_size keeps 16). The CPU build starts from 128
    (vllm/platforms/cpu.py::CpuPlatform.update_block_size_for_backend) with CPU_ATTN's MultipleOf(32) kernel block
    (vllm/v1/attention/backends/cpu_attn.py), and stores the SSM state in float32 on CPUs with AVX512-BF16
    (vllm/platforms/cpu.py::CpuPlatform.check_and_update_config, 'Reset SSM cache type to float32'); its default
    max_num_seqs is 128 (vllm/engine/arg_utils.py::EngineArgs.get_batch_defaults, OPENAI_API_SERVER).
    ``gpu_block_size``: CacheConfig.DEFAULT_BLOCK_SIZE, 16 in 0.33.0 (0.34.0 passes its 64: vllm_0_34_0.py)."""
    mode = "align" if enable_prefix_caching else "none"
    tc = text_config(cfg)
    if max_model_len is None:
        max_model_len = tc["max_position_embeddings"]
    if platform == "cpu":
        if mamba_ssm_cache_dtype == "auto":
            mamba_ssm_cache_dtype = "float32"
        if max_num_seqs is None:
            max_num_seqs = 128 * tp
    ck_blocks, ck_align = checkpoint(cfg, mode, platform, gdn_backend)
    mamba_page = mamba_page_size(cfg, tp, mamba_ssm_cache_dtype)
    attn1 = attn_page_size_1_token(cfg, tp, cache_dtype)
    block_size = 128 if platform == "cpu" else gpu_block_size
    kernel_block = 32 if platform == "cpu" else 16
    kernel_align = max(kernel_block, block_size)
    if tc.get("kv_lora_rank"):
        kernel_align = max(kernel_align, 128)
    if mode == "align":
        kernel_align = math.lcm(kernel_align, ck_align)
    attn_block = kernel_align * cdiv(mamba_page, kernel_align * attn1)
    attn_block = kernel_block * cdiv(attn_block, kernel_block)
    block_size = max(block_size, attn_block)
    page = block_size * attn1
    n_attn, n_mamba = families.layer_counts(cfg) if families.family(cfg) else layer_counts(cfg)
    lo, hi = min(n_attn, n_mamba), max(n_attn, n_mamba)
    group_size = hi if hi < lo * 1.5 else lo
    g_attn, g_mamba = cdiv(n_attn, group_size), cdiv(n_mamba, group_size)
    bytes_per_block = group_size * page
    num_blocks = available_memory // bytes_per_block
    per_req_mamba = (2 + ck_blocks) if mode == "align" else 1
    attn_blocks = cdiv(max_model_len, block_size)
    concurrency = num_blocks / (g_attn * attn_blocks + g_mamba * per_req_mamba)
    mamba_bound = num_blocks // (g_mamba * per_req_mamba)
    cap = min(x for x in (mamba_bound, max_num_seqs, math.floor(concurrency)) if x is not None)
    return {
        "mode": mode,
        "mamba_page": mamba_page,
        "block_size": block_size,
        "page_bytes": page,
        "group_size": group_size,
        "n_attn_groups": g_attn,
        "n_mamba_groups": g_mamba,
        "num_blocks": num_blocks,
        "blocks_per_request": per_req_mamba,
        "max_concurrency": concurrency,
        "kv_cache_tokens": int(concurrency * max_model_len),
        "mamba_bound_concurrency": mamba_bound,
        "cap": cap,
    }
