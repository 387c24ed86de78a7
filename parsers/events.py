"""Typed events: what one log line says, independent of which release printed it.

Parsers turn a line into at most one event. Both engines share the event types where the
meaning is the same (a batch/stats line is a ``BatchStats`` whether SGLang or vLLM printed it),
so the state layer and the collector never look at raw text.

Units are normalised here: ratios are 0..1, sizes are bytes, times are seconds.
``None`` always means "the line did not carry this field" (never 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

SGLANG = "sglang"
VLLM = "vllm"

# outcomes of one line, used as the `outcome` label of hybrid_cache_exporter_lines_total
PARSED = "parsed"
IGNORED = "ignored"
UNRECOGNIZED = "unrecognized"


@dataclass(slots=True)
class Line:
    """The prefix of one log line, and the event its message carried (if any).

    ``ts`` is the log's own time as Unix seconds (naive timestamps are read as local time of the
    exporter; vLLM's year-less ``MM-DD`` gets the year passed in by the caller). ``dp_rank`` is
    ``"0"`` when the line has no DP tag / engine index. ``tp_rank`` is None when the line has no
    TP tag. ``outcome`` is one of PARSED / IGNORED / UNRECOGNIZED.
    """

    outcome: str
    engine: str | None = None
    ts: float | None = None
    dp_rank: str = "0"
    tp_rank: int | None = None
    pp_rank: int | None = None
    event: object | None = None
    # why a line was unrecognized (the marker that matched) - for debug logs, never a label
    reason: str | None = None
    # seconds since midnight, when the header kept its time but lost its date ('[HH:MM:SS TP0] ',
    # a damaged paste): the pipeline completes ``ts`` with the date the source's log was at
    tod: float | None = None


# --------------------------------------------------------------------------------------------
# runtime


@dataclass(slots=True)
class BatchStats:
    """SGLang ``Prefill batch`` / ``Decode batch`` or vLLM periodic stats line.

    ``kind`` is ``prefill`` / ``decode`` (SGLang), ``stats`` (vLLM periodic line) or
    ``prefix_cache`` (vLLM V0's separate ``Prefix cache hit rate: GPU: x%, CPU: y%`` line, which
    carries the hit ratio only).
    """

    kind: str
    running: int | None = None
    queued: int | None = None
    kv_usage: float | None = None  # full-attention pool, 0..1 (vLLM: shared pool)
    kv_used_tokens: int | None = None  # '#full token' / '#token'
    mamba_usage: float | None = None
    mamba_used: int | None = None  # 'mamba num' (slots)
    swa_usage: float | None = None
    swa_used_tokens: int | None = None
    gen_throughput: float | None = None  # tokens/s
    input_throughput: float | None = None  # tokens/s (SGLang prefill / vLLM prompt)
    accept_length: float | None = None
    accept_rate: float | None = None  # 0..1
    prefix_hit_ratio: float | None = None  # 0..1 (vLLM)
    new_seqs: int | None = None
    new_tokens: int | None = None
    cached_tokens: int | None = None
    pending_tokens: int | None = None
    preemptions: int | None = None  # vLLM per-interval count (absent when 0)
    cpu_kv_usage: float | None = None  # vLLM V0
    swapped: int | None = None  # vLLM V0
    deferred: int | None = None  # vLLM 0.20+
    cuda_graph: bool | None = None
    forward_iter: int | None = None
    engines_aggregated: int | None = None  # vLLM "N Engines Aggregated:"
    engine_index: int | None = None  # vLLM "Engine 00k:" (= DP rank)


@dataclass(slots=True)
class Unrecognized:
    """Returned by a message parser when a line carries a known marker but does not parse:
    format drift, counted as ``outcome="unrecognized"``, never a crash."""

    reason: str


@dataclass(slots=True)
class Retraction:
    """SGLang decode retraction (``KV cache pool is full. Retract requests.``) or OOM retract."""

    retracted: int
    aborted: int | None = None
    new_tokens_gained: int | None = None
    mamba_num_gained: int | None = None
    new_token_ratio_before: float | None = None
    new_token_ratio_after: float | None = None
    test: bool = False  # 'Testing retraction.' (SGLANG_TEST_RETRACT): not real pressure


@dataclass(slots=True)
class Preemption:
    """vLLM V0 ``Sequence group N is preempted by ...`` (logged on the 1st, 51st, ... one)."""

    mode: str  # 'recompute' | 'swap'
    cumulative: int | None = None  # total_num_cumulative_preemption


@dataclass(slots=True)
class SpecDecoding:
    """vLLM ``SpecDecoding metrics:`` / V0 ``Speculative metrics:``."""

    mean_accept_length: float | None = None
    accept_rate: float | None = None  # 0..1
    accepted_tokens: int | None = None
    drafted_tokens: int | None = None


@dataclass(slots=True)
class PoolExhausted:
    """A fatal or warning line saying a pool ran out (mamba assertion, 'Out of memory', ...)."""

    pool: str  # 'mamba' | 'kv'
    fatal: bool = False


# --------------------------------------------------------------------------------------------
# startup: capacity facts


@dataclass(slots=True)
class MambaCacheAllocated:
    """SGLang ``Mamba Cache is allocated.`` (every TP rank; per TP shard and DP rank)."""

    slots: int | None  # max_mamba_cache_size (None before 0.5.3.post3)
    conv_bytes: float
    ssm_bytes: float
    intermediate_ssm_bytes: float | None = None
    intermediate_conv_bytes: float | None = None


@dataclass(slots=True)
class KVCacheAllocated:
    """SGLang ``KV Cache is allocated.`` / ``VA upper bound`` / post-capture sizing."""

    tokens: int
    k_bytes: float | None = None
    v_bytes: float | None = None
    kv_bytes: float | None = None  # MLA single size
    dtype: str | None = None
    label: str | None = None  # e.g. 'MiniMax MSA-v1 main NVFP4'; None for the main pool
    upper_bound: bool = False  # 'VA upper bound' (post-capture sizing follows)
    swa: bool = False  # the SWA pool of a hybrid-SWA model
    draft: bool = False  # speculative draft model's pool

    @property
    def total_bytes(self) -> float:
        if self.kv_bytes is not None:
            return self.kv_bytes
        return (self.k_bytes or 0.0) + (self.v_bytes or 0.0)


@dataclass(slots=True)
class SchedulerSummary:
    """SGLang ``max_total_num_tokens=..., max_running_requests=..., ...`` (effective values)."""

    values: dict[str, float] = field(default_factory=dict)
    # keys as printed: max_total_num_tokens, chunked_prefill_size, max_prefill_tokens,
    # max_running_requests, context_len; available_gpu_mem / available_cpu_mem in bytes


@dataclass(slots=True)
class MambaCap:
    """SGLang ``max_running_requests is capped to N by the mamba state cache (...)``."""

    cap: int
    slots: int | None = None
    slots_per_request: int | None = None
    requested: int | None = None  # only in the proposed (#32360) wording


@dataclass(slots=True)
class RequestCapReduced:
    """SGLang ``max_running_requests was reduced from the requested A to B`` (KV-bound) or
    ``Post-capture KV sizing: max_running_requests A -> B``."""

    requested: int
    effective: int
    bound: str = "kv"


@dataclass(slots=True)
class ReplaySSMBuffers:
    """SGLang ``GDN ReplaySSM ring buffers allocated (L=16|record_len=16, fold=...)``."""

    record_length: int
    buffers: dict[str, float] = field(default_factory=dict)  # name -> bytes
    fold: bool | None = None


@dataclass(slots=True)
class UnifiedMemory:
    """SGLang ``[unified-memory-pool] ...`` lines; ``values`` holds the numeric key=value pairs."""

    values: dict[str, float] = field(default_factory=dict)
    enabled: bool = False  # the 'UNIFIED MEMORY POOL ENABLED' banner


@dataclass(slots=True)
class SWAPool:
    """SGLang ``SWAKVPool mem usage: X GB, swa size: N, full size: M`` / sliding window lines."""

    swa_tokens: int | None = None
    full_tokens: int | None = None
    total_bytes: float | None = None


@dataclass(slots=True)
class ServerConfig:
    """Configuration dumps: SGLang ``server_args=``, vLLM ``non-default args:`` and
    ``Initializing ... engine (vX) with config:``. Values are Python literals where possible,
    else strings. ``kind`` is 'server_args' | 'non_default_args' | 'engine_config'."""

    kind: str
    args: dict[str, object] = field(default_factory=dict)
    version: str | None = None


@dataclass(slots=True)
class WeightsLoaded:
    """SGLang ``Load weight end.`` / vLLM ``Model loading took`` / ``Loading model weights took``."""

    weight_bytes: float | None = None
    available_bytes: float | None = None
    seconds: float | None = None
    model_type: str | None = None
    dtype: str | None = None


@dataclass(slots=True)
class ServerStarting:
    """A boot marker with no numbers (SGLang ``Load weight begin``; vLLM version banner)."""

    version: str | None = None
    model: str | None = None


@dataclass(slots=True)
class ServerReady:
    """SGLang ``The server is fired up and ready to roll!``; vLLM ``Application startup complete``
    / ``Starting vLLM API server``."""


@dataclass(slots=True)
class Lifecycle:
    """The end of a server's life, from its own lines. ``state``: ``stopping`` (a shutdown was asked:
    vLLM ``[shutdown] API server: shutdown triggered``, ``[shutdown] EngineCore: trigger received
    signal=SIGTERM``, uvicorn's ``Shutting down``), ``stopped`` (uvicorn ``Finished server process``),
    ``dead`` (the engine died: ``EngineCore encountered a fatal error.``, ``EngineDeadError``,
    ``Engine core initialization failed``). ``cause`` is a bounded word for the report (never a label
    taken from the line): ``signal``, ``api_server``, ``uvicorn``, ``fatal_error``, ``engine_dead``,
    ``init_failed``, ``process_died`` (``Process RustFrontend (PID: N) died with exit code N``); SGLang's (docs/formats/sglang.md#death-and-shutdown): ``scheduler_error``,
    ``tokenizer_error``, ``detokenizer_error`` (``<Name> hit an exception``), ``child_failed`` (``SIGQUIT
    received``, ``Subprocess ... crashed``)."""

    state: str
    cause: str | None = None


@dataclass(slots=True)
class KVCacheGroups:
    """vLLM ``kv cache group sizes (384, 384, 384, 384)``: the block size of each KV cache group of
    the shared pool (one group per attention layer set and per mamba layer set), and ``kv lcm block
    sizes N`` (the scheduler's block)."""

    block_sizes: tuple[int, ...] = ()
    lcm_block_size: int | None = None


@dataclass(slots=True)
class GDNPrefillKernel:
    """vLLM ``Using <kernel> GDN prefill kernel (requested=<r>, head_k_dim=<d>).`` (0.33.0; 0.32.0
    on CPU: ``Using CPU GDN prefill kernel (head_k_dim=128).``). ``kernel`` is normalised to one of
    ``flashinfer``, ``triton``, ``cutedsl``, ``aiter_flydsl``, ``sycl``, ``cpu`` (else ``other``)."""

    kernel: str
    requested: str | None = None
    head_k_dim: int | None = None


@dataclass(slots=True)
class KVCapacity:
    """vLLM ``GPU KV cache size: N tokens`` and/or ``Maximum concurrency for X tokens per request:
    Y.YYx`` (separate or merged lines), ``# GPU blocks``, ``num_gpu_blocks is: N``."""

    tokens: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    gpu_blocks: int | None = None
    cpu_blocks: int | None = None
    device: str | None = None  # 'GPU', 'CPU', 'XPU', 'GPU + host', 'cuda' ...
    engine_index: int | None = None  # vLLM "Engine 00k: ... num_gpu_blocks is: N" (= DP rank)


# the stages of a fact sized more than once in one boot (vLLM 0.34's extensible KV cache; the revision rule:
# exporter/state/revisions.py): sized before warmup (an estimate where the release sizes again after warmup), said to be
# an estimate by the line itself, measured after warmup on one rank, final
PROFILE, ESTIMATE, MEASURED, FINAL = "profile", "estimate", "measured", "final"


@dataclass(slots=True)
class KVMemory:
    """vLLM's KV cache memory: ``Available KV cache memory: X GiB`` / V0 memory profiling / ``Free memory on device
    (F/T GiB) ... Current kv cache memory in use is N bytes`` (stage ``profile``); 0.34's extensible KV cache:
    ``Memory after warmup: ... N KV cache blocks (X GiB) fit within the requested R GiB`` (``measured``), the cap
    warning ``gpu_memory_utilization=U caps this instance at R GiB, keeping W GiB ...`` (``measured``, no pool
    bytes), ``Remapping the KV cache from A to B blocks`` and ``Extended KV cache to N blocks (X GiB).``
    (``final``). ``text`` is the message, kept where a fact is revised (``report`` shows each value's line)."""

    kv_bytes: float | None
    stage: str = PROFILE
    blocks: int | None = None
    requested_bytes: float | None = None  # the budget: total x gpu_memory_utilization
    device_total_bytes: float | None = None  # 'Free memory on device (F/T GiB)'
    memory_utilization: float | None = None  # the gpu_memory_utilization in force (or the one the warning names)
    withheld_bytes: float | None = None  # 0.34's cap warning: free device memory the cap keeps out of the KV cache
    text: str | None = None


@dataclass(slots=True)
class ContextFit:
    """vLLM ``--max-model-len auto``: ``Auto-fit max_model_len: reduced from A to B ...`` / ``full model context
    length A fits ...`` (``profile``; ``estimate`` with 0.34's suffix ``the final length is set after CUDA graph
    capture and warmup``), and after warmup (0.34) ``--max-model-len auto reduced max_model_len from B to C (...)`` /
    ``Auto-fit max_model_len: using max_model_len=N, which fits ...`` (``final``)."""

    max_model_len: int
    original: int | None = None
    kv_bytes: float | None = None  # the KV cache memory it was fitted to (per GPU)
    stage: str = PROFILE
    text: str | None = None


@dataclass(slots=True)
class HybridLayout:
    """vLLM hybrid page-size lines: ``Setting attention block size to N tokens`` and ``Padding
    mamba page size by X%``; ``Add N padding layers``; mamba cache mode."""

    block_size: int | None = None
    padding_ratio: float | None = None  # 0..1
    padding_layers: int | None = None
    mamba_cache_mode: str | None = None
    mamba_ssm_dtype: str | None = None
    # vLLM's CPU build ran its AVX512-BF16 branch: it prints ``Reset SSM cache type ...`` and ``Using <dt> SSM
    # state storage ...`` only on such a CPU (platforms/cpu.py), where it keeps no 16-bit state but a GDN one
    cpu_avx512_bf16: bool = False


@dataclass(slots=True)
class MambaBlocksExceeded:
    """vLLM ``max_num_seqs (N) exceeds available Mamba cache blocks (M)`` and the 0.18-0.19
    cudagraph capping warnings."""

    max_num_seqs: int | None
    blocks: int
