"""The metric contract: every family the exporter exposes, in one place.

Metric names and labels are public API (dashboards, alert rules and users' queries depend on
them). This module is the only place that spells them: the collectors build their families from
these entries, ``dashboards/metrics.py`` re-exports them for the dashboard and alert tests,
``docs/gen_metrics.py`` writes ``docs/metrics.md`` from them, and
``tests/collector/test_contract.py`` checks that what the collectors emit on every fixture is exactly this.

An entry's ``name`` is the series name a query uses (counters end in ``_total``, info metrics in
``_info``); ``family`` is the name prometheus_client's family classes take. ``source`` is the log
line the value comes from, in the words of ``docs/formats/``. ``engines`` are the engines whose
logs carry it; ``absent`` says why a server of those engines may still have no series of it
(empty: present once the line was seen). ``key`` is the field of the per-server state
(``ServerState.gauges``/``capacity``/``counters``) it reads. ``group`` orders the reference page;
the ``exporter`` and ``process`` groups exist in ``serve`` only.

Leaf module: it imports nothing of the project, so every layer may read it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

PREFIX = "hybrid_cache_"
GAUGE, COUNTER, INFO = "gauge", "counter", "info"

SERVER = ("engine", "source", "dp_rank")
ENGINE_SOURCE = ("engine", "source")
SOURCE = ("source",)


@dataclass(frozen=True)
class Metric:
    name: str
    type: str
    help: str
    labels: tuple[str, ...]
    source: str
    group: str
    absent: str = ""
    key: str = ""
    info_labels: tuple[str, ...] = ()  # info metrics: the labels of the value
    event_field: str = ""  # runtime gauges: the field of ``parsers.events.BatchStats`` they show
    engines: tuple[str, ...] = ("sglang", "vllm")  # the engines whose logs have this fact

    @property
    def family(self) -> str:
        """The name prometheus_client's ``*MetricFamily`` takes (without ``_total``/``_info``)."""
        for suffix in ("_total", "_info"):
            if self.name.endswith(suffix) and self.type in (COUNTER, INFO):
                return self.name[: -len(suffix)]
        return self.name

    @property
    def all_labels(self) -> tuple[str, ...]:
        return self.labels + self.info_labels


def _engines(absent: str) -> tuple[str, tuple[str, ...]]:
    """``"sglang: why"`` / ``"vllm: why"`` -> (why, that engine); otherwise both engines."""
    for eng in ("sglang", "vllm"):
        if absent == eng or absent.startswith(eng + ":"):
            return absent[len(eng) + 1 :].strip(), (eng,)
    return absent, ("sglang", "vllm")


def _runtime(key: str, event_field: str, help: str, source: str, absent: str = "") -> Metric:
    why, engines = _engines(absent)
    return Metric(PREFIX + key, GAUGE, help, SERVER, source, "runtime", why, key, event_field=event_field, engines=engines)


def _capacity(key: str, help: str, source: str, absent: str = "") -> Metric:
    why, engines = _engines(absent)
    return Metric(PREFIX + key, GAUGE, help, SERVER, source, "capacity", why, key, engines=engines)


def _counter(key: str, name: str, help: str, source: str, absent: str = "") -> Metric:
    why, engines = _engines(absent)
    return Metric(PREFIX + name, COUNTER, help, SERVER, source, "counters", why, key, engines=engines)


# --------------------------------------------------------------------------------------------
# runtime gauges: the newest batch/stats line that carried the field (state key = short name)

