"""Every message the parsers read, mapped to where the engine writes it: the table ``make release-check`` checks.

One row per message (or per piece of a message the engine assembles from parts: the stats and batch lines): the
engine, the *anchor* (literal text of its format string, within one literal of the source, that finds it in any
release), the file of the pinned release that writes it, and what reads it. ``pinned.json`` holds each message's
text as the pinned release (:data:`PINNED`: the releases the README claims) writes it, verbatim; ``python -m
tests.release.check --update`` rewrites it from the pinned wheels after a reviewed move to a new release.

A *historical* row (``current=False``) is a form the parsers read for older releases only, not in the pinned one:
listed, not checked.
"""

from __future__ import annotations

from dataclasses import dataclass

PINNED = {"vllm": "0.34.0", "sglang": "0.5.23"}


@dataclass(frozen=True)
class Message:
    engine: str
    anchor: str
    file: str  # where the pinned release writes it ("" for a historical form)
    reads: str  # what reads it (parser function or the exporter's reader)
    current: bool = True  # False: read for older releases only
    composes: tuple[str, ...] = ()  # the texts the message gives at run time that its source does not spell whole


def _v(anchor: str, file: str, reads: str, current: bool = True) -> Message:
    return Message("vllm", anchor, file if current else "", reads, current)


def _s(anchor: str, file: str, reads: str, current: bool = True, composes: tuple[str, ...] = ()) -> Message:
    return Message("sglang", anchor, file if current else "", reads, current, composes)


_LOGGERS = "vllm/v1/metrics/loggers.py"
_WORKER = "vllm/v1/worker/gpu_worker.py"
_EXT = "vllm/v1/worker/extensible_kv_cache.py"
_PLANNING = "vllm/v1/core/kv_cache_planning.py"
_IFACE = "vllm/platforms/interface.py"
_MCONFIG = "vllm/model_executor/models/config.py"
_CORE = "vllm/v1/engine/core.py"
_OBS = "sglang/srt/managers/scheduler_components/pool_stats_observer.py"
_REPORTER = "sglang/srt/managers/scheduler_components/metrics_reporter.py"
_MEMPOOL = "sglang/srt/mem_cache/memory_pool.py"
_CONFIGURATOR = "sglang/srt/mem_cache/kv_cache_configurator.py"
_TOKENIZER = "sglang/srt/managers/tokenizer_manager.py"

