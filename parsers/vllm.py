"""vLLM message parser: the text after the logging header -> one typed event.

Why it is shaped this way:

* Dispatch is on the message's first word (a dict lookup), because every line we care about
  starts with a fixed word (``Engine``, ``Avg``, ``GPU``, ``Model``, ...). Uvicorn access lines
  (``INFO:     127.0.0.1:... "POST ..." 200 OK``), the bulk of a busy log, cost one
  ``str.find``, one slice and one dict hit, before any regex runs.
* Lines whose first word is unknown (tracebacks, ``[rank0]: ...``) get a handful of substring
  checks for the errors that can appear mid-line, then the marker check: a known marker that
  did not parse gives :class:`~parsers.events.Unrecognized`, so format drift is counted.
* Request echo lines (``Received request ...: prompt: '...'``) are dropped by their first
  word: user text must never be read as a server fact.
* ``parse_message`` never raises: any bug or pathological input becomes ``Unrecognized``;
  lines over ``MAX_LINE`` chars are not regex-parsed at all.

Regex engine, stats line (``STATS_RE`` compiled by both, ``timeit`` best of 5 x 200k, Python
3.11.7, regex 2026.11.19, on a loaded 2-vCPU box so absolute numbers are noisy; ratios held over
two runs): 0.20 fully populated line: ``re`` 4.2-4.4 us vs ``regex`` 9.1-14.3 us; V0 line:
``re`` 4.5-4.8 us vs ``regex`` 7.0-7.4 us; mangled line failing at the end: ``re`` 9.1-13.5 us vs
``regex`` 14.7-23.3 us. stdlib ``re`` wins by 1.5-3x on these anchored, literal-heavy patterns,
so this module uses ``re`` throughout. An access line costs ~1.7 us in ``parse_message`` (vs
~16 us for a stats line including the event), dominated by the first-word dispatch.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable

from . import events as ev
from .numbers import GIB, to_int
from .reprs import scan

# longer lines are never regex-parsed (an engine-config dump is ~5-20 KB)
MAX_LINE = 1 << 20
# ast.literal_eval is only tried on dict reprs shorter than this
_MAX_LITERAL = 200_000

_NUM = r"(?:\d+(?:\.\d+)?|nan|inf)"

# --------------------------------------------------------------------------------------------
# runtime

# V0 (0.2-0.10) and V1 (0.7.1+) periodic stats line; one pattern, end-anchored so that a new
# field shows up as Unrecognized instead of being silently half-parsed.
STATS_RE = re.compile(
    r"(?:Engine (?P<engine>\d+): |(?P<n_engines>\d+) Engines Aggregated: )?"
    r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gen>[\d.]+) tokens/s, "
    r"Running: (?P<running>\d+) reqs,"
    r"(?: Swapped: (?P<swapped>\d+) reqs,)?"
    r" (?:Waiting|Pending): (?P<waiting>\d+) reqs,?"
    r"(?: Deferred: (?P<deferred>\d+) reqs,)?"
    r"(?: KV fetch: \d+ waiting to start, \d+ in progress, \d+ completed waiting,)?"
    r"(?: Preemptions: (?P<preemptions>\d+),)?"
    r" (?:\w+(?: \+ host)?) KV cache usage: (?P<kv>[\d.]+)%"
    r"(?:, CPU KV cache usage: (?P<cpu_kv>[\d.]+)%)?"
    r"(?:, Prefix cache hit rate: (?P<hit>[\d.]+)%)?"
    r"(?:, Corrupted: \d+ reqs)?"
    r"(?:, External prefix cache hit rate: [\d.]+%)?"
    r"(?:, MM cache hit rate: [\d.]+%)?"
    r"\.?\s*\Z"
)
# 0.7.0 V1: "Running: %d reqs, Waiting: %d reqs " (trailing space, nothing else)
STATS_070_RE = re.compile(r"Running: (?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs\s*\Z")
# V0 0.5.5-0.10.2 extra line when prefix caching is on
V0_PREFIX_HIT_RE = re.compile(r"Prefix cache hit rate: GPU: (?P<gpu>[\d.]+)%, CPU: (?P<cpu>[\d.]+)%\s*\Z")

SPEC_V1_RE = re.compile(
    r"SpecDecoding metrics: "
    r"(?:Draft acceptance rate: (?P<rate>" + _NUM + r")%, )?"
    r"(?:Mean acceptance length: (?P<mal>" + _NUM + r"), )?"
    r"(?:Accepted throughput: " + _NUM + r" tokens/s, Drafted throughput: " + _NUM + r" tokens/s, )?"
    r"Accepted: (?P<acc>\d+) tokens, Drafted: (?P<dr>\d+) tokens"
    r"(?:, Per-position acceptance rate: [\d., naif]*?)?"
    r"(?:, Avg Draft acceptance rate: (?P<avg>" + _NUM + r")%)?"
    r"\s*\Z"
)
SPEC_V0_RE = re.compile(
    r"Speculative metrics: Draft acceptance rate: (?P<rate>" + _NUM + r"), "
    r"System efficiency: " + _NUM + r", Number of speculative tokens: \d+, "
    r"Number of accepted tokens: (?P<acc>\d+), Number of draft tokens: (?P<dr>\d+), "
    r"Number of emitted tokens: \d+\.?\s*\Z"
)
PREEMPT_RE = re.compile(
    r"Sequence group \S+ is preempted by PreemptionMode\.(?P<mode>RECOMPUTE|SWAP) mode because "
    r".*?total_num_cumulative_preemption=(?P<n>\d+)"
)

# --------------------------------------------------------------------------------------------
# startup: capacity

KV_SIZE_RE = re.compile(
    r"(?P<dev>\w+(?: \+ host)?) KV cache size: (?P<tokens>\d[\d,]*) tokens"
    r"(?:, Maximum concurrency for (?P<len>\d[\d,]*) tokens per request: (?P<conc>[\d.]+)x)?\s*\Z"
)
MAX_CONC_RE = re.compile(r"Maximum concurrency for (?P<len>\d[\d,]*) tokens per request: (?P<conc>[\d.]+)x\s*\Z")
BLOCKS_RE = re.compile(r"# (?P<dev>\w+) blocks: (?P<gpu>\d+)(?:, # CPU blocks: (?P<cpu>\d+))?\s*\Z")
CACHE_INFO_RE = re.compile(
    r"(?:Engine (?P<engine>\d+): |\d+ Engines: )?"
    r"vllm cache_config_info with initialization after num_gpu_blocks is: (?P<blocks>\d+)\s*\Z"
)
AVAIL_KV_RE = re.compile(r"Available KV cache memory: (?P<gib>-?\d+(?:\.\d+)?) GiB\s*\Z")
# V0 0.6.4 (with the 'Gib' typo earlier on the same line)
V0_PROFILE_RE = re.compile(r"Memory profiling results: .*?\bkv_cache_size=(?P<gib>\d+(?:\.\d+)?)GiB")
# V0 0.6.5+, the last physical line of the multi-line profiling message
V0_REST_RE = re.compile(r".*the rest of the memory reserved for KV Cache is (?P<gib>\d+(?:\.\d+)?) ?GiB")
CURRENT_KV_RE = re.compile(r".*Current kv cache memory in use is (?P<num>\d+(?:\.\d+)?) (?P<unit>bytes|GiB)")
RESERVED_KV_RE = re.compile(
    r"Initial free memory .*?reserved (?P<gib>\d+(?:\.\d+)?) GiB memory for KV Cache "
    r"as specified by kv_cache_memory_bytes"
)
WEIGHTS_V0_RE = re.compile(r"Loading model weights took (?P<gb>\d+(?:\.\d+)?) GB")
WEIGHTS_RE = re.compile(r"Model loading took (?P<gb>\d+(?:\.\d+)?) Gi?B(?: memory)? and (?P<s>\d+(?:\.\d+)?) seconds")

# CPU worker (0.30+): 'Explicitly set (1.0/20.84) GiB for KV cache on node 0.' (VLLM_CPU_KVCACHE_SPACE or
# --kv-cache-memory-bytes) / 'Auto set (X/Y) GiB for KV cache on node N, with ...' (v1/worker/cpu_worker.py)
CPU_KV_SET_RE = re.compile(r"(?:Explicitly|Auto) set \((?P<gib>\d+(?:\.\d+)?)/\d+(?:\.\d+)? ?\) GiB for KV cache on node \d+")
# 0.34's extensible KV cache (v1/worker/extensible_kv_cache.py), sized after CUDA-graph capture and warmup; GiB
# through format_gib ('2.0', not '2.00'), except Extended's '%.2f'
_G = r"-?\d+(?:\.\d+)?"
WARMUP_RE = re.compile(
    r"Memory after warmup: " + _G + r" GiB free, " + _G + r" GiB committed to the KV cache, " + _G + r" GiB kept for "
    r"transient activations \(" + _G + r" GiB allocated at peak, " + _G + r" GiB of torch reservation growth\); "
    r"(?P<blocks>\d+) KV cache blocks \((?P<gib>" + _G + r") GiB\) fit within the requested (?P<req>" + _G + r") GiB\. "
    r"Torch may reserve up to " + _G + r" GiB\.\s*\Z"
)
REMAP_RE = re.compile(r"Remapping the KV cache from (?P<a>\d+) to (?P<b>\d+) blocks to fit the measured budget\.\s*\Z")
EXTENDED_RE = re.compile(r"Extended KV cache to (?P<blocks>\d+) blocks \((?P<gib>\d+(?:\.\d+)?) GiB\)\.\s*\Z")
# the warning for 0.7 < gpu_memory_utilization < 1.0 that withholds >= 1 GiB (its advice follows the first sentence)
CAP_WARNING_RE = re.compile(
    r"gpu_memory_utilization=(?P<u>\d+(?:\.\d+)?) caps this instance at (?P<req>" + _G + r") GiB, keeping "
    r"(?P<w>" + _G + r") GiB of free device memory out of the KV cache\. "
)
# 'Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB). ...' (0.10.2, 0.28+)
FREE_MEMORY_RE = re.compile(
    r"Free memory on device \((?P<free>" + _G + r")/(?P<total>" + _G + r") GiB\) on startup\. "
    r"Desired GPU memory utilization is \((?P<u>\d+(?:\.\d+)?), (?P<req>" + _G + r") GiB\)\."
)
# --max-model-len auto (v1/core/kv_cache_planning.py::_auto_fit_max_model_len): the memory it was fitted to reads
# 'X GiB GPU' (+ ' + Y GiB host' with hisparse); 0.34 adds the suffix when the length is fitted again after warmup
_FIT_MEM = r"\((?P<gib>" + _G + r") GiB \w+(?: \+ " + _G + r" GiB host)?"
AUTOFIT_RE = re.compile(
    r"Auto-fit max_model_len: (?:reduced from (?P<a>\d+) to (?P<b>\d+) to fit in|full model context length (?P<full>\d+) fits in) "
    r"available KV cache memory " + _FIT_MEM + r"\)(?P<suffix>; the final length is set after CUDA graph capture and warmup)?\s*\Z"
)
AUTOFIT_KEPT_RE = re.compile(
    r"Auto-fit max_model_len: using max_model_len=(?P<n>\d+), which fits in the KV cache memory left after CUDA graph "
    r"capture and warmup " + _FIT_MEM + r"\)\.\s*\Z"
)
AUTOFIT_FREE_RE = re.compile(r"Auto-fit max_model_len: attention-free model, using derived max_model_len=(?P<n>\d+)\s*\Z")
AUTO_REDUCED_RE = re.compile(
    r"--max-model-len auto reduced max_model_len from (?P<a>\d+) to (?P<b>\d+) " + _FIT_MEM + r" "
    r"(?P<when>left for the KV cache after CUDA graph capture and warmup|available for the KV cache)\)\."
)
EXTENSIBLE_OFF_RE = re.compile(r"Disabling the extensible KV cache: .*\. The KV cache will be sized from profiling estimates")
KV_GROUPS_RE = re.compile(r"kv cache group sizes [(\[](?P<sizes>\d+(?:, ?\d+)*),?[)\]]\s*\Z")  # a tuple (0.32+) or a list (0.30)
KV_LCM_RE = re.compile(r"kv lcm block sizes (?P<n>\d+)\s*\Z")

# --------------------------------------------------------------------------------------------
# startup: hybrid layout and mamba limits

BLOCK_SIZE_RE = re.compile(r"(?:\[XPU\] ?)?Setting attention block size to (?P<bs>\d+) tokens ")
PADDING_RE = re.compile(r"Padding mamba page size by (?P<pct>[\d.]+)% ")
PAD_LAYERS_RE = re.compile(r"Add (?P<n>\d+) padding layers, may waste at most [\d.]+% KV cache memory")
MAMBA_MODE_RE = re.compile(
    r"(?:Mamba cache mode is set to '(?P<m1>\w+)'"
    r"|Hybrid or mamba-based model detected without support for prefix caching with Mamba cache "
    r"'\w+' mode: falling back to '(?P<m2>\w+)' mode"
    r"|Warning: Prefix caching in Mamba cache '(?P<m3>\w+)' mode is currently enabled)"
)
NEMOTRON_DTYPE_RE = re.compile(r"Updating mamba_ssm_cache_dtype to '(?P<dt>\w+)' for NemotronH model")
QWEN35_DTYPE_RE = re.compile(
    r"Qwen3\.5 model specifies mamba_ssm_dtype='\w+' in its config, "
    r"but --mamba-ssm-cache-dtype='(?P<dt>\w+)' was passed"
)
# platforms/cpu.py (0.32-0.33): the CPU accelerated GDN backend's SSM state dtype
SSM_RESET_RE = re.compile(r"Reset SSM cache type to (?P<dt>\w+) for accelerated GDN mamba backend ")
SSM_STORAGE_RE = re.compile(r"Using (?P<dt>\w+) SSM state storage for the CPU accelerated GDN backend")
# layers/mamba/gdn/qwen_gdn_linear_attn.py::_log_gdn_backend_decision (0.33.0; 0.32.0 CPU form without requested=)
GDN_KERNEL_RE = re.compile(r"Using (?P<k>[\w/ ]+?) GDN prefill kernel \((?:requested=(?P<req>\w+), )?head_k_dim=(?P<hk>\w+)\)")
GDN_KERNELS = {
    "flashinfer": "flashinfer",
    "triton/fla": "triton",
    "triton": "triton",
    "cutedsl": "cutedsl",
    "aiter flydsl": "aiter_flydsl",
    "sycl": "sycl",
    "cpu": "cpu",
}
EXCEEDS_RE = re.compile(r"max_num_seqs \((?P<seqs>\d+)\) exceeds available Mamba cache blocks \((?P<blocks>\d+)\)")
CAPPING_RE = re.compile(
    r"Capping cudagraph capture sizes from max \d+ to \d+ to fit Mamba cache blocks "
    r"\((?P<blocks>\d+) blocks available\)"
)
NO_CAPTURE_RE = re.compile(r"No valid cudagraph capture sizes remain after capping to Mamba cache blocks \((?P<blocks>\d+)\)")

# --------------------------------------------------------------------------------------------
# startup: configuration and banners

ENGINE_CONFIG_RE = re.compile(r"Initializing (?:an|a V[01]) LLM engine \(v(?P<ver>[^)\s]+)\) with config: ")
MAX_NUM_SEQS_RE = re.compile(r"(?:Defaulting|Setting) max_num_seqs to (?P<n>\d+) for \S+ usage context")
MAX_MODEL_LEN_RE = re.compile(r"Using max model len (?P<n>\d[\d,]*)\s*\Z")
KV_DTYPE_RE = re.compile(r"Using (?P<dt>\w+) data type to store kv cache")
API_VERSION_RE = re.compile(r"vLLM API server version (?P<v>\S+)")
SERVER_VERSION_RE = re.compile(r"vLLM server version (?P<v>[^,\s]+), serving model (?P<m>\S+)")
LOGO_VERSION_RE = re.compile(r"(?:^|\s)version (?P<v>\d[\w.+\-]*)\s*\Z")
LOGO_MODEL_RE = re.compile(r"(?:^|\s)model +(?P<m>\S+)\s*\Z")
DICT_ITEM_RE = re.compile(r"\s*'(?P<k>[^']+)'\s*:\s*(?P<v>.*)\Z", re.S)
INT_RE = re.compile(r"-?\d+\Z")
FLOAT_RE = re.compile(r"-?\d+\.\d*(?:e-?\d+)?\Z")

# --------------------------------------------------------------------------------------------
# errors found anywhere in a line (tracebacks: 'ValueError: ...', '[rank0]: ...')

SEQ_LEN_ERR_RE = re.compile(r"To serve at least one request with the models?'s max seq len \(\d+\)")
V0_SEQ_LEN_ERR_RE = re.compile(
    r"The model's max seq len \(\d+\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache"
)
NO_MEMORY_ERR = "No available memory for the cache blocks"
# v1/utils.py wait_for_completion_or_failure (0.22+): a process of the server exited with an error; logged as
# 'Exception occurred while running API servers: <this>' and as the traceback's 'RuntimeError: <this>'. The
# Rust frontend (0.22+, RustFrontendProcessManager) and the API server processes; the engine core's own form
PROCESS_DIED_RE = re.compile(r"\bProcess \S+ \(PID: \d+\) died with exit code -?\d+")
ENGINE_PROC_DIED_RE = re.compile(r"\bEngine core process \S+ died unexpectedly")

# substrings that mean "this line is one of ours": when present but unparsed -> Unrecognized
MARKERS = (
    "Avg prompt throughput",
    "KV cache size:",
    "Maximum concurrency for",
    "GPU blocks",
    "Available KV cache memory",
    "SpecDecoding metrics",
    "Speculative metrics",
    "non-default args",
    "is preempted by",
    "Model loading took",
    "Loading model weights took",
    "Setting attention block size",
    "Padding mamba page size",
    "padding layers, may waste",
    "Mamba cache blocks",
    "num_gpu_blocks is",
    "LLM engine (v",
    "reserved for KV Cache",
    "kv cache memory in use",
    "GiB for KV cache on node",
    "kv cache group sizes",
    "GDN prefill kernel",
    "SSM cache type",
    "Memory after warmup",
    "Remapping the KV cache",
    "Extended KV cache to",
    "caps this instance at",
    "Auto-fit max_model_len",
    "--max-model-len auto reduced",
    "extensible KV cache: ",
)


def _num(s: str | None) -> float | None:
    """A printed float; ``None`` for absent / ``nan`` / ``inf`` (no data this interval)."""
    if s is None:
        return None
    v = float(s)
    if math.isnan(v) or math.isinf(v):
        return None
    return v


def _pct(s: str | None) -> float | None:
    v = _num(s)
    return None if v is None else v / 100.0


def _int(s: str | None) -> int | None:
    return None if s is None else int(s)


def _unrec(msg: str) -> ev.Unrecognized | None:
    """Unrecognized naming the first known marker in ``msg``, or None when it has none."""
    for marker in MARKERS:
        if marker in msg:
            return ev.Unrecognized(marker)
    return None


# --------------------------------------------------------------------------------------------
# handlers: each gets the whole message; returns event | None | Unrecognized


def _stats(msg: str) -> object:
    m = STATS_RE.match(msg)
    if m is None:
        return _unrec(msg)
    eng = m.group("engine")
    agg = m.group("n_engines")
    return ev.BatchStats(
        kind="stats",
        running=int(m.group("running")),
        queued=int(m.group("waiting")),
        kv_usage=float(m.group("kv")) / 100.0,
        gen_throughput=float(m.group("gen")),
        input_throughput=float(m.group("prompt")),
        prefix_hit_ratio=_pct(m.group("hit")),
        preemptions=_int(m.group("preemptions")),
        cpu_kv_usage=_pct(m.group("cpu_kv")),
        swapped=_int(m.group("swapped")),
        deferred=_int(m.group("deferred")),
        engines_aggregated=None if agg is None else int(agg),
        engine_index=None if eng is None else int(eng),
    )


def _engine_prefixed(msg: str) -> object:
    """``Engine 000: ...`` / ``N Engines Aggregated: ...`` / ``N Engines: ...``."""
    if "Avg prompt throughput" in msg:
        return _stats(msg)
    if "cache_config_info" in msg:
        return _cache_info(msg)
    return _fallback(msg)


def _running(msg: str) -> object:
    m = STATS_070_RE.match(msg)
    if m is None:
        return _fallback(msg)
    return ev.BatchStats(kind="stats", running=int(m.group("running")), queued=int(m.group("waiting")))


def _prefix_hit(msg: str) -> object:
    if not msg.startswith("Prefix cache hit rate"):
        return _fallback(msg)
    m = V0_PREFIX_HIT_RE.match(msg)
    if m is None:
        return ev.Unrecognized("Prefix cache hit rate")
    # its own kind: it feeds the hit ratio only, it is not one of the periodic stats lines
    return ev.BatchStats(kind="prefix_cache", prefix_hit_ratio=float(m.group("gpu")) / 100.0)


def _spec_v1(msg: str) -> object:
    m = SPEC_V1_RE.match(msg)
    if m is None:
        return _unrec(msg) or ev.Unrecognized("SpecDecoding")
    rate = m.group("avg") or m.group("rate")
    return ev.SpecDecoding(
        mean_accept_length=_num(m.group("mal")),
        accept_rate=_pct(rate),
        accepted_tokens=int(m.group("acc")),
        drafted_tokens=int(m.group("dr")),
    )


def _spec_v0(msg: str) -> object:
    m = SPEC_V0_RE.match(msg)
    if m is None:
        return _unrec(msg) or _fallback(msg)
    return ev.SpecDecoding(
        accept_rate=_num(m.group("rate")),
        accepted_tokens=int(m.group("acc")),
        drafted_tokens=int(m.group("dr")),
    )


def _kv_size(msg: str) -> object:
    m = KV_SIZE_RE.match(msg)
    if m is None:
        return _fallback(msg)
    ln = m.group("len")
    return ev.KVCapacity(
        tokens=to_int(m.group("tokens")),
        max_model_len=None if ln is None else to_int(ln),
        max_concurrency=_num(m.group("conc")),
        device=m.group("dev"),
    )


def _device_word(msg: str) -> object:
    """``GPU KV cache size ...`` / ``XPU ...`` / ``GPU + host ...``; anything else: fallback."""
    if "KV cache size:" in msg:
        return _kv_size(msg)
    return _fallback(msg)


def _max_conc(msg: str) -> object:
    m = MAX_CONC_RE.match(msg)
    if m is None:
        return _fallback(msg)
    return ev.KVCapacity(max_model_len=to_int(m.group("len")), max_concurrency=_num(m.group("conc")))


def _blocks(msg: str) -> object:
    m = BLOCKS_RE.match(msg)
    if m is None:
        return _fallback(msg)
    return ev.KVCapacity(gpu_blocks=int(m.group("gpu")), cpu_blocks=_int(m.group("cpu")), device=m.group("dev"))


def _cache_info(msg: str) -> object:
    m = CACHE_INFO_RE.match(msg)
    if m is None:
        return _fallback(msg)
    eng = m.group("engine")
    return ev.KVCapacity(gpu_blocks=int(m.group("blocks")), engine_index=None if eng is None else int(eng))


def _available(msg: str) -> object:
    m = AVAIL_KV_RE.match(msg)
    if m is None:
        return _fallback(msg)
    # negative when weights + activations exceed the budget (an error follows): no KV memory
    return ev.KVMemory(kv_bytes=max(0.0, float(m.group("gib")) * GIB), text=msg.rstrip())


def _memory(msg: str) -> object:
    """V0 0.6.4 ``Memory profiling results: ... kv_cache_size=X GiB ...``; 0.34 ``Memory after warmup: ...; N KV cache
    blocks (X GiB) fit within the requested R GiB. ...`` (one rank's measurement; the final count is the smallest
    over the ranks, ``Extended KV cache to N blocks``)."""
    if msg.startswith("Memory profiling results"):
        m = V0_PROFILE_RE.match(msg)
        if m is None:
            return ev.Unrecognized("Memory profiling results")
        return ev.KVMemory(kv_bytes=float(m.group("gib")) * GIB)
    if msg.startswith("Memory after warmup"):
        m = WARMUP_RE.match(msg)
        if m is None:
            return ev.Unrecognized("Memory after warmup")
        return ev.KVMemory(
            kv_bytes=float(m.group("gib")) * GIB,
            stage=ev.MEASURED,
            blocks=int(m.group("blocks")),
            requested_bytes=float(m.group("req")) * GIB,
            text=msg.rstrip(),
        )
    return _fallback(msg)


def _remapping(msg: str) -> object:
    """0.34 ``Remapping the KV cache from A to B blocks to fit the measured budget.``: warmup committed more than the
    measured budget fits; B is the final count."""
    m = REMAP_RE.match(msg)
    if m is None:
        return _fallback(msg)
    return ev.KVMemory(kv_bytes=None, stage=ev.FINAL, blocks=int(m.group("b")), text=msg.rstrip())


def _extended(msg: str) -> object:
    """0.34 ``Extended KV cache to N blocks (X GiB).``: the pool's final size (the bytes mapped, every rank)."""
    m = EXTENDED_RE.match(msg)
    if m is None:
        return _fallback(msg)
    return ev.KVMemory(kv_bytes=float(m.group("gib")) * GIB, stage=ev.FINAL, blocks=int(m.group("blocks")), text=msg.rstrip())