RUNTIME: tuple[Metric, ...] = (
    _runtime(
        "running_requests",
        "running",
        "Running requests (SGLang #running-req, vLLM Running).",
        "SGLang batch line `#running-req`; vLLM stats line `Running: N reqs`",
    ),
    _runtime(
        "queued_requests",
        "queued",
        "Waiting requests (SGLang #queue-req, vLLM Waiting/Pending).",
        "SGLang batch line `#queue-req`; vLLM stats line `Waiting`/`Pending`",
    ),
    _runtime(
        "kv_usage_ratio",
        "kv_usage",
        "Full-attention KV pool usage 0-1 (SGLang 'full token usage' or 'token usage'; vLLM 'GPU KV cache usage'/100, "
        "which for hybrids also holds mamba blocks).",
        "SGLang batch line `full token usage` or `token usage`; vLLM stats line `GPU KV cache usage`/100 (one pool shared with mamba blocks)",
    ),
    _runtime(
        "kv_used_tokens",
        "kv_used_tokens",
        "Tokens held in the full-attention KV pool (SGLang '#full token' / '#token').",
        "SGLang batch line `#full token` / `#token`",
        "sglang",
    ),
    _runtime(
        "mamba_usage_ratio",
        "mamba_usage",
        "Mamba (linear-attention state) pool usage 0-1 (SGLang 'mamba usage').",
        "SGLang batch line `mamba usage`",
        "sglang",
    ),
    _runtime(
        "mamba_used_slots",
        "mamba_used",
        "Mamba state slots in use, excluding evictable cached states (SGLang 'mamba num').",
        "SGLang batch line `mamba num`",
        "sglang",
    ),
    _runtime(
        "swa_usage_ratio",
        "swa_usage",
        "Sliding-window KV pool usage 0-1 (SGLang 'swa token usage').",
        "SGLang batch line `swa token usage`",
        "sglang: hybrid-SWA models only",
    ),
    _runtime(
        "swa_used_tokens",
        "swa_used_tokens",
        "Tokens held in the sliding-window KV pool (SGLang '#swa token').",
        "SGLang batch line `#swa token`",
        "sglang: hybrid-SWA models only",
    ),
    _runtime(
        "generation_throughput_tokens_per_second",
        "gen_throughput",
        "Decode throughput (SGLang 'gen throughput', vLLM 'Avg generation throughput').",
        "SGLang decode line `gen throughput (token/s)`; vLLM stats line `Avg generation throughput`",
    ),
    _runtime(
        "input_throughput_tokens_per_second",
        "input_throughput",
        "Prefill throughput (SGLang 'input throughput', vLLM 'Avg prompt throughput'). vLLM's logged value counts "
        "computed prompt tokens only (prefix-cache hits excluded): lower than the rate of vllm:prompt_tokens_total, "
        "which counts every prompt token.",
        "SGLang prefill line `input throughput (token/s)`; vLLM stats line `Avg prompt throughput` (computed tokens only, "
        "`v1/metrics/loggers.py::_track_iteration_stats`; `vllm:prompt_tokens_total` also counts the cached ones)",
        "SGLang prints it on prefill lines of some versions only",
    ),
    _runtime(
        "spec_accept_length",
        "accept_length",
        "Speculative decoding mean accepted length (SGLang 'accept len', vLLM 'Mean acceptance length').",
        "SGLang decode line `accept len`; vLLM `SpecDecoding metrics` line `Mean acceptance length`",
        "speculative decoding only",
    ),
    _runtime(
        "spec_accept_ratio",
        "accept_rate",
        "Speculative decoding acceptance rate 0-1.",
        "SGLang decode line `accept rate`; vLLM `SpecDecoding metrics` line `Draft acceptance rate`/100",
        "speculative decoding only",
    ),
    _runtime(
        "prefix_cache_hit_ratio",
        "prefix_hit_ratio",
        "Prefix cache hit rate 0-1 (vLLM 'Prefix cache hit rate'/100).",
        "vLLM stats line `Prefix cache hit rate`/100 (V1: a field of the throughput line; V0: its own `GPU: x%` line)",
        "vllm",
    ),
    _runtime(
        "pending_prefill_tokens",
        "pending_tokens",
        "Tokens waiting for prefill (SGLang '#pending-token').",
        "SGLang batch line `#pending-token`",
        "sglang: SGLang versions that print it only",
    ),
    _runtime(
        "cpu_kv_usage_ratio",
        "cpu_kv_usage",
        "vLLM V0 CPU (swap) KV cache usage 0-1.",
        "vLLM V0 stats line `CPU KV cache usage`",
        "vllm: vLLM V0 only",
    ),
    _runtime("swapped_requests", "swapped", "vLLM V0 swapped requests.", "vLLM V0 stats line `Swapped: N reqs`", "vllm: vLLM V0 only"),
)

# --------------------------------------------------------------------------------------------
# capacity facts: startup lines, reset when the log shows a server restart

