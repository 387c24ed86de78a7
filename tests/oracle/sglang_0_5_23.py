"""SGLang 0.5.23: mamba/KV pool sizing for hybrid linear-attention models, step by step (Hopper defaults)."""

from __future__ import annotations

import math

from . import sglang_families as families
from .hf_config import ITEMSIZE, text_config
from .hf_config import layer_counts as linear_layer_count

GB = 1 << 30


def family(cfg: dict) -> str:
    arch = (cfg.get("architectures") or [""])[0]
    tc = text_config(cfg)
    if "linear_attn_config" in tc:
        return "kimi"
    if "hybrid_override_pattern" in tc:
        return "nemotron_h"
    if arch.startswith("Qwen3_5"):
        return "qwen3_5"
    return "qwen3_next"


def extra_groups_for_head_shards(ngroups: int, tp: int) -> int:
    """cite: sglang/srt/configs/mamba_utils.py::extra_groups_for_head_shards"""
    if ngroups % tp == 0:
        return 0
    return tp - ngroups


def divide(a: int, b: int) -> int:
    """cite: sglang/srt/distributed/utils.py::divide (asserts divisibility)"""
    assert a % b == 0, (a, b)
    return a // b


def mamba2_state_shape(tp, intermediate_size, n_groups, num_heads, head_dim, state_size, conv_kernel):
    """cite: sglang/srt/configs/mamba_utils.py::Mamba2StateShape.create"""
    if n_groups % tp != 0:
        n_groups += extra_groups_for_head_shards(n_groups, tp)
    conv_dim = intermediate_size + 2 * n_groups * state_size
    conv = [(divide(conv_dim, tp), conv_kernel - 1)]
    temporal = (divide(num_heads, tp), head_dim, state_size)
    return conv, temporal


def kimi_state_shape(tp, num_heads, head_dim, conv_kernel):
    """cite: sglang/srt/configs/mamba_utils.py::KimiLinearStateShape.create (num_k_heads/head_k_dim default to
    num_heads/head_dim: sglang/srt/configs/kimi_linear.py::KimiLinearConfig.mamba2_cache_params passes neither)"""
    proj = num_heads * head_dim
    conv = [(conv_kernel - 1, divide(proj, tp) + divide(proj, tp) * 2)]
    temporal = (divide(num_heads, tp), head_dim, head_dim)
    return conv, temporal


def ssm_dtype(cfg: dict, mamba_ssm_dtype_arg: str | None) -> str:
    """cite: sglang/srt/configs/mamba_utils.py::mamba2_state_dtype (default float32 <- config mamba_ssm_dtype,
    text_config first <- SGLANG_MAMBA_SSM_DTYPE, which sglang/srt/arg_groups/serving_hook.py sets from
    --mamba-ssm-dtype). cite: sglang/srt/configs/kimi_linear.py::KimiLinearConfig.mamba2_cache_params passes no
    config (the dataclass default mamba2_state_dtype(None)), so Kimi reads no config dtype."""
    if mamba_ssm_dtype_arg is not None:
        return mamba_ssm_dtype_arg
    if family(cfg) == "kimi":
        return "float32"
    tc = cfg.get("text_config")
    if isinstance(tc, dict) and "mamba_ssm_dtype" in tc:
        v = tc["mamba_ssm_dtype"]
    else:
        v = cfg.get("mamba_ssm_dtype")
    return v if v in ("float32", "bfloat16", "float16") else "float32"


def mamba_cache_per_req(cfg: dict, tp: int, mamba_ssm_dtype_arg: str | None) -> int:
    """cite: sglang/srt/configs/mamba_utils.py::BaseLinearStateParams.mamba_cache_per_req (conv bf16 by default:
    SGLANG_MAMBA_CONV_DTYPE; times the number of linear layers). The other families: sglang_families.py."""
    if families.family(cfg):
        cfg_dtype = ssm_dtype(cfg, mamba_ssm_dtype_arg) if families.reads_config_dtype(cfg) else (mamba_ssm_dtype_arg or "float32")
        return families.mamba_cache_per_req(cfg, tp, cfg_dtype)
    tc = text_config(cfg)
    fam = family(cfg)
    if fam == "kimi":
        lac = tc["linear_attn_config"]
        conv, temporal = kimi_state_shape(tp, lac["num_heads"], lac["head_dim"], lac["short_conv_kernel_size"])
    elif fam == "nemotron_h":
        conv, temporal = mamba2_state_shape(
            tp,
            tc["mamba_num_heads"] * tc["mamba_head_dim"],
            tc["n_groups"],
            tc["mamba_num_heads"],
            tc["mamba_head_dim"],
            tc["ssm_state_size"],
            tc["conv_kernel"],
        )
    else:  # cite: sglang/srt/configs/qwen3_next.py::Qwen3NextConfig.mamba2_cache_params
        conv, temporal = mamba2_state_shape(
            tp,
            tc["linear_value_head_dim"] * tc["linear_num_value_heads"],
            tc["linear_num_key_heads"],
            tc["linear_num_value_heads"],
            tc["linear_value_head_dim"],
            tc["linear_key_head_dim"],
            tc["linear_conv_kernel_dim"],
        )
    conv_numel = sum(math.prod(c) for c in conv)
    ssm_numel = math.prod(temporal)
    _, n_lin = linear_layer_count(cfg)
    return (conv_numel * 2 + ssm_numel * ITEMSIZE[ssm_dtype(cfg, mamba_ssm_dtype_arg)]) * n_lin