def _cap_warning(msg: str) -> object:
    """0.34 ``gpu_memory_utilization=U caps this instance at R GiB, keeping W GiB of free device memory out of the
    KV cache. ... Leave gpu_memory_utilization unset unless ...``: W is what unsetting the flag gives the KV cache."""
    m = CAP_WARNING_RE.match(msg)
    if m is None:
        return ev.Unrecognized("caps this instance at")
    return ev.KVMemory(
        kv_bytes=None,
        stage=ev.MEASURED,
        requested_bytes=float(m.group("req")) * GIB,
        memory_utilization=float(m.group("u")),
        withheld_bytes=float(m.group("w")) * GIB,
        text=msg.rstrip(),
    )


def _auto_fit(msg: str) -> object:
    """``Auto-fit max_model_len: ...``: fitted before warmup (``estimate`` when 0.34 says the final length comes after
    warmup), or (0.34) ``using max_model_len=N, which fits ... after CUDA graph capture and warmup`` (``final``)."""
    m = AUTOFIT_RE.match(msg)
    if m is not None:
        full = m.group("full")
        return ev.ContextFit(
            max_model_len=int(full or m.group("b")),
            original=int(full or m.group("a")),
            kv_bytes=float(m.group("gib")) * GIB,
            stage=ev.ESTIMATE if m.group("suffix") else ev.PROFILE,
            text=msg.rstrip(),
        )
    m = AUTOFIT_KEPT_RE.match(msg)
    if m is not None:
        n = int(m.group("n"))
        return ev.ContextFit(max_model_len=n, original=n, kv_bytes=float(m.group("gib")) * GIB, stage=ev.FINAL, text=msg.rstrip())
    m = AUTOFIT_FREE_RE.match(msg)
    if m is not None:
        n = int(m.group("n"))
        return ev.ContextFit(max_model_len=n, original=n, text=msg.rstrip())
    return _unrec(msg)