CAPACITY: tuple[Metric, ...] = (
    _capacity(
        "kv_capacity_tokens",
        "Full-attention KV pool size in tokens (SGLang max_total_num_tokens / KV Cache #tokens; vLLM 'GPU KV cache size').",
        "SGLang `max_total_num_tokens=` / `KV Cache is allocated. #tokens`; vLLM `GPU KV cache size: N tokens`",
    ),
    _capacity(
        "kv_capacity_bytes",
        "Full-attention KV pool size in bytes (SGLang K+V or KV size; vLLM 'Available KV cache memory').",
        "SGLang `K size + V size` / `KV size` (GB = GiB) of one TP rank's pool as the rank prints it, plus the sliding-window "
        "or labelled pools that rank printed (never the draft model's, never another rank's or boot's); vLLM `Available KV cache memory`",
        "only when the engine logs the pool size in bytes",
    ),
    _capacity(
        "mamba_capacity_slots",
        "Mamba state pool size in slots per DP rank (SGLang max_mamba_cache_size).",
        "SGLang `Mamba Cache is allocated. max_mamba_cache_size`",
        "sglang",
    ),
    _capacity(
        "mamba_slots_per_request",
        "Mamba state slots each running request holds (SGLang cap warning).",
        "SGLang cap warning `N state slots per request`",
        "sglang: only when SGLang logs the mamba cap warning",
    ),
    _capacity(
        "max_concurrency",
        "vLLM 'Maximum concurrency for N tokens per request'.",
        "vLLM `Maximum concurrency for X tokens per request: Y.YYx`",
        "vllm",
    ),
    _capacity(
        "swa_capacity_tokens",
        "Sliding-window KV pool size in tokens.",
        "SGLang `SWAKVPool ... swa size`, or a rank's second `KV Cache is allocated` line after its `Use sliding window memory pool` line",
        "sglang: hybrid-SWA models only",
    ),
    _capacity(
        "context_length_tokens",
        "Context length (SGLang context_len, vLLM max model len).",
        "SGLang `context_len=`; vLLM `Maximum concurrency for X tokens`",
    ),
    _capacity(
        "chunked_prefill_size_tokens",
        "SGLang chunked_prefill_size.",
        "SGLang `chunked_prefill_size=` (scheduler summary or server_args)",
        "sglang",
    ),
    _capacity(
        "available_memory_bytes",
        "SGLang available_gpu_mem after pools and graphs.",
        "SGLang `available_gpu_mem=`",
        "sglang",
    ),
    _capacity(
        "weights_bytes",
        "Model weight memory per GPU.",
        "SGLang `Load weight end ... mem usage`; vLLM `Model loading took X GiB`",
    ),
    _capacity(
        "replayssm_record_length",
        "SGLang GDN ReplaySSM ring depth (L / record_len).",
        "SGLang `GDN ReplaySSM ring buffers allocated` (`L=` / `record_len=`)",
        "sglang: GDN models with --enable-linear-replayssm only",
    ),
    _capacity(
        "kv_blocks",
        "vLLM KV cache blocks (# GPU blocks / num_gpu_blocks).",
        "vLLM `# GPU blocks` / `num_gpu_blocks is`",
        "vllm",
    ),
    _capacity(
        "kv_cache_groups",
        "vLLM KV cache groups of the shared block pool (one block per group per block of tokens a request holds).",
        "vLLM `kv cache group sizes (N, N, ...)` (one entry per group)",
        "vllm: 0.30 and later",
    ),
    _capacity(
        "mamba_blocks",
        "vLLM Mamba cache blocks (from 'exceeds available Mamba cache blocks').",
        "vLLM error `exceeds available Mamba cache blocks (M)`",
        "vllm: only when vLLM reports too few Mamba cache blocks",
    ),
    _capacity(
        "attention_block_size_tokens",
        "vLLM hybrid attention block size after page-size unification.",
        "vLLM `Setting attention block size to N tokens`",
        "vllm",
    ),
    _capacity(
        "mamba_page_padding_ratio",
        "vLLM mamba page padding 0-1.",
        "vLLM `Padding mamba page size by X%`",
        "vllm",
    ),
    _capacity(
        "requested_max_running_requests",
        "Requested max running requests before the engine lowered it.",
        "SGLang cap warning `reduced from the requested A`; vLLM `max_num_seqs` of the Mamba blocks error",
        "only when the engine lowered the request cap",
    ),
    _capacity(
        "draft_kv_capacity_tokens",
        "Speculative draft model KV pool size in tokens.",
        "SGLang: the `KV Cache is allocated` line a rank prints after the target's with the target's `#tokens` (or any, with "
        "speculative decoding on in `server_args`), or `Post-capture KV sizing: draft KV cache allocated`",
        "sglang: speculative decoding with a draft model only",
    ),
)