MESSAGES: tuple[Message, ...] = (
    # ---- vLLM: the stats line (its parts) and speculative decoding
    _v("Engine %03d: ", _LOGGERS, "parsers/vllm.py::STATS_RE (the engine index)"),
    _v("Avg prompt throughput: %.1f tokens/s", _LOGGERS, "parsers/vllm.py::STATS_RE"),
    _v("Avg generation throughput: %.1f tokens/s", _LOGGERS, "parsers/vllm.py::STATS_RE"),
    _v("Running: %d reqs", _LOGGERS, "parsers/vllm.py::STATS_RE"),
    _v("Waiting: %d reqs", _LOGGERS, "parsers/vllm.py::STATS_RE"),
    _v("Deferred: %d reqs", _LOGGERS, "parsers/vllm.py::STATS_RE"),
    _v("KV fetch: %d waiting to start", _LOGGERS, "parsers/vllm.py::STATS_RE"),
    _v("Preemptions: %d", _LOGGERS, "parsers/vllm.py::STATS_RE"),
    _v("%s KV cache usage: %.1f%%", _LOGGERS, "parsers/vllm.py::STATS_RE"),
    _v("Prefix cache hit rate: %.1f%%", _LOGGERS, "parsers/vllm.py::STATS_RE"),
    _v("Corrupted: %d reqs", _LOGGERS, "parsers/vllm.py::STATS_RE"),
    _v("External prefix cache hit rate: %.1f%%", _LOGGERS, "parsers/vllm.py::STATS_RE"),
    _v("MM cache hit rate: %.1f%%", _LOGGERS, "parsers/vllm.py::STATS_RE"),
    _v("SpecDecoding metrics: ", "vllm/v1/spec_decode/metrics.py", "parsers/vllm.py::SPEC_V1_RE"),
    _v("num_gpu_blocks is: %d", _LOGGERS, "parsers/vllm.py::CACHE_INFO_RE"),
    # ---- vLLM: startup, the KV cache's size
    _v(" KV cache size: %s tokens", "vllm/v1/core/kv_cache_utils.py", "parsers/vllm.py::KV_SIZE_RE"),
    _v("Available KV cache memory: ", _WORKER, "parsers/vllm.py::AVAIL_KV_RE"),
    _v("Free memory on device ", _WORKER, "parsers/vllm.py::CURRENT_KV_RE, FREE_MEMORY_RE"),
    _v("KV Cache as specified by kv_cache_memory_bytes", _WORKER, "parsers/vllm.py::RESERVED_KV_RE"),
    _v("Memory after warmup: ", _EXT, "parsers/vllm.py::WARMUP_RE"),
    _v("Remapping the KV cache from ", _EXT, "parsers/vllm.py::REMAP_RE"),
    _v("Extended KV cache to ", _EXT, "parsers/vllm.py::EXTENDED_RE"),
    _v("caps this instance at", _EXT, "parsers/vllm.py::CAP_WARNING_RE"),
    _v("Disabling the extensible KV cache", "vllm/v1/executor/abstract.py", "parsers/vllm.py::EXTENSIBLE_OFF_RE"),
    _v("Auto-fit max_model_len: ", _PLANNING, "parsers/vllm.py::AUTOFIT_RE, AUTOFIT_KEPT_RE, AUTOFIT_FREE_RE"),
    _v("--max-model-len auto reduced max_model_len", _PLANNING, "parsers/vllm.py::AUTO_REDUCED_RE"),
    _v("GiB for KV cache ", "vllm/v1/worker/cpu_worker.py", "parsers/vllm.py::CPU_KV_SET_RE"),
    _v("Model loading took ", "vllm/v1/worker/gpu/model_runner.py", "parsers/vllm.py::WEIGHTS_RE"),
    _v("kv cache group sizes", "vllm/v1/core/kv_cache_utils.py", "parsers/vllm.py::KV_GROUPS_RE"),
    _v("kv lcm block sizes", "vllm/v1/core/kv_cache_utils.py", "parsers/vllm.py::KV_LCM_RE"),
    _v("No available memory for the cache blocks", _PLANNING, "parsers/vllm.py::NO_MEMORY_ERR"),
    _v("To serve at least one request with the model", _PLANNING, "parsers/vllm.py::SEQ_LEN_ERR_RE"),
    # ---- vLLM: the hybrid layout, the state dtypes, the GDN kernel
    _v("to ensure that attention page size is >= mamba page size", _IFACE, "parsers/vllm.py::BLOCK_SIZE_RE"),
    _v("Padding mamba page size by ", _IFACE, "parsers/vllm.py::PADDING_RE"),
    _v("padding layers, may waste", _PLANNING, "parsers/vllm.py::PAD_LAYERS_RE"),
    _v("Mamba cache mode is set to ", _MCONFIG, "parsers/vllm.py::MAMBA_MODE_RE; exporter/state/store.py::_VLLM_ARCH_RE ('for X')"),
    _v("Updating mamba_ssm_cache_dtype to ", _MCONFIG, "parsers/vllm.py::NEMOTRON_DTYPE_RE"),
    _v("model specifies mamba_ssm_dtype=", _MCONFIG, "parsers/vllm.py::QWEN35_DTYPE_RE"),
    _v("Reset SSM cache type to ", "vllm/platforms/cpu.py", "parsers/vllm.py::SSM_RESET_RE"),
    _v("SSM state storage for the CPU accelerated GDN backend", "vllm/platforms/cpu.py", "parsers/vllm.py::SSM_STORAGE_RE"),
    _v(" GDN prefill kernel (", "vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py", "parsers/vllm.py::GDN_KERNEL_RE"),
    # ---- vLLM: configuration, banners, lifecycle
    _v("Initializing a V1 LLM engine", _CORE, "parsers/vllm.py::ENGINE_CONFIG_RE"),
    _v("non-default args: ", "vllm/entrypoints/common/startup.py", "parsers/vllm.py::_non_default"),
    _v("vLLM server version %s, serving model %s", "vllm/entrypoints/common/startup.py", "parsers/vllm.py::SERVER_VERSION_RE"),
    _v("  version ${w}%s", "vllm/entrypoints/common/startup.py", "parsers/vllm.py::LOGO_VERSION_RE"),
    _v("  model   ${w}%s", "vllm/entrypoints/common/startup.py", "parsers/vllm.py::LOGO_MODEL_RE"),
    _v("Resolved architecture: ", "vllm/config/model.py", "exporter/state/store.py::_VLLM_ARCH_RE"),
    _v("Using max model len ", "vllm/config/model.py", "parsers/vllm.py::MAX_MODEL_LEN_RE"),
    _v("data type to store kv cache", "vllm/config/cache.py", "parsers/vllm.py::KV_DTYPE_RE"),
    _v("max_num_seqs to %d for %s usage context", "vllm/engine/arg_utils.py", "parsers/vllm.py::MAX_NUM_SEQS_RE"),
    _v("[shutdown] API server: shutdown triggered", "vllm/entrypoints/launchers/launcher.py", "parsers/vllm.py::_shutdown"),
    _v("[shutdown] EngineCore: trigger received signal", _CORE, "parsers/vllm.py::_shutdown"),
    _v("EngineCore encountered a fatal error", _CORE, "parsers/vllm.py::_engine_core"),
    _v("EngineCore encountered an issue", "vllm/v1/engine/exceptions.py", "parsers/vllm.py::_fallback (EngineDeadError)"),
    _v("Engine core initialization failed", "vllm/v1/engine/utils.py", "parsers/vllm.py::_fallback"),
    # raised (ValueError) with full CUDA graphs when max_num_seqs > the blocks; the text spans two literals
    _v("exceeds available Mamba cache ", "vllm/config/compilation.py", "parsers/vllm.py::EXCEEDS_RE"),
    _v("Starting vLLM server on ", "vllm/entrypoints/launchers/api_server/entry.py", "parsers/vllm.py::_starting"),
    _v("Dumping input data for V1 LLM engine", "vllm/logging_utils/dump_input.py", "parsers/vllm.py::_DISPATCH['Dumping'] (ignored)"),
    # ---- vLLM: forms of older releases (read for their logs; not in the pinned release)
    _v("# GPU blocks: ", "", "parsers/vllm.py::BLOCKS_RE (V0, 0.6.4-0.7.3)", current=False),
    _v("Maximum concurrency for %s tokens per request: %.2fx", "", "parsers/vllm.py::MAX_CONC_RE (its own line up to 0.27)", False),
    _v("Loading model weights took", "", "parsers/vllm.py::WEIGHTS_V0_RE (0.4.2-0.7.3)", current=False),
    _v("Memory profiling results", "", "parsers/vllm.py::V0_PROFILE_RE (V0 0.6.4)", current=False),
    _v("the rest of the memory reserved for KV Cache", "", "parsers/vllm.py::V0_REST_RE (V0 0.6.5-0.10)", current=False),
    _v("is preempted by", "", "parsers/vllm.py::PREEMPT_RE (V0)", current=False),
    _v("Speculative metrics: Draft acceptance rate", "", "parsers/vllm.py::SPEC_V0_RE (V0)", current=False),
    _v("Prefix cache hit rate: GPU: ", "", "parsers/vllm.py::V0_PREFIX_HIT_RE (V0)", current=False),
    _v("vLLM API server version", "", "parsers/vllm.py::API_VERSION_RE (up to 0.14)", current=False),
    _v("Setting max_num_seqs to", "", "parsers/vllm.py::MAX_NUM_SEQS_RE (up to 0.10)", current=False),
    _v("Capping cudagraph capture sizes", "", "parsers/vllm.py::CAPPING_RE (0.18-0.19)", current=False),
    _v("No valid cudagraph capture sizes remain", "", "parsers/vllm.py::NO_CAPTURE_RE (0.18-0.19)", current=False),
    _v("Hybrid or mamba-based model detected without support for prefix caching", "", "parsers/vllm.py::MAMBA_MODE_RE", False),
    _v("Shutting down FastAPI HTTP server", "", "parsers/vllm.py::_shutting (before 0.30)", current=False),
    _v("Starting vLLM API server", "", "parsers/vllm.py::_starting (up to 0.31)", current=False),
    # ---- SGLang: the batch lines (their parts)
    _s("Decode batch{iter_msg}", _REPORTER, "parsers/sglang.py::BATCH_HEAD_RE"),
    _s("Prefill batch{iter_msg}", _REPORTER, "parsers/sglang.py::BATCH_HEAD_RE, #new-seq, #new-token, #cached-token"),
    _s("full token usage: ", _OBS, "parsers/sglang.py::_FIELDS['full token usage']"),
    _s("token usage: {self.full_token_usage", _OBS, "parsers/sglang.py::_FIELDS['token usage']"),
    _s("mamba usage: ", _OBS, "parsers/sglang.py::_FIELDS['mamba usage']"),
    _s("mamba num: ", _OBS, "parsers/sglang.py::_FIELDS['mamba num']"),
    _s("swa token usage: ", _OBS, "parsers/sglang.py::_FIELDS['swa token usage']"),
    _s("#full token: ", _OBS, "parsers/sglang.py::_FIELDS['#full token']"),
    _s("gen throughput (token/s): ", _REPORTER, "parsers/sglang.py::_FIELDS['gen throughput (token/s)'], #queue-req"),
    _s("input throughput (token/s): ", _REPORTER, "parsers/sglang.py::_FIELDS['input throughput (token/s)']"),
    _s("accept len: ", _REPORTER, "parsers/sglang.py::_FIELDS['accept len'], accept rate"),
    # ---- SGLang: startup, the pools
    _s("Mamba Cache is allocated. ", _MEMPOOL, "parsers/sglang.py::_MAMBA_RE"),
    # '{cache_name} {'VA upper bound' if ... else 'is allocated'}. dtype: ...': cache_name is 'KV Cache' or a label
    _s(
        "#tokens: {num_tokens}, K size: ",
        _MEMPOOL,
        "parsers/sglang.py::_KV_RE (K/V)",
        composes=("KV Cache is allocated", "KV Cache VA upper bound"),
    ),
    _s("#tokens: {num_tokens}, KV size: ", _MEMPOOL, "parsers/sglang.py::_KV_RE (KV)"),
    _s("Post-capture KV sizing: ", "sglang/srt/model_executor/model_runner_components/kv_pool_runtime.py", "parsers/sglang.py::_POST_*_RE"),
    _s("SWAKVPool {", "sglang/srt/mem_cache/swa_memory_pool.py", "parsers/sglang.py::_SWAKV_RE"),
    _s("liding window memory pool", "sglang/srt/model_executor/pool_configurator.py", "parsers/sglang.py::_SLIDING_RE"),
    _s("max_total_num_tokens={self.max_total_num_tokens}", "sglang/srt/managers/scheduler.py", "parsers/sglang.py::_SUMMARY_KV_RE"),
    _s("max_running_requests is capped to ", _CONFIGURATOR, "parsers/sglang.py::_CAP_RE"),
    _s("max_running_requests was reduced from the requested", _CONFIGURATOR, "parsers/sglang.py::_REDUCED_RE"),
    _s("ReplaySSM ring buffers allocated", _MEMPOOL, "parsers/sglang.py::_REPLAY_HEAD_RE"),
    _s("[unified-memory-pool]   total_bytes=", "sglang/srt/mem_cache/unified_memory_pool.py", "parsers/sglang.py::_UM_PAIR_RE"),
    _s("server_args={", "sglang/srt/entrypoints/engine.py", "parsers/sglang.py (server_args)"),
    _s("Load weight end. ", "sglang/srt/model_executor/model_runner.py", "parsers/sglang.py (weights)"),
    _s("Load weight begin. ", "sglang/srt/model_executor/model_runner.py", "parsers/sglang.py (boot)"),
    # ---- SGLang: retraction, readiness, death and shutdown
    _s("KV cache pool is full. Retract requests. ", "sglang/srt/managers/scheduler.py", "parsers/sglang.py::_RETRACT_RE"),
    _s("Testing retraction. ", "sglang/srt/managers/scheduler.py", "parsers/sglang.py::_RETRACT_RE (not counted)"),
    _s("The server is fired up and ready to roll!", "sglang/srt/entrypoints/http_server.py", "parsers/sglang.py (ready)"),
    _s("Scheduler hit an exception: ", "sglang/srt/managers/scheduler.py", "parsers/sglang.py (death)"),
    _s("SIGQUIT received. ", _TOKENIZER, "parsers/sglang.py (death)"),
    _s("Received sigquit from a child process", "sglang/srt/entrypoints/engine.py", "parsers/sglang.py (death)"),
    _s("crashed ", "sglang/srt/utils/watchdog.py", "parsers/sglang.py::_SUBPROCESS_CRASH_RE"),
    _s("SIGTERM received. ", _TOKENIZER, "parsers/sglang.py (stopping)"),
    _s("Signal SIGTERM received while ", _TOKENIZER, "parsers/sglang.py (stopping)"),
    _s("Gracefully exiting... ", _TOKENIZER, "parsers/sglang.py (stopping)"),
    _s("DetokenizerManager hit an exception", "sglang/srt/managers/detokenizer_manager.py", "parsers/sglang.py::_HIT_CAUSE"),
    _s("DataParallelController hit an exception", "sglang/srt/managers/data_parallel_controller.py", "parsers/sglang.py::_HIT_CAUSE"),
    _s("TokenizerManager hit an exception", _TOKENIZER, "parsers/sglang.py::_HIT_CAUSE"),
    _s("Router hit an exception", "sglang/srt/managers/multi_tokenizer_mixin.py", "parsers/sglang.py::_HIT_CAUSE"),
    # ---- SGLang: pool exhaustion (parsers/sglang.py::_EXHAUSTED)
    _s("Not enough space for mamba", _MEMPOOL, "parsers/sglang.py::_EXHAUSTED"),
    _s("Not enough GPU memory for hybrid (mamba/linear-attention)", _CONFIGURATOR, "parsers/sglang.py::_EXHAUSTED"),
    _s("Hybrid (mamba/linear-attention) state cache is too small", _CONFIGURATOR, "parsers/sglang.py::_EXHAUSTED"),
    _s("Out of memory even after retracting", "sglang/srt/managers/schedule_batch.py", "parsers/sglang.py::_EXHAUSTED"),
    _s("Retraction host KV pool exhausted", "sglang/srt/managers/schedule_batch.py", "parsers/sglang.py::_EXHAUSTED"),
    _s("Beam search group aborted: KV cache pool is full", "sglang/srt/managers/schedule_batch.py", "parsers/sglang.py::_EXHAUSTED"),
    _s("Decode out of memory. Try to lower your batch size", "sglang/srt/mem_cache/allocation.py", "parsers/sglang.py::_EXHAUSTED"),
    # ---- SGLang: forms of older releases
    _s("Decode out of memory happened", "", "parsers/sglang.py (older releases)", current=False),
    _s("Failed to retract any request", "", "parsers/sglang.py::_EXHAUSTED (older releases)", current=False),
    _s("Use Sliding window memory pool", "", "parsers/sglang.py::_SLIDING_RE (older releases)", current=False),
    _s("Using KV cache dtype: ", "", "parsers/sglang.py (older releases)", current=False),
    _s("TpModelWorkerClient hit an exception", "", "parsers/sglang.py::_HIT_CAUSE (older releases)", current=False),
    _s("KV Cache is allocated. #tokens", "", "parsers/sglang.py::_KV_RE (up to 0.5.12: no dtype)", current=False),
)


def of(engine: str) -> tuple[Message, ...]:
    return tuple(m for m in MESSAGES if m.engine == engine)