def _auto_reduced(msg: str) -> object:
    """0.34 ``--max-model-len auto reduced max_model_len from B to C (X GiB GPU left for the KV cache after CUDA graph
    capture and warmup).`` (``final``; a WARNING with a hint below 8192 tokens), or ``(... available for the KV
    cache)`` without the extensible KV cache."""
    m = AUTO_REDUCED_RE.match(msg)
    if m is None:
        return _unrec(msg)
    after = m.group("when").startswith("left")
    return ev.ContextFit(
        max_model_len=int(m.group("b")),
        original=int(m.group("a")),
        kv_bytes=float(m.group("gib")) * GIB,
        stage=ev.FINAL if after else ev.PROFILE,
        text=msg.rstrip(),
    )


def _disabling(msg: str) -> object:
    """0.34 ``Disabling the extensible KV cache: <reason>. The KV cache will be sized from profiling estimates ...``."""
    if EXTENSIBLE_OFF_RE.match(msg):
        return ev.ServerConfig(kind="extensible_kv_cache", args={"enable_extensible_kv_cache": False})
    return _fallback(msg)


def _v0_rest(msg: str) -> object:
    """V0 0.6.5+ ``model weights take ...; the rest of the memory reserved for KV Cache is X``."""
    if "reserved for KV Cache" not in msg:
        return _fallback(msg)
    m = V0_REST_RE.match(msg)
    if m is None:
        return ev.Unrecognized("reserved for KV Cache")
    return ev.KVMemory(kv_bytes=float(m.group("gib")) * GIB)