MAX_RUNNING = Metric(
    PREFIX + "max_running_requests",
    GAUGE,
    "Effective max running requests per DP rank (SGLang summary line or mamba cap warning; vLLM max_num_seqs from args or the "
    "engine default); basis=logged when a line says it, default when it is the engine's default (vLLM logs it only at DEBUG).",
    (*SERVER, "basis"),
    "SGLang `max_total_num_tokens=..., max_running_requests=N` or the cap warning; vLLM `max_num_seqs` from `non-default args` "
    "or the `Defaulting max_num_seqs` line (basis=logged), else vLLM's default for what the log shows of the device "
    "(basis=default; exporter/capacity/defaults.py: 1024 on a GPU of >= 70 GiB that is no A100 or GB10, 256 below, 128 x TP x PP on the CPU build)",
    "capacity",
    "vLLM: a GPU server that did not set --max-num-seqs, when the log does not show the GPU's memory (or, between 70 and "
    "128 GiB, that it is no A100 or GB10): vLLM's default is then not known",
)
MAMBA_STATE_BYTES = Metric(
    PREFIX + "mamba_state_bytes",
    GAUGE,
    "Mamba state pool memory per GPU by state buffer (SGLang 'Mamba Cache is allocated').",
    (*SERVER, "state"),
    "SGLang `Mamba Cache is allocated` (`state` = conv, ssm, intermediate_ssm, intermediate_conv)",
    "capacity",
    engines=("sglang",),
)
REPLAYSSM_BUFFER_BYTES = Metric(
    PREFIX + "replayssm_buffer_bytes",
    GAUGE,
    "SGLang GDN ReplaySSM ring buffer memory per GPU.",
    (*SERVER, "buffer"),
    "SGLang `GDN ReplaySSM ring buffers allocated` (`buffer` = d, k, g, rawv, rawk, beta)",
    "capacity",
    "GDN models with --enable-linear-replayssm only",
    engines=("sglang",),
)

# --------------------------------------------------------------------------------------------
# counters of lines and events (state key in ServerState.counters)

COUNTERS: tuple[Metric, ...] = (
    _counter("decode_batches", "decode_batches_total", "SGLang 'Decode batch' lines.", "SGLang `Decode batch` lines", "sglang"),
    _counter("prefill_batches", "prefill_batches_total", "SGLang 'Prefill batch' lines.", "SGLang `Prefill batch` lines", "sglang"),
    _counter("stats_lines", "stats_lines_total", "vLLM periodic stats lines.", "vLLM stats lines `Avg prompt throughput: ...`", "vllm"),
    _counter(
        "preempted_requests",
        "preempted_requests_total",
        "Requests retracted (SGLang '#retracted_reqs') or preempted (vLLM 'Preemptions' / V0 cumulative count).",
        "SGLang `#retracted_reqs`; vLLM `Preemptions: N`, V0 `total_num_cumulative_preemption` deltas",
        "only after the first retraction/preemption",
    ),
    _counter(
        "retraction_events",
        "retractions_total",
        "SGLang retraction events ('KV cache pool is full. Retract requests.').",
        "SGLang `KV cache pool is full. Retract requests.` (`Testing retraction.` is not counted)",
        "sglang: only after the first retraction",
    ),
    _counter(
        "retracted_mamba_slots",
        "retracted_mamba_slots_total",
        "Mamba slots freed by retractions (SGLang '#mamba_num_gained').",
        "SGLang retraction line `#mamba_num_gained`",
        "sglang: only after the first retraction of a hybrid model",
    ),
    _counter(
        "spec_accepted_tokens",
        "spec_accepted_tokens_total",
        "vLLM speculative accepted tokens.",
        "vLLM `SpecDecoding metrics: ... Accepted: N tokens`",
        "vllm: speculative decoding only",
    ),
    _counter(
        "spec_drafted_tokens",
        "spec_drafted_tokens_total",
        "vLLM speculative drafted tokens.",
        "vLLM `SpecDecoding metrics: ... Drafted: M tokens`",
        "vllm: speculative decoding only",
    ),
)

PREFILL_TOKENS = Metric(
    PREFIX + "prefill_tokens_total",
    COUNTER,
    "Prompt tokens in SGLang prefill batches, new (computed) or cached (prefix hit).",
    (*SERVER, "kind"),
    "SGLang prefill line `#new-token` (`kind=new`), `#cached-token` (`kind=cached`)",
    "counters",
    engines=("sglang",),
)

# --------------------------------------------------------------------------------------------
# diagnosis: the rules (docs/rules.md) and the recommendations

FINDING = Metric(
    PREFIX + "finding",
    GAUGE,
    "1 while a diagnosis rule fires for this server, else 0 (rules: docs/rules.md).",
    (*SERVER, "rule"),
    "the diagnosis rules over the lines above (docs/rules.md); one series per rule",
    "diagnosis",
)
RECOMMENDATION = Metric(
    PREFIX + "recommendation_info",
    INFO,
    "A flag that fixes a firing finding, with its value and its rank in the finding's order (1: start here).",
    (*SERVER, "rule", "flag", "value", "rank"),
    "the recommendations of the firing findings, without those that carry a caveat (docs/rules.md#the-order); "
    "`rank` 1..N (N <= the flags the rule catalogue lists for the finding)",
    "diagnosis",
    "only while a finding fires",
)
RECOMMENDED_RATIO = Metric(
    PREFIX + "recommended_mamba_full_memory_ratio",
    GAUGE,
    "--mamba-full-memory-ratio that would balance the observed usage of both pools.",
    SERVER,
    "the observed usage of both pools (docs/rules.md)",
    "diagnosis",
    "only when the pools are imbalanced",
)

