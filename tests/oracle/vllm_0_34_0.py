"""vLLM 0.34.0: the V1 hybrid block pool, the defaults the exporter assumes, and what the extensible KV cache
measures after warmup. Written from the 0.34.0 wheel, against the 0.33.0 transcription (vllm_0_33_0.py).

Compared with 0.33.0, function by function (``make oracle`` checks every ``cite:`` against the 0.34.0 wheel, and
every ``same since 0.33.0:`` line as the same source in both wheels):

* unchanged, so the 0.33.0 steps serve as they are:
  same since 0.33.0: vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateShapeCalculator
  same since 0.33.0: vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateDtypeCalculator
  same since 0.33.0: vllm/model_executor/models/config.py::MambaModelConfig.verify_and_update_config
  same since 0.33.0: vllm/model_executor/models/config.py::Qwen3_5ForConditionalGenerationConfig.verify_and_update_config
  same since 0.33.0: vllm/model_executor/models/config.py::NemotronHForCausalLMConfig
  same since 0.33.0: vllm/model_executor/layers/mamba/mamba_mixer2.py::MambaMixer2.get_kv_cache_spec
  same since 0.33.0: vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py::QwenGatedDeltaNetAttention.get_kv_cache_spec
  same since 0.33.0: vllm/model_executor/layers/mamba/abstract.py::get_mamba_prefill_checkpoint_alignment
  same since 0.33.0: vllm/models/kimi_k3/nvidia/kda.py::is_flashkda_supported
  same since 0.33.0: vllm/v1/core/kv_cache_planning.py::_get_kv_cache_groups_uniform_page_size
  same since 0.33.0: vllm/v1/core/kv_cache_utils.py::get_kv_cache_capacity
  same since 0.33.0: vllm/v1/core/kv_cache_utils.py::get_max_concurrency_for_kv_cache_config
  same since 0.33.0: vllm/config/model.py::ModelConfig.is_prefix_caching_supported
  same since 0.33.0: vllm/platforms/cpu.py::CpuPlatform.update_block_size_for_backend
  same since 0.33.0: vllm/platforms/cuda.py::_get_backend_priorities
  same since 0.33.0: vllm/v1/attention/backend.py::AttentionBackend.get_preferred_block_size
  same since 0.33.0: vllm/engine/arg_utils.py::EngineArgs.get_batch_defaults
  same since 0.33.0: vllm/engine/arg_utils.py::EngineArgs._set_default_max_num_seqs_and_batched_tokens_args
* changed, with the same arithmetic for what the exporter sizes: vllm/v1/kv_cache_interface.py::MambaSpec gains
  ``state_alignment``, which rounds each state up to 16 bytes only with FlashInfer's ReplaySSM
  (vllm/model_executor/layers/mamba/mamba_utils.py::mamba_state_alignment; 1 otherwise, and every state size here is
  a multiple of 16 anyway); vllm/platforms/interface.py::Platform._align_hybrid_block_size passes it on;
  vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py::_resolve_gdn_prefill_backend adds a HIP kernel (ROCm
  RDNA3.5) and CuteDSL on SM11x, on request only: Hopper and SM100 pick as in 0.33.0;
  vllm/v1/core/kv_cache_planning.py::get_kv_cache_config_from_groups lays the tensors out per layer spec, the block
  count is still ``available_memory // bytes_per_block`` (vllm/v1/core/kv_cache_planning.py::get_kv_cache_configs).
* changed: the GPUs' default block size, 16 -> 64 (:func:`size_pool`), and ``gpu_memory_utilization``'s default
  (:func:`resolved_gpu_memory_utilization`).
* new: the extensible KV cache, sized from the memory measured after CUDA-graph capture and warmup
  (:func:`measure_kv_cache_bytes`, :func:`withheld_bytes`); a plan from a config cannot know those measurements.
"""

from __future__ import annotations

import math

from . import vllm_0_33_0 as v33

RELEASE = "0.34.0"
GiB = 1 << 30
DEFAULT_BLOCK_SIZE = 64
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92

# the 0.33.0 steps whose engine functions are the same source in 0.34.0 (above)
mamba_page_size = v33.mamba_page_size
attn_page_size_1_token = v33.attn_page_size_1_token
checkpoint = v33.checkpoint
gdn_prefill_kernel = v33.gdn_prefill_kernel