def _free_memory(msg: str) -> object:
    """``Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB). ... Current kv cache
    memory in use is N bytes`` (0.10.2, 0.28+): the KV pool size (0.34 with the extensible KV cache: the pre-warmup
    estimate), the device's memory and the utilization in force."""
    if "kv cache memory in use" not in msg:
        return _fallback(msg)
    m = CURRENT_KV_RE.match(msg)
    if m is None:
        return ev.Unrecognized("kv cache memory in use")
    v = float(m.group("num"))
    d = FREE_MEMORY_RE.match(msg)
    return ev.KVMemory(
        kv_bytes=v if m.group("unit") == "bytes" else v * GIB,
        device_total_bytes=None if d is None else float(d.group("total")) * GIB,
        memory_utilization=None if d is None else float(d.group("u")),
        requested_bytes=None if d is None else float(d.group("req")) * GIB,
        text=msg.rstrip(),
    )


def _initial(msg: str) -> object:
    if "kv_cache_memory_bytes" not in msg:
        return _fallback(msg)
    m = RESERVED_KV_RE.match(msg)
    if m is None:
        return ev.Unrecognized("kv_cache_memory_bytes")
    return ev.KVMemory(kv_bytes=float(m.group("gib")) * GIB)


def _model(msg: str) -> object:
    if msg.startswith("Model loading took"):
        m = WEIGHTS_RE.match(msg)
        if m is None:
            return ev.Unrecognized("Model loading took")
        return ev.WeightsLoaded(weight_bytes=float(m.group("gb")) * GIB, seconds=float(m.group("s")))
    if msg.startswith("model weights take"):
        return _v0_rest(msg)
    return _fallback(msg)