# --------------------------------------------------------------------------------------------
# per source: the server's configuration and the log itself

SERVER_INFO = Metric(
    PREFIX + "server_info",
    INFO,
    "Server configuration as logged at startup.",
    ENGINE_SOURCE,
    "SGLang `server_args=`; vLLM `non-default args`, `Initializing ... engine (vX) with config`, the version banner",
    "source",
    info_labels=("model", "kv_cache_dtype", "mamba_ssm_dtype", "radix_cache_strategy", "tp_size", "dp_size", "speculative", "version"),
)
SERVER_RESTARTS = Metric(
    PREFIX + "server_restarts_total",
    COUNTER,
    "Server starts seen in the log after runtime lines.",
    ENGINE_SOURCE,
    "a startup line after runtime lines in the same log",
    "source",
)
LAST_LINE_TIMESTAMP = Metric(
    PREFIX + "last_line_timestamp_seconds",
    GAUGE,
    "Log timestamp of the newest line read from the source.",
    ENGINE_SOURCE,
    "the header time of every line",
    "source",
)
SERVER_STATE = Metric(
    PREFIX + "server_state",
    GAUGE,
    "1 for the server's current state, 0 for the others (starting, serving, idle, stalled, stopped, dead), as its own "
    "lines tell: a finding of a server that is not serving is as of its last sample (docs/rules.md#quiet-and-death).",
    (*ENGINE_SOURCE, "state"),
    "boot lines (starting), the ready line and samples (serving / idle / stalled), shutdown lines (stopped), "
    "`EngineDeadError` and fatal engine errors (dead)",
    "source",
    "until a boot line, a ready line or a sample is read",
)
SERVER_STATE_SINCE = Metric(
    PREFIX + "server_state_since_timestamp_seconds",
    GAUGE,
    "Log time the server entered its current state (hybrid_cache_server_state); for an idle state set by a silence, "
    "the time of its last batch line.",
    ENGINE_SOURCE,
    "the header time of the line that changed the state (a silence: of the last batch line before it)",
    "source",
    "until a boot line, a ready line or a sample is read",
)
SERVER_STATE_BASIS = Metric(
    PREFIX + "server_state_basis",
    GAUGE,
    "1 for what set the server's current state, 0 for the others: logged (a line of the server said it), derived "
    "(SGLang: no batch line for more than quiet_seconds, shown by a later line's time), wall_clock (serve only: the "
    "log, read to its end, wrote nothing for quiet_seconds of wall time; docs/rules.md#silence).",
    (*ENGINE_SOURCE, "basis"),
    "the line that set the state, or the silence after the last batch line",
    "source",
    "until a boot line, a ready line or a sample is read",
)
SERVER_DEATHS = Metric(
    PREFIX + "server_deaths_total",
    COUNTER,
    "Engine deaths seen in the log (EngineDeadError or a fatal error of the engine, not a requested shutdown).",
    ENGINE_SOURCE,
    "vLLM `EngineCore encountered a fatal error.`, `EngineDeadError`, `Engine core initialization failed`",
    "source",
)
GDN_PREFILL_KERNEL = Metric(
    PREFIX + "gdn_prefill_kernel_info",
    INFO,
    "The Gated DeltaNet prefill kernel the engine logged it runs (flashinfer, triton, cutedsl, aiter_flydsl, sycl, cpu, other).",
    ENGINE_SOURCE,
    "vLLM `Using <kernel> GDN prefill kernel (requested=..., head_k_dim=N).` (0.33; CPU builds: `Using CPU GDN prefill kernel`)",
    "source",
    "vllm: GDN models (Qwen3-Next, Qwen3.5) of releases that log the kernel",
    info_labels=("kernel",),
    engines=("vllm",),
)
EXPORTER_LINES = Metric(
    PREFIX + "exporter_lines_total",
    COUNTER,
    "Log lines read, by outcome (unrecognized = known marker that failed to parse).",
    (*SOURCE, "outcome"),
    "every line (`outcome` = parsed, ignored, unrecognized: a known marker that failed to parse, i.e. format drift, or a "
    "known message damaged, cut short, or with a label value out of bound); a message joined from the lines a writer cut "
    "or a terminal wrapped counts each of them (docs/formats/README.md#lines-as-users-paste-them); a line without its "
    "newline (a truncation, the end of the input) counts once, read only when its message is whole (docs/reading.md)",
    "source",
)
DP_RANK_LIMIT_LINES = Metric(
    PREFIX + "exporter_dp_rank_limit_lines_total",
    COUNTER,
    "Lines of a dp_rank beyond the source's limit of distinct values (--max-dp-ranks): counted here, not stored.",
    SOURCE,
    "lines whose DP tag or engine index would add a dp_rank past --max-dp-ranks (default 256) for the source",
    "source",
    "until a line of the source exceeds the limit",
)

