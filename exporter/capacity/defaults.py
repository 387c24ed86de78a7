"""The engines' defaults by release: every value the exporter assumes where the log does not say it.

One table (:data:`TABLE`), one row per default and release range, each citing where the engine sets it; the
functions below read the table for the values the code needs (the request cap of a vLLM server that did not set
``--max-num-seqs``, the ``gpu_memory_utilization`` in force, vLLM's default block size, SGLang's
``--mamba-full-memory-ratio``...), so a release that changes a default is one row here. ``docs/metrics.md``
(``make docs``) prints the table: which facts can be defaults, and what each one rests on.

A default that depends on what the log does not show (vLLM's ``max_num_seqs`` depends on the GPU's memory and
name) is *unknown* here (``None``): the exporter then exports no value rather than a guess, and says why.

Leaf module: it imports nothing of the project but the release parser, so every layer may read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .version import parse_version

GIB = 1 << 30


@dataclass(frozen=True)
class Default:
    engine: str
    key: str  # the engine's configuration key (its flag without the dashes)
    releases: str  # the releases the row holds for (inclusive)
    value: str  # the default, in words
    source: str  # where the engine sets it (file::function of the released wheel)
    exported: str = ""  # what shows it: a series (with basis="default"), or what rests on it


VLLM, SGLANG = "vllm", "sglang"

TABLE: tuple[Default, ...] = (
    Default(
        VLLM,
        "gpu_memory_utilization",
        "0.2-0.19",
        "0.9",
        "vLLM release notes (not re-checked in a wheel)",
        "the --gpu-memory-utilization advice (exporter/advice/flags.py)",
    ),
    Default(VLLM, "gpu_memory_utilization", "0.20-0.33", "0.92", "vllm/config/cache.py::CacheConfig.gpu_memory_utilization (0.33.0)"),
    Default(
        VLLM,
        "gpu_memory_utilization",
        "0.34-",
        "unset: 1.0 with the extensible KV cache (CUDA, ROCm), 0.92 without it (--no-enable-extensible-kv-cache, "
        "--kv-cache-memory-bytes, other platforms, a driver without VMM)",
        "vllm/config/cache.py::CacheConfig.resolved_gpu_memory_utilization",
    ),
    Default(
        VLLM,
        "enable_extensible_kv_cache",
        "0.34-",
        "on for CUDA and ROCm unless --kv-cache-memory-bytes is set; the KV cache is sized after CUDA-graph capture and "
        "warmup (`Available KV cache memory` is then an estimate)",
        "vllm/config/cache.py::CacheConfig.enable_extensible_kv_cache",
        "which line gives the final kv_capacity_bytes (docs/formats/vllm.md)",
    ),
    Default(
        VLLM,
        "max_num_seqs",
        "0.2-0.7",
        "256 (V0)",
        "vLLM release notes (not re-checked in a wheel)",
        "max_running_requests (basis=default)",
    ),
    Default(VLLM, "max_num_seqs", "0.8.0-0.8.4", "1024", "vLLM release notes (not re-checked in a wheel)"),
    Default(VLLM, "max_num_seqs", "0.8.5", "1024 on a GPU with >= 70 GiB, else 256", "vLLM release notes (not re-checked in a wheel)"),
    Default(
        VLLM,
        "max_num_seqs",
        "0.9-",
        "1024 on a GPU with >= 70 GiB that is not an A100 (nor a GB10, 0.3x), 1024 on >= 160 GiB (0.30+), else 256; "
        "x2 with --performance-mode throughput (0.30+); at most max_num_batched_tokens. Known from the log only when it "
        "shows the device's memory (`Free memory on device (F/T GiB)`, 0.34's cap warning) and, between 70 and 128 GiB, "
        "that the GPU is no A100 or GB10 (the FlashInfer GDN prefill kernel runs on SM90 and later)",
        "vllm/engine/arg_utils.py::EngineArgs.get_batch_defaults",
        "max_running_requests (basis=default); absent when the log does not tell",
    ),
    Default(
        VLLM,
        "max_num_seqs",
        "0.30- (CPU build)",
        "128 x TP x PP",
        "vllm/engine/arg_utils.py::EngineArgs.get_batch_defaults",
        "max_running_requests (basis=default)",
    ),
    Default(
        VLLM,
        "block_size",
        "-0.33",
        "16 on GPUs, 128 on the CPU build",
        "vllm/config/cache.py::CacheConfig.DEFAULT_BLOCK_SIZE; vllm/platforms/cpu.py::CpuPlatform.update_block_size_for_backend",
        "plan: the hybrid attention block (a multiple of max(kernel block, block size))",
    ),
    Default(VLLM, "block_size", "0.34-", "64 on GPUs, 128 on the CPU build", "vllm/config/cache.py::CacheConfig.DEFAULT_BLOCK_SIZE"),
    Default(
        VLLM,
        "enable_prefix_caching",
        "0.26-",
        "on for hybrid models (mamba cache mode align); off up to 0.25",
        "vllm/config/model.py::ModelConfig.is_prefix_caching_supported",
        "plan and the advice: state blocks per request",
    ),
    Default(VLLM, "kv_cache_dtype", "all", "auto: the model's dtype", "vllm/config/cache.py::CacheConfig.cache_dtype", "the fp8 KV advice"),
    Default(
        VLLM,
        "mamba_ssm_cache_dtype",
        "0.10.1-",
        "auto: the mamba cache dtype; float32 for Nemotron-H and Kimi's KDA, the config's mamba_ssm_dtype for Qwen3.5+",
        "vllm/model_executor/models/config.py::MambaModelConfig.verify_and_update_config",
        "the SSM-dtype advice",
    ),
    Default(
        VLLM,
        "max_model_len",
        "all",
        "the model's context length; `auto` (0.14+) fits it to the KV cache (0.34: fitted again after warmup)",
        "vllm/v1/core/kv_cache_planning.py::_auto_fit_max_model_len",
        "context_length_tokens (always from a logged line)",
    ),
    Default(
        SGLANG,
        "mamba_full_memory_ratio",
        "0.5.3.post3-",
        "0.9",
        "sglang/srt/arg_groups/fields/schedule.py (fallback=0.9; 0.5.23)",
        "the --mamba-full-memory-ratio advice and plan",
    ),
    Default(
        SGLANG,
        "max_running_requests",
        "all",
        "clamp(max_total_num_tokens / context_len x 512, 2048, 4096), then the pools' limits",
        "sglang/srt/model_executor/pool_configurator.py::_resolve_max_running_requests_per_worker (0.5.23)",
        "requested_max_running_requests when SGLang logs no summary",
    ),
    Default(
        SGLANG,
        "mamba_ssm_dtype",
        "all",
        "the model config's mamba_ssm_dtype, float32 on public checkpoints (Kimi's KDA: always float32)",
        "sglang/srt/configs/mamba_utils.py::mamba2_state_dtype (0.5.23)",
        "the SSM-dtype advice",
    ),
)

# --------------------------------------------------------------------------------------------
# the values the code reads (each from the rows above)

SGLANG_MAMBA_FULL_MEMORY_RATIO = 0.9
VLLM_V0_MAX_NUM_SEQS = 256
VLLM_SMALL_GPU_MAX_NUM_SEQS = 256  # under 70 GiB, an A100 or a GB10
VLLM_LARGE_GPU_MAX_NUM_SEQS = 1024
VLLM_CPU_MAX_NUM_SEQS = 128  # per TP x PP rank, the API server
LARGE_GPU_GIB = 70.0  # get_batch_defaults: device_memory >= 70 GiB
A100_MAX_GIB = 80.0  # the largest A100 (80 GB) reports under 80 GiB
GB10_MAX_GIB = 128.0  # DGX Spark's GB10: 128 GB of unified memory, less what the system holds
HUGE_GPU_GIB = 160.0  # 0.30+: its own tier, 1024 too


def _v(version: str | tuple[int, ...] | None) -> tuple[int, ...] | None:
    return parse_version(version) if version is not None else None


def vllm_gpu_memory_utilization(version: str | tuple[int, ...] | None, extensible: bool | None) -> float | None:
    """The ``gpu_memory_utilization`` in force when the flag is not set: 0.9 up to 0.19, 0.92 from 0.20, and from
    0.34 1.0 with the extensible KV cache, 0.92 without. None: unknown (no release, or 0.34+ without knowing
    whether the extensible cache is on)."""
    v = _v(version)
    if v is None:
        return None
    if v < (0, 20, 0, 0):
        return 0.9
    if v < (0, 34, 0, 0):
        return 0.92
    if extensible is None:
        return None
    return 1.0 if extensible else 0.92


def vllm_extensible_by_default(version: str | tuple[int, ...] | None, device: str | None) -> bool | None:
    """Whether the release sizes the KV cache after warmup by default on ``device`` (``cuda``/``gpu`` covers ROCm,
    which vLLM runs as a CUDA-alike): from 0.34 on CUDA and ROCm. None: not known (no release, no device)."""
    v = _v(version)
    if v is not None and v < (0, 34, 0, 0):
        return False
    d = (device or "").lower()
    if d in ("cpu", "xpu", "tpu", "hpu", "npu"):
        return False
    if v is None or not d:
        return None
    return d in ("gpu", "cuda", "rocm", "gpu + host")


def vllm_block_size(version: str | tuple[int, ...] | None, platform: str) -> int:
    """vLLM's default ``--block-size``: the CPU build's 128; on GPUs ``CacheConfig.DEFAULT_BLOCK_SIZE``, 16 up to 0.33
    and 64 from 0.34 (which every default GQA backend takes). ``version`` None: the newest."""
    if platform == "cpu":
        return 128
    v = _v(version)
    return 16 if v is not None and v < (0, 34, 0, 0) else 64


def vllm_prefix_caching(version: str | tuple[int, ...] | None) -> bool:
    """Prefix caching on by default for hybrid models (0.26+). ``version`` None: the newest."""
    v = _v(version)
    return v is None or v >= (0, 26, 0, 0)


@dataclass(frozen=True)
class MaxNumSeqs:
    """vLLM's default ``max_num_seqs`` for one server: the value (None: unknown from the log) and why."""

    value: int | None
    why: str