def _loading(msg: str) -> object:
    if msg.startswith("Loading model weights took"):
        m = WEIGHTS_V0_RE.match(msg)
        if m is None:
            return ev.Unrecognized("Loading model weights took")
        # vLLM's 'GB' here is float(x) / float(2**30): GiB
        return ev.WeightsLoaded(weight_bytes=float(m.group("gb")) * GIB)
    return _fallback(msg)


def _setting(msg: str) -> object:
    if "attention block size" in msg:
        m = BLOCK_SIZE_RE.match(msg)
        if m is None:
            return ev.Unrecognized("Setting attention block size")
        return ev.HybridLayout(block_size=int(m.group("bs")))
    if "max_num_seqs" in msg:
        return _max_num_seqs(msg)
    return _fallback(msg)


def _padding(msg: str) -> object:
    m = PADDING_RE.match(msg)
    if m is None:
        return _fallback(msg)
    return ev.HybridLayout(padding_ratio=float(m.group("pct")) / 100.0)


def _add(msg: str) -> object:
    m = PAD_LAYERS_RE.match(msg)
    if m is None:
        return _fallback(msg)
    return ev.HybridLayout(padding_layers=int(m.group("n")))


def _mamba_mode(msg: str) -> object:
    m = MAMBA_MODE_RE.match(msg)
    if m is None:
        return _fallback(msg)
    return ev.HybridLayout(mamba_cache_mode=m.group("m1") or m.group("m2") or m.group("m3"))