# --------------------------------------------------------------------------------------------
# serve only: the tailers and the positions file (exporter/exposition/selfmetrics.py)

_E = PREFIX + "exporter_"


def _self(name: str, type_: str, help: str, source: str, labels: tuple[str, ...] = SOURCE, absent: str = "") -> Metric:
    return Metric(_E + name, type_, help, labels, source, "exporter", absent)


READ_BYTES = _self("read_bytes_total", COUNTER, "Bytes read from the source (files: all generations).", "the tailer")
READ_LAG_BYTES = _self(
    "read_lag_bytes",
    GAUGE,
    "Bytes in the source's open files not yet fed to the parser (size minus offset).",
    "the tailer (stdin: 0)",
)
ROTATIONS = _self("rotations_total", COUNTER, "File replaced at its path (rename+create, delete+recreate).", "the tailer")
TRUNCATIONS = _self("truncations_total", COUNTER, "File truncated or rewritten in place (copytruncate, : > file).", "the tailer")
OPEN_FILES = _self("open_files", GAUGE, "Open file descriptors (current file plus rotated ones being drained).", "the tailer")
OVERLONG_LINES = _self("overlong_lines_total", COUNTER, "Lines longer than --max-line-bytes, cut to that length.", "the tailer")
FILE_MODIFIED = _self(
    "file_modified_timestamp_seconds",
    GAUGE,
    "Modification time of the source's current file (stdin: time of the last read). Compare with time() to tell idle from dead.",
    "the tailer (stat of the current file)",
)
SOURCE_ERRORS = _self(
    "source_errors_total", COUNTER, "Unexpected errors while reading the source (logged; the source is retried).", "the tailer"
)
SOURCE_UP = _self("source_up", GAUGE, "1 while the source's file is open (stdin: connected), else 0.", "the tailer")
LOG_FORMAT_CHANGES = _self(
    "log_format_changes_total",
    COUNTER,
    "Times a line of the source came in another envelope than the lines before it (the server's logging reconfigured, a second writer): the header stage decided the format again.",
    "the header stage (parsers/header/, docs/formats/README.md#formats-read)",
)
RECOVERED_LINES = _self(
    "recovered_lines",
    GAUGE,
    "Lines written before the exporter started, read back at start for the current boot's facts; not counted in any counter.",
    "the tailer, at start (a file opened past its start whose source has said nothing yet: docs/serve.md)",
)
POSITIONS_WRITE_ERRORS = _self(
    "positions_write_errors_total", COUNTER, "Failed writes of the positions file (--positions).", "the positions file", ()
)
POSITIONS_CORRUPT = _self(
    "positions_corrupt_total",
    COUNTER,
    "Positions file, or entries of it, found unreadable or corrupt at start (rejected and replaced; those files are read from their start).",
    "the positions file",
    (),
)

BUILD_INFO = _self(
    "build_info",
    GAUGE,
    "1, with the exporter's version, git revision and Python version as labels.",
    "the exporter itself",
    ("version", "revision", "python_version"),
)
SOURCE_MISSING = _self(
    "source_missing",
    GAUGE,
    "1 while a configured --log path (or glob) has not appeared for --source-missing-after seconds (a typo?), else 0.",
    "the tailer (configured paths that do not exist)",
    absent="only when serve watches its --log paths for missing files",
)
SOURCES_OVER_LIMIT = _self(
    "sources_over_limit",
    GAUGE,
    "Container logs found under --kubernetes-pods but not read because --kubernetes-max-sources is reached.",
    "the container log discovery (--kubernetes-pods)",
    (),
    "only with --kubernetes-pods",
)
WEB_CONFIG_RELOAD = _self(
    "web_config_last_reload_successful",
    GAUGE,
    "1 if the web config files (--web.config.file and the certificates it names) in force are the newest on disk, 0 if a change failed to load.",
    "the web config file and its certificates (--web.config.file)",
    (),
    "only with --web.config.file",
)

