"""The configuration a server logs (``server_args=...``, vLLM's ``non-default args``, its config
lines): the keys the state keeps, and how a logged value reads. The values arrive as the engine
printed them (``True``, ``'true'``, ``1``, ``'None'``, ``'auto'``, a number as text), so every
reader of the configuration (the facts, the flag catalogue's gates) reads them through these.
"""

from __future__ import annotations

# server_args / non-default args keys kept for the info metric and the rules
CONFIG_KEYS = (
    "model_path",
    "model",
    "served_model_name",
    "tp_size",
    "tensor_parallel_size",
    "dp_size",
    "data_parallel_size",
    "pp_size",
    "pipeline_parallel_size",
    "ep_size",
    "enable_dp_attention",
    "kv_cache_dtype",
    "mamba_ssm_dtype",
    "mamba_ssm_cache_dtype",
    "mamba_cache_dtype",
    "mamba_radix_cache_strategy",
    "mamba_scheduler_strategy",
    "mamba_cache_mode",
    "mamba_full_memory_ratio",
    "max_mamba_cache_size",
    "max_running_requests",
    "max_total_tokens",
    "max_num_seqs",
    "max_model_len",
    "max_seq_len",
    "context_length",
    "disable_radix_cache",
    "disable_overlap_schedule",
    "enable_prefix_caching",
    "enable_unified_memory",
    "enable_hierarchical_cache",
    "speculative_algorithm",
    "speculative_num_draft_tokens",
    "speculative_config",
    "disaggregation_mode",
    "decode_context_parallel_size",
    "dcp_size",
    "enable_linear_replayssm",
    "enable_linear_replayssm_spec",
    "language_model_only",
    "gpu_memory_utilization",
    # what vLLM's defaults rest on (exporter/capacity/defaults.py): the extensible KV cache (0.34), max_num_seqs' limits
    "enable_extensible_kv_cache",
    "kv_cache_memory_bytes",
    "performance_mode",
    "max_num_batched_tokens",
    "mem_fraction_static",
    "dtype",
    "quantization",
    "page_size",
    "chunked_prefill_size",
    # what the unified-memory gates read (exporter/advice/flags.py: the backends and features each release refuses)
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "device",
    "linear_attn_backend",
    "mamba_backend",
    "enable_lmcache",
    "enable_two_batch_overlap",
    "disaggregation_transfer_backend",
    "speculative_eagle_topk",
    "device_config",
)


def truthy(v: object) -> bool:
    """A switch as logged: ``True``, ``1``, ``'true'``, ``'yes'``, ``'on'`` (any case)."""
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes", "on")
    return bool(v)


def number(v: object) -> float | None:
    """A number as logged (an int, a float, or their text); None for a switch, nothing, or other text."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(str(v))
    except ValueError:
        return None


def unset(v: object) -> bool:
    """Whether a logged value means "not set": nothing, ``''``, ``None``, ``'none'``, ``'null'``, ``'auto'``."""
    return v in (None, "", "None", "none", "null", "auto")


__all__ = ["CONFIG_KEYS", "number", "truthy", "unset"]