def _ssm_dtype(pattern: re.Pattern, cpu_avx512_bf16: bool = False):
    """A parser of one line that says the SSM state's dtype (its ``dt`` group): NemotronH's
    ``Updating ...``, Qwen3.5's (``Using the user-specified value.`` too), the CPU's ``Reset ...``
    (``cpu_avx512_bf16``: printed only on a CPU with AVX512-BF16)."""

    def parse(msg: str) -> object:
        m = pattern.match(msg)
        if m is None:
            return _fallback(msg)
        return ev.HybridLayout(mamba_ssm_dtype=m.group("dt"), cpu_avx512_bf16=cpu_avx512_bf16)

    return parse


def _capping(msg: str) -> object:
    m = CAPPING_RE.match(msg)
    if m is None:
        return _fallback(msg)
    # 'from max A' is the largest capture size, not max_num_seqs: leave that unknown
    return ev.MambaBlocksExceeded(max_num_seqs=None, blocks=int(m.group("blocks")))


def _no(msg: str) -> object:
    m = NO_CAPTURE_RE.match(msg)
    if m is not None:
        return ev.MambaBlocksExceeded(max_num_seqs=None, blocks=int(m.group("blocks")))
    return _fallback(msg)


def _preempt(msg: str) -> object:
    if "is preempted by" not in msg:
        return _fallback(msg)
    m = PREEMPT_RE.match(msg)
    if m is None:
        return ev.Unrecognized("is preempted by")
    return ev.Preemption(mode=m.group("mode").lower(), cumulative=int(m.group("n")))


def _non_default(msg: str) -> object:
    if not msg.startswith("non-default args:"):
        return _fallback(msg)
    args = _parse_dict_repr(msg)
    if args is None:
        return ev.Unrecognized("non-default args")
    return ev.ServerConfig(kind="non_default_args", args=args)


def _initializing(msg: str) -> object:
    m = ENGINE_CONFIG_RE.match(msg)
    if m is None:
        return _fallback(msg)
    args = _parse_kv_repr(msg[m.end() :])
    if "model" not in args:
        return ev.Unrecognized("LLM engine (v")
    return ev.ServerConfig(kind="engine_config", args=args, version=m.group("ver"))


def _max_num_seqs(msg: str) -> object:
    m = MAX_NUM_SEQS_RE.match(msg)
    if m is None:
        return _fallback(msg)
    return ev.ServerConfig(kind="max_num_seqs_default", args={"max_num_seqs": int(m.group("n"))})


def _using(msg: str) -> object:
    if msg.startswith("Using max model len"):
        m = MAX_MODEL_LEN_RE.match(msg)
        if m is None:
            return ev.Unrecognized("Using max model len")
        return ev.ServerConfig(kind="max_model_len", args={"max_model_len": to_int(m.group("n"))})
    m = KV_DTYPE_RE.match(msg)
    if m is not None:
        return ev.ServerConfig(kind="kv_cache_dtype", args={"kv_cache_dtype": m.group("dt")})
    if "GDN prefill kernel" in msg:
        return _gdn_kernel(msg)
    m = SSM_STORAGE_RE.match(msg)
    if m is not None:
        return ev.HybridLayout(mamba_ssm_dtype=m.group("dt"), cpu_avx512_bf16=True)
    return _fallback(msg)


def _vllm_word(msg: str) -> object:
    """``vLLM API server version X`` / ``vLLM server version X, serving model M`` /
    ``vllm cache_config_info ...`` (0.9.0, no Engine prefix)."""
    m = SERVER_VERSION_RE.match(msg)
    if m is not None:
        return ev.ServerStarting(version=m.group("v"), model=m.group("m"))
    m = API_VERSION_RE.match(msg)
    if m is not None:
        return ev.ServerStarting(version=m.group("v"))
    if msg.startswith("vllm cache_config_info"):
        return _cache_info(msg)
    return _fallback(msg)


def _starting(msg: str) -> object:
    # "Starting vLLM API server [0 ]on URL" (api_server.py); "Starting vLLM server on URL" in the 0.32-0.34 wheels
    # (entrypoints/launchers/api_server/entry.py)
    if msg.startswith(("Starting vLLM API server", "Starting vLLM server on ")):
        return ev.ServerReady()
    return _fallback(msg)


def _uvicorn(msg: str) -> object:
    """Uvicorn's own lines (``INFO:     ...``): access lines, and the startup-complete one."""
    if msg.endswith("Application startup complete.") or msg.endswith("Application startup complete.\n"):
        return ev.ServerReady()
    if msg.endswith("Shutting down") and msg.startswith("INFO:     Shutting"):
        return ev.Lifecycle("stopping", "uvicorn")
    if msg.startswith("INFO:     Finished server process"):
        return ev.Lifecycle("stopped", "uvicorn")
    return None


def _application(msg: str) -> object:
    if msg.startswith("Application startup complete"):
        return ev.ServerReady()
    return _fallback(msg)


def _logo(msg: str) -> object:
    """0.15+ ASCII logo; its lines end in ``version X`` and ``model   M``."""
    if "█" in msg or "▄" in msg or "▀" in msg:
        m = LOGO_VERSION_RE.search(msg)
        if m is not None:
            return ev.ServerStarting(version=m.group("v"))
        m = LOGO_MODEL_RE.search(msg)
        if m is not None:
            return ev.ServerStarting(model=m.group("m"))
        return None
    return _fallback(msg)


def _kv_set(msg: str) -> object:
    """CPU worker: ``Explicitly set (1.0/20.84) GiB for KV cache on node 0.`` (the KV pool's bytes)."""
    m = CPU_KV_SET_RE.match(msg)
    if m is None:
        return _fallback(msg)
    return ev.KVMemory(kv_bytes=float(m.group("gib")) * GIB)


def _kv_word(msg: str) -> object:
    """``kv cache group sizes (384, 384, 384, 384)`` / ``kv lcm block sizes 384``."""
    m = KV_GROUPS_RE.match(msg)
    if m is not None:
        return ev.KVCacheGroups(block_sizes=tuple(int(x) for x in m.group("sizes").split(",")))
    m = KV_LCM_RE.match(msg)
    if m is not None:
        return ev.KVCacheGroups(lcm_block_size=int(m.group("n")))
    return _fallback(msg)