HTTP_ERRORS = _self(
    "http_errors_total",
    COUNTER,
    "Errors of the HTTP server itself, each logged: accept failed (out of descriptors), an answer that raised, "
    "collecting /metrics failed (answered 500), the connection loop.",
    "the HTTP server (exporter/exposition/connections.py)",
    ("cause",),
)
HTTP_DROPPED = _self(
    "http_connections_dropped_total",
    COUNTER,
    "Connections the HTTP server closed before answering them: a TLS handshake or request head not finished in time, "
    "or an answer not read in time (timeout); a failed TLS handshake or a client certificate without an allowed SAN (tls); "
    "the oldest waiting connection of an address or of all, closed to make room for a new one (limit).",
    "the HTTP server (exporter/exposition/connections.py)",
    ("reason",),
)
HTTP_CONNECTIONS = _self("http_connections", GAUGE, "Open HTTP connections.", "the HTTP server (exporter/exposition/connections.py)", ())

SELF: tuple[Metric, ...] = (
    BUILD_INFO,
    READ_BYTES,
    READ_LAG_BYTES,
    ROTATIONS,
    TRUNCATIONS,
    OPEN_FILES,
    OVERLONG_LINES,
    LOG_FORMAT_CHANGES,
    FILE_MODIFIED,
    SOURCE_ERRORS,
    SOURCE_UP,
    RECOVERED_LINES,
    POSITIONS_WRITE_ERRORS,
    POSITIONS_CORRUPT,
    SOURCE_MISSING,
    SOURCES_OVER_LIMIT,
    WEB_CONFIG_RELOAD,
    HTTP_ERRORS,
    HTTP_DROPPED,
    HTTP_CONNECTIONS,
)

# --------------------------------------------------------------------------------------------
# serve only: prometheus_client's standard process collector (not ours to name; listed because
# dashboards query some of them)


def _process(name: str, type_: str, help: str) -> Metric:
    return Metric(name, type_, help, (), "prometheus_client's ProcessCollector (/proc of the exporter)", "process")


PROCESS: tuple[Metric, ...] = (
    _process("process_virtual_memory_bytes", GAUGE, "Virtual memory size in bytes."),
    _process("process_resident_memory_bytes", GAUGE, "Resident memory size in bytes."),
    _process("process_start_time_seconds", GAUGE, "Start time of the process since unix epoch in seconds."),
    _process("process_cpu_seconds_total", COUNTER, "Total user and system CPU time spent in seconds."),
    _process("process_open_fds", GAUGE, "Number of open file descriptors."),
    _process("process_max_fds", GAUGE, "Maximum number of open file descriptors."),
)

# --------------------------------------------------------------------------------------------

# every family HybridCacheCollector (replay, report, serve) may emit
LOG_METRICS: tuple[Metric, ...] = (
    EXPORTER_LINES,
    DP_RANK_LIMIT_LINES,
    LAST_LINE_TIMESTAMP,
    SERVER_RESTARTS,
    SERVER_INFO,
    SERVER_STATE,
    SERVER_STATE_SINCE,
    SERVER_STATE_BASIS,
    SERVER_DEATHS,
    GDN_PREFILL_KERNEL,
    *RUNTIME,
    *CAPACITY,
    MAX_RUNNING,
    MAMBA_STATE_BYTES,
    REPLAYSSM_BUFFER_BYTES,
    *COUNTERS,
    PREFILL_TOKENS,
    FINDING,
    RECOMMENDATION,
    RECOMMENDED_RATIO,
)

METRICS: tuple[Metric, ...] = (*LOG_METRICS, *SELF, *PROCESS)
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
assert len(BY_NAME) == len(METRICS), "a metric name is listed twice"

# --------------------------------------------------------------------------------------------
# label values: every label of the log's families is bounded (issue 29, item 2). A value read from a log line (a
# name, a dtype, a strategy, a method, a version, a buffer's name, a DP tag) is checked against its label's bound
# when the line is read (parsers/labels.py): one out of bound is not kept, and its line counts `unrecognized`; the
# collector shows "" for any value out of bound. tests/collector/test_contract.py checks every label value of
# every fixture's exposition against these, and that every label of the log's families has one.


@dataclass(frozen=True)
class Label:
    name: str
    max_len: int
    pattern: str  # a value matches it whole (re.fullmatch), at most max_len characters
    about: str  # what the values are (docs/metrics.md)
    empty: bool = False  # "" allowed: an info metric's value the log did not say

    def admits(self, value: str) -> bool:
        if not value:
            return self.empty
        return len(value) <= self.max_len and _label_re(self.pattern).fullmatch(value) is not None