def vllm_max_num_seqs(
    version: str | tuple[int, ...] | None,
    *,
    device: str | None = None,
    device_gib: float | None = None,
    sm90_or_later: bool = False,
    world: int = 1,
    throughput: bool = False,
    max_num_batched_tokens: int | None = None,
) -> MaxNumSeqs:
    """The ``max_num_seqs`` vLLM's API server resolves when the flag is not set (``EngineArgs.get_batch_defaults``,
    the rows above). ``device_gib``: the device's total memory as the log shows it; ``sm90_or_later``: the log shows
    a GPU newer than an A100 (the FlashInfer GDN prefill kernel runs on SM90 and later): with at most 80 GiB it is
    then neither an A100 nor a GB10 (128 GB of unified memory)."""
    v = _v(version)
    if (device or "").lower() == "cpu":
        n, why = VLLM_CPU_MAX_NUM_SEQS * max(1, world), f"vLLM's CPU build default 128 x TP x PP ({max(1, world)})"
    elif v is not None and v < (0, 8, 0, 0):
        n, why = VLLM_V0_MAX_NUM_SEQS, "vLLM V0's default"
    elif v is not None and v < (0, 8, 5, 0):
        n, why = VLLM_LARGE_GPU_MAX_NUM_SEQS, f"vLLM {'.'.join(map(str, v[:3]))}'s default on any GPU"
    elif device_gib is None:
        return MaxNumSeqs(None, "vLLM's default depends on the GPU's memory (1024 from 70 GiB, else 256), which the log does not show")
    elif device_gib < LARGE_GPU_GIB:
        n, why = VLLM_SMALL_GPU_MAX_NUM_SEQS, f"vLLM's default on a GPU under 70 GiB ({device_gib:.1f} GiB)"
    elif device_gib >= GB10_MAX_GIB or (v is not None and v < (0, 9, 0, 0)) or (sm90_or_later and device_gib <= A100_MAX_GIB):
        n, why = VLLM_LARGE_GPU_MAX_NUM_SEQS, f"vLLM's default on a GPU with >= 70 GiB that is no A100 or GB10 ({device_gib:.1f} GiB)"
    else:
        return MaxNumSeqs(
            None,
            f"vLLM's default on a {device_gib:.1f} GiB GPU is 1024, or 256 on an A100 or a GB10: the log does not name the GPU",
        )
    if throughput:
        n, why = n * 2, why + ", x2 in throughput mode"
    if max_num_batched_tokens is not None and 0 < max_num_batched_tokens < n:
        n, why = max_num_batched_tokens, why + f", at most max_num_batched_tokens ({max_num_batched_tokens})"
    return MaxNumSeqs(n, why)


def by_engine(engine: str) -> tuple[Default, ...]:
    return tuple(d for d in TABLE if d.engine == engine)


__all__ = [
    "TABLE",
    "Default",
    "MaxNumSeqs",
    "by_engine",
    "vllm_block_size",
    "vllm_extensible_by_default",
    "vllm_gpu_memory_utilization",
    "vllm_max_num_seqs",
    "vllm_prefix_caching",
]