def _gdn_kernel(msg: str) -> object:
    m = GDN_KERNEL_RE.match(msg)
    if m is None:
        return ev.Unrecognized("GDN prefill kernel")
    hk = m.group("hk")
    return ev.GDNPrefillKernel(
        kernel=GDN_KERNELS.get(m.group("k").strip().lower(), "other"),
        requested=m.group("req"),
        head_k_dim=int(hk) if hk.isdigit() else None,
    )


def _shutdown(msg: str) -> object:
    """vLLM's ``[shutdown] ...`` lines (0.30+): the two that start a shutdown are read, the rest of the
    sequence (also printed after an engine death) is not."""
    if msg.startswith("[shutdown] API server: shutdown triggered"):
        return ev.Lifecycle("stopping", "api_server")
    if msg.startswith("[shutdown] EngineCore: trigger received signal"):
        return ev.Lifecycle("stopping", "signal")
    return None


def _shutting(msg: str) -> object:
    """``Shutting down FastAPI HTTP server.`` (launcher.py before 0.30)."""
    if msg.startswith("Shutting down FastAPI HTTP server"):
        return ev.Lifecycle("stopping", "api_server")
    return _fallback(msg)


def _engine_core(msg: str) -> object:
    """``EngineCore encountered a fatal error.`` (v1/engine/core.py): the engine died."""
    if msg.startswith("EngineCore encountered a fatal error"):
        return ev.Lifecycle("dead", "fatal_error")
    return _fallback(msg)


def _ignore(msg: str) -> None:
    return None


def _fallback(msg: str) -> object:
    """First word unknown (or its handler did not match): fatal errors anywhere in the line,
    then the known-marker check."""
    if "Mamba cache blocks" in msg:
        m = EXCEEDS_RE.search(msg)
        if m is not None:
            return ev.MambaBlocksExceeded(max_num_seqs=int(m.group("seqs")), blocks=int(m.group("blocks")))
        m = CAPPING_RE.search(msg) or NO_CAPTURE_RE.search(msg)
        if m is not None:
            return ev.MambaBlocksExceeded(max_num_seqs=None, blocks=int(m.group("blocks")))
    if "max seq len" in msg and (SEQ_LEN_ERR_RE.search(msg) or V0_SEQ_LEN_ERR_RE.search(msg)):
        return ev.PoolExhausted(pool="kv", fatal=True)
    if NO_MEMORY_ERR in msg:
        return ev.PoolExhausted(pool="kv", fatal=True)
    if msg.startswith("gpu_memory_utilization="):
        return _cap_warning(msg)
    if "EngineDeadError" in msg:
        return ev.Lifecycle("dead", "engine_dead")
    if "Engine core initialization failed" in msg:
        return ev.Lifecycle("dead", "init_failed")
    if "died" in msg:
        if PROCESS_DIED_RE.search(msg):
            return ev.Lifecycle("dead", "process_died")
        if ENGINE_PROC_DIED_RE.search(msg):
            return ev.Lifecycle("dead", "engine_dead")
    return _unrec(msg)


# first word of the message -> handler
_DISPATCH: dict[str, Callable[[str], object]] = {
    "INFO:": _uvicorn,
    "WARNING:": _ignore,
    "ERROR:": _fallback,
    "DEBUG:": _ignore,
    "Engine": _engine_prefixed,
    "Avg": _stats,
    "Running:": _running,
    "Prefix": _prefix_hit,
    "SpecDecoding": _spec_v1,
    "Speculative": _spec_v0,
    "Sequence": _preempt,
    "GPU": _device_word,
    "CPU": _device_word,
    "XPU": _device_word,
    "TPU": _device_word,
    "HPU": _device_word,
    "NPU": _device_word,
    "Maximum": _max_conc,
    "#": _blocks,
    "vllm": _vllm_word,
    "vLLM": _vllm_word,
    "Available": _available,
    "Memory": _memory,
    "Remapping": _remapping,
    "Extended": _extended,
    "Auto-fit": _auto_fit,
    "--max-model-len": _auto_reduced,
    "Disabling": _disabling,
    "model": _model,
    "Free": _free_memory,
    "Current": _free_memory,
    "Initial": _initial,
    "Model": _model,
    "Loading": _loading,
    "Setting": _setting,
    "[XPU]Setting": _setting,
    "Padding": _padding,
    "Add": _add,
    "Mamba": _mamba_mode,
    "Hybrid": _mamba_mode,
    "Warning:": _mamba_mode,
    "Updating": _ssm_dtype(NEMOTRON_DTYPE_RE),
    "Qwen3.5": _ssm_dtype(QWEN35_DTYPE_RE),
    "Capping": _capping,
    "No": _no,
    "non-default": _non_default,
    "Initializing": _initializing,
    "Defaulting": _max_num_seqs,
    "Using": _using,
    "Starting": _starting,
    "Application": _application,
    "": _logo,
    # request echo lines carry user text: never look inside them
    "Received": _ignore,
    "Added": _ignore,
    "Finished": _ignore,
    "Aborted": _ignore,
    "Multiplying": _ignore,
    # the engine's dump of a failed step (dump_input.py): its config echo is not a boot, nor drift
    "Dumping": _ignore,
    "Explicitly": _kv_set,
    "Auto": _kv_set,
    "kv": _kv_word,
    "Reset": _ssm_dtype(SSM_RESET_RE, cpu_avx512_bf16=True),
    "[shutdown]": _shutdown,
    "Shutting": _shutting,
    "EngineCore": _engine_core,
}


# the first words of the messages this parser reads facts from (the joiner's quick test of a message cut before its
# marker, parsers/cuts.py): every word of the dispatch but uvicorn's and the request echoes'
FIRST_WORDS: tuple[str, ...] = tuple(w for w, h in _DISPATCH.items() if w and h is not _ignore and w != "INFO:")

# a logo line may start with U+FFFD: Docker's json-file driver splits long output into records on
# byte counts and replaces a multi-byte character cut in two by U+FFFD
_LOGO_CHARS = ("▄", "█", "▀", "\ufffd")