_DTYPE = r"(?:torch\.)?[a-z][a-z0-9_]*"
LABELS: tuple[Label, ...] = (
    Label("engine", 6, "sglang|vllm", "`sglang` or `vllm`"),
    Label("source", 255, r"[^\x00-\x1f\x7f]+", "the log source: the file stem, or `NAME` of `--log NAME=PATH` (not log text)"),
    Label("dp_rank", 6, r"\d+", "SGLang's `DPn` tag, vLLM's engine index (`Engine 00n`, `EngineCore_DPn`); `0` without one"),
    Label("outcome", 12, "parsed|ignored|unrecognized", "`parsed`, `ignored`, `unrecognized`"),
    Label(
        "model",
        200,
        r"[\w./~:@+=-]+",
        "`served_model_name`, else the model path: a name (the first of a list, as vLLM's own `model_name` label), "
        "without spaces, quotes, brackets or commas",
        empty=True,
    ),
    Label("kv_cache_dtype", 40, _DTYPE, "a dtype as the engine logs it (`auto`, `fp8_e4m3`, `torch.bfloat16`)", empty=True),
    Label(
        "mamba_ssm_dtype",
        24,
        r"(?:torch\.)?(?:float32|float16|bfloat16)|fp32|fp16|bf16|half|float|auto",
        "the SSM state's dtype, one the engines take (`float32`, `bfloat16`, `float16`, their short names, `auto`)",
        empty=True,
    ),
    Label(
        "radix_cache_strategy",
        32,
        r"[a-z][a-z_]*",
        "SGLang's mamba radix strategy (`auto`, `no_buffer`, `extra_buffer`, `extra_buffer_lazy`), vLLM's mamba cache "
        "mode (`none`, `align`, `all`)",
        empty=True,
    ),
    Label("tp_size", 4, r"\d+", "a number", empty=True),
    Label("dp_size", 4, r"\d+", "a number", empty=True),
    Label(
        "speculative",
        32,
        r"[A-Za-z][A-Za-z0-9_]*",
        "the speculative method: SGLang's `speculative_algorithm` (`EAGLE`, `NEXTN`), the `method` of vLLM's "
        "`speculative_config` (`eagle`, `mtp`)",
        empty=True,
    ),
    Label(
        "version",
        40,
        r"\d+(?:\.\d+)+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?(?:\+[A-Za-z0-9.]+)?",
        "a release as Python packages write it (PEP 440): the engine's (`0.11.1`, `0.6.6.post1`, `0.12.0rc1`, "
        "`0.10.2+cu128`), the exporter's on build_info",
        empty=True,
    ),
    Label("state", 20, r"[a-z][a-z_]*", "a server state (`starting` ... `dead`); a part of the mamba state (`conv`, `ssm`, ...)"),
    Label("kernel", 16, "flashinfer|triton|cutedsl|aiter_flydsl|sycl|cpu|other", "the GDN prefill kernel, or `other`"),
    Label("buffer", 16, r"[a-z][a-z0-9_]*", "a ReplaySSM ring buffer's name as logged (`d`, `k`, `g`, `rawv`, ...)"),
    Label("kind", 8, "new|cached", "`new`, `cached`"),
    Label("rule", 40, r"[a-z][a-z_]*", "a diagnosis rule (docs/rules.md)"),
    Label("flag", 64, r"--[a-z][a-z0-9-]*|[A-Z][A-Z0-9_]*", "an engine flag, or an environment variable"),
    Label("value", 32, r"[A-Za-z0-9_.+-]+", "the flag's value"),
    Label("rank", 2, r"\d+", "the flag's place in the finding's order"),
    Label(
        "basis",
        10,
        "logged|default|derived|wall_clock",
        "where the value comes from: `logged`, `default` (the engine's default), `derived`; of the server state "
        "(`hybrid_cache_server_state_basis`): `logged`, `derived` (a silence the log's time shows), `wall_clock`",
    ),
)
LABEL: dict[str, Label] = {lab.name: lab for lab in LABELS}

# the configuration keys each label of hybrid_cache_server_info is read from (the first one logged)
SERVER_INFO_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model", ("served_model_name", "model_path", "model")),
    ("kv_cache_dtype", ("kv_cache_dtype",)),
    ("mamba_ssm_dtype", ("mamba_ssm_dtype", "mamba_ssm_cache_dtype")),
    ("radix_cache_strategy", ("mamba_radix_cache_strategy", "mamba_scheduler_strategy", "mamba_cache_mode")),
    ("tp_size", ("tp_size", "tensor_parallel_size")),
    ("dp_size", ("dp_size", "data_parallel_size")),
    ("speculative", ("speculative_algorithm", "speculative_config")),
)


@functools.cache
def _label_re(pattern: str) -> re.Pattern:
    return re.compile(pattern)


__all__ = [
    "BY_NAME",
    "COUNTER",
    "GAUGE",
    "INFO",
    "LABEL",
    "LABELS",
    "LOG_METRICS",
    "METRICS",
    "Label",
    "Metric",
    "PREFIX",
    "SERVER_INFO_KEYS",
]