def cell_size(cfg: dict, tp: int, kv_dtype: str) -> int:
    """KV bytes per token per rank. cite: sglang/srt/model_executor/pool_configurator.py::
    DefaultPoolConfigurator._compute_cell_size (MLA: calculate_mla_kv_cache_dim = kv_lora_rank + qk_rope_head_dim,
    sglang/srt/mem_cache/kv_cache_configurator.py::calculate_mla_kv_cache_dim; else
    get_num_kv_heads(tp) * (head_dim + v_head_dim)); num_layers = full attention layers (DefaultPoolConfigurator.__init__)"""
    if families.family(cfg):
        return families.cell_size(cfg, tp, kv_dtype)
    tc = text_config(cfg)
    full, _ = linear_layer_count(cfg)
    size = ITEMSIZE[kv_dtype]
    if tc.get("kv_lora_rank"):
        return (tc["kv_lora_rank"] + tc["qk_rope_head_dim"]) * full * size
    heads = max(1, tc["num_key_value_heads"] // tp)  # cite: sglang/srt/configs/model_config.py::ModelConfig.get_num_kv_heads
    hd = tc.get("head_dim") or tc["hidden_size"] // tc["num_attention_heads"]
    return heads * (hd + hd) * full * size


def context_len(cfg: dict, context_length_arg: int | None) -> int:
    """cite: sglang/srt/utils/hf_transformers/common.py::get_context_length (CONTEXT_LENGTH_KEYS, default 2048)"""
    if context_length_arg:
        return context_length_arg
    tc = text_config(cfg)
    for k in ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"):
        if tc.get(k) is not None:
            return int(tc[k])
    return 2048


def mamba_ratio(*, disable_radix_cache: bool, strategy: str, overlap: bool, skip_decode_lock: bool) -> int:
    """cite: sglang/srt/mem_cache/kv_cache_configurator.py::KVCacheConfigurator._calculate_mamba_ratio with
    MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO=3, MAMBA_CACHE_BASE_RATIO_DROP_ON_SKIP=1,
    MAMBA_CACHE_V2_ADDITIONAL_RATIO_NO_BUFFER=1 and sglang/srt/mem_cache/allocation_sizing.py::get_mamba_tracking_slots"""
    if disable_radix_cache:
        return 1
    base = 3 - (1 if skip_decode_lock else 0)
    extra = strategy in ("extra_buffer", "extra_buffer_lazy")
    lazy = strategy == "extra_buffer_lazy"
    if extra:
        add = 1 if lazy else (2 if overlap else 1)
    elif skip_decode_lock:
        add = 1
    else:
        add = 0
    return base + add


def size_pools(
    cfg: dict,
    *,
    rest_gb: float,
    tp: int = 1,
    kv_dtype: str = "bfloat16",
    mamba_ssm_dtype: str | None = None,
    mamba_full_memory_ratio: float = 0.9,
    max_mamba_cache_size: int | None = None,
    max_running_requests: int | None = None,
    context_length: int | None = None,
    strategy: str = "extra_buffer",
    overlap: bool = True,
    skip_decode_lock: bool = False,
    page_size: int = 1,
) -> dict:
    """``rest_gb`` is ``_profile_available_bytes``' rest_memory before the mamba split, in SGLang GB (2**30).

    cite: sglang/srt/mem_cache/kv_cache_configurator.py::KVCacheConfigurator._handle_max_mamba_cache (no spec
    decoding, PP 1, attn DP 1); ::_profile_available_bytes (int(rest_memory * (1 << 30)));
    sglang/srt/model_executor/pool_configurator.py::DefaultPoolConfigurator.calculate_pool_sizes (tokens =
    bytes // cell_size, floored to page_size); ::resolve_max_num_reqs."""
    disable = strategy == "disable"
    per_req = mamba_cache_per_req(cfg, tp, mamba_ssm_dtype)
    if max_mamba_cache_size is not None:
        K = max_mamba_cache_size
    elif disable and max_running_requests is not None:
        K = max(1, max_running_requests)
    else:
        budget = rest_gb * mamba_full_memory_ratio / (1 + mamba_full_memory_ratio)
        K = int((budget * GB - per_req) // per_req)
    assert K > 0
    rest_after = rest_gb - (K + 1) * per_req / GB
    available = int(rest_after * GB)
    cs = cell_size(cfg, tp, kv_dtype)
    tokens = available // cs
    tokens = tokens // page_size * page_size
    ratio = mamba_ratio(disable_radix_cache=disable, strategy=strategy, overlap=overlap, skip_decode_lock=skip_decode_lock)
    ctx = context_len(cfg, context_length)
    estimated = int(tokens / ctx * 512)
    estimated = max(min(estimated, 4096), 2048)
    if max_running_requests is not None:
        n = min(max(1, max_running_requests), tokens // 2)
    else:
        n = min(estimated, tokens // 2)
    mamba_cap = K // ratio
    n = min(n, mamba_cap)
    return {
        "mamba_cache_per_req": per_req,
        "kv_bytes_per_token": cs,
        "max_mamba_cache_size": K,
        "slots_per_request": ratio,
        "max_total_num_tokens": tokens,
        "mamba_cap": mamba_cap,
        "max_running_requests": n,
        "context_len": ctx,
    }