def starts_message(msg: str, pos: int = 0) -> bool:
    """Whether a vLLM message this parser reads may begin at ``msg[pos]``: its first word
    has a handler of its own in ``_DISPATCH`` (request echoes and uvicorn's other lines included:
    they are vLLM's lines, read as nothing), or it is ``N Engines ...`` or a logo line.
    ``parsers.header.preamble`` asks it to find a message behind a header it does not know."""
    sp = msg.find(" ", pos, pos + 64)
    word = msg[pos:sp] if sp >= 0 else msg[pos:]
    if word:
        return (
            word in _DISPATCH
            or (word.isdigit() and msg.startswith(" Engines", pos + len(word)))
            or word.startswith("gpu_memory_utilization=")  # 0.34's cap warning starts with the value it names
        )
    return msg[pos : pos + 1] in _LOGO_CHARS or (sp == pos and msg[pos:].lstrip(" ")[:1] in _LOGO_CHARS)


# The messages a writer or a terminal may cut, each as the pattern of its text from its first character: a
# line is such a message cut short when its message is a proper prefix of one (``regex``'s partial match,
# parsers/cuts.py), the proof the joiner asks before it holds a line. None begins with free text.
LABELLED_MARKERS: tuple[str, ...] = ()
PREFIX_GRAMMARS: tuple[str, ...] = tuple(
    # a device word and a kernel name of one or two words, not any text
    r.pattern.replace(r"(?P<dev>\w+", r"(?P<dev>[A-Z]{2,5}").replace(r"(?P<k>[\w/ ]+?)", r"(?P<k>[\w/]+(?: [\w/]+)?)")
    for r in (
        STATS_RE,
        SPEC_V1_RE,
        SPEC_V0_RE,
        KV_SIZE_RE,
        MAX_CONC_RE,
        BLOCKS_RE,
        CACHE_INFO_RE,
        AVAIL_KV_RE,
        WEIGHTS_V0_RE,
        WEIGHTS_RE,
        CPU_KV_SET_RE,
        KV_GROUPS_RE,
        KV_LCM_RE,
        BLOCK_SIZE_RE,
        PADDING_RE,
        PAD_LAYERS_RE,
        MAMBA_MODE_RE,
        NEMOTRON_DTYPE_RE,
        QWEN35_DTYPE_RE,
        SSM_RESET_RE,
        SSM_STORAGE_RE,
        GDN_KERNEL_RE,
        EXCEEDS_RE,
        CAPPING_RE,
        MAX_MODEL_LEN_RE,
        KV_DTYPE_RE,
        SERVER_VERSION_RE,
    )
) + (
    r"non-default args: \{.*\}",
    ENGINE_CONFIG_RE.pattern + r"model=",
)


# a message that begins with one of vLLM's markers (after the engine index or the device word that precede some)
_OPENS_RE = re.compile(r"(?:Engine \d+: |\d+ Engines(?: Aggregated)?: |\w+(?: \+ host)? |# )?(?:" + "|".join(map(re.escape, MARKERS)) + ")")


def opens_known(msg: str) -> bool:
    """Whether ``msg`` begins like one of the messages this parser reads (its marker at the start, not
    inside it: another engine's line may name one further on)."""
    return _OPENS_RE.match(msg) is not None


def parse_message(msg: str) -> object:
    """Return an event from :mod:`parsers.events`, ``None`` (irrelevant) or ``Unrecognized``.

    Never raises: a parser bug on some unforeseen input must cost one line, not the exporter.
    """
    try:
        if len(msg) > MAX_LINE:
            return _unrec(msg[:4096]) if msg[:5] != "INFO:" else None
        sp = msg.find(" ", 0, 64)
        handler = _DISPATCH.get(msg[:sp] if sp >= 0 else msg)
        if handler is None:
            if msg[:1].isdigit():  # 'N Engines Aggregated: ...' / 'N Engines: ...'
                return _engine_prefixed(msg)
            if msg[:1] in _LOGO_CHARS:
                return _logo(msg)
            return _fallback(msg)
        return handler(msg)
    except Exception as exc:  # noqa: BLE001 - the contract is "never raise"
        return ev.Unrecognized(f"parser error: {type(exc).__name__}")


# --------------------------------------------------------------------------------------------
# Python repr parsing (config dumps)


def _split_top(s: str) -> list[str]:
    """Split on commas outside quotes and brackets (``(`` ``[`` ``{`` and enum ``<X.Y: 1>``);
    tolerates unbalanced input (:func:`parsers.reprs.scan`)."""
    parts: list[str] = []
    start = 0
    for i in scan(s)[0]:
        parts.append(s[start:i].strip())
        start = i + 1
    parts.append(s[start:].strip())
    return parts


def _literal(v: str) -> object:
    """A repr value -> Python value where it is a plain literal, else the string itself."""
    if v == "None":
        return None
    if v == "True":
        return True
    if v == "False":
        return False
    if INT_RE.match(v):
        return int(v)
    if FLOAT_RE.match(v):
        return float(v)
    if v[:1] in ("'", '"', "[", "{", "(") and len(v) < _MAX_LITERAL:
        try:
            return ast.literal_eval(v)
        except Exception:  # noqa: BLE001 - object reprs inside: keep the text
            return v
    return v


def _parse_dict_repr(text: str) -> dict[str, object] | None:
    """``non-default args: {...}``: literal_eval, or per key when it holds object reprs."""
    i = text.find("{")
    if i < 0:
        return None
    body = text[i:].rstrip()
    if len(body) < _MAX_LITERAL:
        try:
            v = ast.literal_eval(body)
        except Exception:  # noqa: BLE001 - e.g. AttentionConfig(...) inside
            v = None
        if isinstance(v, dict):
            return {str(k): x for k, x in v.items()}
    inner = body[1:-1] if body.endswith("}") else body[1:]
    out: dict[str, object] = {}
    for item in _split_top(inner):
        m = DICT_ITEM_RE.match(item)
        if m is not None:
            out[m.group("k")] = _literal(m.group("v").strip())
    return out or None


# values kept verbatim (nested reprs): never literal_eval'd, never typed
_RAW_KEYS = frozenset({"speculative_config"})


def _parse_kv_repr(cfg: str) -> dict[str, object]:
    """``model='x', speculative_config=None, ..., max_seq_len=32768,  kv_cache_dtype=auto``."""
    out: dict[str, object] = {}
    parts = _split_top(cfg)
    if parts and parts[-1].endswith(")") and parts[-1].count("(") < parts[-1].count(")"):
        parts[-1] = parts[-1][:-1]  # V0 0.4-0.6.3: '..., served_model_name=x)'
    for item in parts:
        k, sep, v = item.partition("=")
        k = k.strip()
        if not sep or not k.isidentifier():
            continue
        v = v.strip()
        if k in _RAW_KEYS:
            out[k] = None if v == "None" else v
        else:
            out[k] = _literal(v)
    return out