def size_pool(cfg: dict, **kw) -> dict:
    """The 0.33.0 steps with 0.34.0's default block size. cite: vllm/config/cache.py::CacheConfig.DEFAULT_BLOCK_SIZE
    (64; 16 in 0.33.0), set by vllm/config/cache.py::CacheConfig._apply_block_size_default and kept by every default
    GQA backend (vllm/platforms/interface.py::Platform._preferred_block_size_for_backends: FLASH_ATTN's MultipleOf(16)
    and FlashInfer's 16/32/64 take 64), so vllm/platforms/interface.py::Platform._align_hybrid_block_size starts
    from max(kernel block, 64): a hybrid's attention block is a multiple of 64 on GPUs in both mamba cache modes.
    The CPU build keeps 128 (vllm/platforms/cpu.py::CpuPlatform.update_block_size_for_backend)."""
    return v33.size_pool(cfg, gpu_block_size=DEFAULT_BLOCK_SIZE, **kw)


def resolved_gpu_memory_utilization(gpu_memory_utilization: float | None, enable_extensible_kv_cache: bool) -> float:
    """cite: vllm/config/cache.py::CacheConfig.resolved_gpu_memory_utilization: the flag when set, else 1.0 with the
    extensible KV cache, else vllm/config/cache.py::CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION (0.92)."""
    if gpu_memory_utilization is not None:
        return gpu_memory_utilization
    return 1.0 if enable_extensible_kv_cache else DEFAULT_GPU_MEMORY_UTILIZATION


def request_memory(total_memory: int, gpu_memory_utilization: float) -> int:
    """cite: vllm/v1/worker/utils.py::request_memory: ``ceil(total_memory x utilization)``, the budget the warnings
    name ('caps this instance at R GiB', 'fit within the requested R GiB')."""
    return math.ceil(total_memory * gpu_memory_utilization)


MARGIN_FLOOR = 1 << 30  # CUDA; ROCm 3 GiB. cite: vllm/v1/worker/extensible_kv_cache.py::KV_CACHE_MARGIN_FLOOR_BYTES
MARGIN_FRACTION = 0.75  # cite: vllm/v1/worker/extensible_kv_cache.py::KV_CACHE_MARGIN_FRACTION


def measure_kv_cache_bytes(
    *,
    init_free_memory: int,
    free_memory: int,
    committed_bytes: int,
    requested_memory: int,
    transient_peak_bytes: int = 0,
    torch_reserve_growth_bytes: int = 0,
) -> int:
    """cite: vllm/v1/worker/extensible_kv_cache.py::measure_kv_cache_bytes: what the KV cache may take after warmup:
    the budget less what the engine holds besides the committed KV prefix, at most the device headroom less a
    margin, less the larger transient."""
    non_kv_used = init_free_memory - free_memory - committed_bytes
    headroom = free_memory + committed_bytes
    margin = max(MARGIN_FLOOR, int(transient_peak_bytes * MARGIN_FRACTION))
    available = min(requested_memory - non_kv_used, headroom - margin)
    available -= max(transient_peak_bytes, torch_reserve_growth_bytes)
    return max(available, 0)


def withheld_bytes(gpu_memory_utilization: float | None, *, total_memory: int, **measured: int) -> int | None:
    """The figure of the cap warning (cite: vllm/v1/worker/extensible_kv_cache.py::measure_kv_cache_blocks): for
    0.7 < utilization < 1.0, what a budget of all memory free at startup gives the KV cache beyond the capped one;
    logged when >= 1 GiB. None where no warning is printed."""
    if gpu_memory_utilization is None or not 0.7 < gpu_memory_utilization < 1.0:
        return None
    capped = measure_kv_cache_bytes(requested_memory=request_memory(total_memory, gpu_memory_utilization), **measured)
    free = measure_kv_cache_bytes(requested_memory=measured["init_free_memory"], **measured)
    w = free - capped
    return w if w >= GiB else None


def default_max_num_seqs(
    *, device_memory: int, device_name: str, is_gb10: bool = False, cpu: bool = False, world_size: int = 1, throughput: bool = False
) -> int:
    """The API server's max_num_seqs when the flag is unset. cite: vllm/engine/arg_utils.py::EngineArgs.get_batch_defaults
    (>= 160 GiB: 1024; >= 70 GiB and no 'a100' in the device name and not a GB10: 1024; else 256; the CPU build 128 x
    world); vllm/engine/arg_utils.py::EngineArgs._set_default_max_num_seqs_and_batched_tokens_args (x2 in throughput
    mode; at most max_num_batched_tokens, whose defaults, 2048 and up, never bind these)."""
    large = device_memory >= 160 * GiB or (device_memory >= 70 * GiB and "a100" not in device_name.lower() and not is_gb10)
    if cpu:
        n = 128 * world_size
    else:
        n = 1024 if large else 256
    return n * 2 if throughput else n
