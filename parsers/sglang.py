"""SGLang message parser: the text after the ``[ts tags] `` header -> one typed event.

Every line family and release variant of docs/formats/sglang.md
(0.4.6 -> 0.5.23, plus the proposed #32360 cap wording and FreeToken's look-alike batch lines).

Why it is shaped like this:

* Most lines are uvicorn access lines (``INFO:     127.0.0.1:... "POST ..." 200 OK``) and batch
  lines, so ``parse_message`` dispatches on the first character of the message and runs a
  few ``startswith`` / ``in`` tests before any regex (timings below). Lines over 64 KB (except
  ``server_args``, scanned within bounds) are never regex-parsed: marked ones are ``Unrecognized``.
* Batch lines are split with ``str`` methods (``split(', ')`` + ``rpartition(': ')``), not one big
  regex: the key set drifts with every release (docs/formats/sglang.md#older-shapes), and a generic split keeps unknown keys
  harmless. Only the header is a regex.
* ``regex`` vs stdlib ``re`` for the batch path (``timeit``, best of 5 x 200k, CPython 3.11 on a
  shared, loaded 2-core box, so absolute numbers are slow and noisy; three runs): header match
  ``re`` 0.38-0.87 us vs ``regex`` 1.2-1.7 us; whole ``parse_message`` on a 0.5.23 decode line
  ``re`` 11.3-15.4 us vs ``regex`` 13.0-17.0 us (prefill 13.0-19.4 vs 17.7-19.4); a ``findall``
  body (``([^,]+?): ([^,]+)``) costs 6-11 us with either engine against 3.0-4.5 us for
  ``split(', ')`` + ``rpartition``. So the hot path is stdlib ``re`` + ``str`` methods; ``regex``
  is used only for the recursive ``server_args`` value grammar (stdlib has no recursion), which
  runs once per boot. An access line costs ~0.4 us, another irrelevant line ~1 us.
* Format drift must be visible: a line that carries a known marker but does not parse returns
  :class:`~parsers.events.Unrecognized`. Nothing raises: ``parse_message`` wraps the dispatch
  and turns any unexpected exception on a marked line into ``Unrecognized``.
* Sizes are bytes: SGLang's ``GB`` is GiB (it divides by ``1 << 30``).
"""

from __future__ import annotations

import re

import regex

from . import events as ev
from .numbers import GIB

Result = object | None  # an event dataclass, None (ignored) or ev.Unrecognized

# --------------------------------------------------------------------------------------------
# batch lines (docs/formats/sglang.md#batch-lines)

BATCH_HEAD_RE = re.compile(r"(Prefill|Decode) batch(?: \[(\d+)\])?[.,] ")


def _used(v: str) -> int:
    """FreeToken's ``used/total`` -> used."""
    return int(v.partition("/")[0])


def graph_flag(v: str) -> bool:
    """``cuda graph: True`` (or cpu / npu / musa / xpu graph) -> the flag; spaces around it do not count."""
    return v.strip() == "True"


# key as printed -> (BatchStats attribute, converter); converters are builtins on the hot path
BATCH_KEYS: dict[str, tuple[str, object]] = {
    "#running-req": ("running", int),
    "#queue-req": ("queued", int),
    "full token usage": ("kv_usage", float),
    "token usage": ("kv_usage", float),
    "#full token": ("kv_used_tokens", int),
    "#token": ("kv_used_tokens", int),
    "mamba usage": ("mamba_usage", float),
    "mamba num": ("mamba_used", int),
    "swa token usage": ("swa_usage", float),
    "#swa token": ("swa_used_tokens", int),
    "gen throughput (token/s)": ("gen_throughput", float),
    "input throughput (token/s)": ("input_throughput", float),
    "accept len": ("accept_length", float),
    "accept rate": ("accept_rate", float),
    "#new-seq": ("new_seqs", int),
    "#new-token": ("new_tokens", int),
    "#cached-token": ("cached_tokens", int),
    "#pending-token": ("pending_tokens", int),
    # FreeToken (not SGLang, docs/formats/sglang.md#older-shapes): '#mamba-slot: 3/48', '#swa-token: 10/4096', 'swa usage: 0.01'
    "#mamba-slot": ("mamba_used", _used),
    "#swa-token": ("swa_used_tokens", _used),
    "swa usage": ("swa_usage", float),
}
_RATIO_ATTRS = frozenset({"kv_usage", "mamba_usage", "swa_usage", "accept_rate"})
# HiSparse (>=0.5.11) GPU-resident pool: used only when no full/plain token fields are present
HISPARSE_KEYS: dict[str, tuple[str, object]] = {"#gpu token": ("kv_used_tokens", int), "gpu token usage": ("kv_usage", float)}


def _lenient(attr: str, v: str) -> int | float | None:
    """Slow path for a value the builtin converter refused: ``87.5%``, ``1,024``, ``12.0``."""
    v = v.strip()
    try:
        if v.endswith("%"):
            x = float(v[:-1])
            return x / 100.0 if attr in _RATIO_ATTRS else x
        x = float(v.replace(",", ""))
    except ValueError:
        return None
    if attr in _RATIO_ATTRS or attr.endswith(("throughput", "length")):
        return x
    return int(x) if x.is_integer() else None


def _batch(msg: str) -> Result:
    """``Prefill batch`` / ``Decode batch`` lines of every release (docs/formats/sglang.md#fields, #older-shapes).

    Generic ``key: value`` split (on the *last* ``': '`` of each item) so that unknown keys,
    trailing ``', '``, graph-label variants and ``est.``/occupancy suffixes never break it.
    """
    m = BATCH_HEAD_RE.match(msg)
    if m is None:
        return ev.Unrecognized("batch header")
    b = ev.BatchStats("prefill" if msg[0] == "P" else "decode")
    if m.group(2) is not None:
        b.forward_iter = int(m.group(2))
    keys = BATCH_KEYS
    found = False
    hisparse = None
    items = msg[m.end() :].rstrip(", \t").split(", ")
    for item in items:
        k, _, v = item.rpartition(": ")
        spec = keys.get(k)
        if spec is not None:
            attr, conv = spec
            try:
                x = conv(v)
            except ValueError:
                x = _lenient(attr, v)
                if x is None:
                    return ev.Unrecognized(f"batch value {k!r}")
            setattr(b, attr, x)
            found = True
        elif k.endswith(" graph"):  # cuda / cpu / npu / musa / xpu graph
            b.cuda_graph = graph_flag(v)
        elif k in HISPARSE_KEYS:
            if hisparse is None:
                hisparse = []
            hisparse.append((k, v))
        # everything else (est. ..., fwd occupancy, PD queues, cap len, items without ': ') is ignored
    if hisparse is not None:
        for k, v in hisparse:
            attr, conv = HISPARSE_KEYS[k]
            if getattr(b, attr) is None:
                try:
                    x = conv(v)
                except ValueError:
                    x = _lenient(attr, v)
                    if x is None:
                        return ev.Unrecognized(f"batch value {k!r}")
                setattr(b, attr, x)
                found = True
    if not found:
        return ev.Unrecognized("batch no known field")
    return b


# --------------------------------------------------------------------------------------------
# retraction / exhaustion (docs/formats/sglang.md#retraction-and-mamba-exhaustion)

_RETRACT_RE = re.compile(
    r"(KV cache pool is full\. Retract requests\.|Testing retraction\.|Decode out of memory happened\.)"
    r" #retracted_reqs: (\d+)"
    r"(?:, #aborted_retracted_reqs: (\d+))?"
    r"(?:, #new_tokens_gained: (-?\d+))?"
    r"(?:, #mamba_num_gained: (-?\d+))?"
    r"(?:, #new_token_ratio: ([\d.]+) -> ([\d.]+))?"
)


def _retraction(msg: str) -> Result:
    """``KV cache pool is full. Retract requests.`` and its older / test variants."""
    m = _RETRACT_RE.match(msg)
    if m is None:
        return ev.Unrecognized("retraction")
    r = ev.Retraction(int(m.group(2)), test=msg[0] == "T")
    if m.group(3) is not None:
        r.aborted = int(m.group(3))
    if m.group(4) is not None:
        r.new_tokens_gained = int(m.group(4))
    if m.group(5) is not None:
        r.mamba_num_gained = int(m.group(5))
    if m.group(6) is not None:
        r.new_token_ratio_before = float(m.group(6))
        r.new_token_ratio_after = float(m.group(7))
    return r


# (marker, pool, fatal). 'Out of memory even after retracting' (>=0.5.8) aborts one request,
# the scheduler survives; the others are raised (ValueError/RuntimeError/AssertionError).
_EXHAUSTED: tuple[tuple[str, str, bool], ...] = (
    ("Not enough space for mamba", "mamba", True),
    ("Not enough GPU memory for hybrid (mamba/linear-attention)", "mamba", True),
    ("Hybrid (mamba/linear-attention) state cache is too small", "mamba", True),
    ("Out of memory even after retracting", "kv", False),
    ("Failed to retract any request", "kv", True),
    ("Decode out of memory. Try to lower your batch size", "kv", True),
    ("Retraction host KV pool exhausted", "kv", False),
    ("Beam search group aborted: KV cache pool is full", "kv", False),
)


def _exhausted(msg: str) -> Result:
    """Pool-exhaustion messages, bare or after ``SomethingError: `` in a traceback line."""
    for marker, pool, fatal in _EXHAUSTED:
        i = msg.find(marker)
        if i == 0 or (i > 0 and msg[:i].rstrip().endswith(("Error:", "Exception:", "exception:"))):
            return ev.PoolExhausted(pool, fatal)
    # elsewhere (the 'assert ..., "Not enough ..."' source line of a traceback) it would double count
    return None


# --------------------------------------------------------------------------------------------
# startup capacity lines (docs/formats/sglang.md#startup-lines)

_F = r"(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"  # a printed float, incl. raw repr floats of 0.5.3-0.5.6

_MAMBA_RE = re.compile(
    r"Mamba Cache is allocated\. (?:max_mamba_cache_size: (\d+), )?"
    rf"conv_state size: {_F} ?GB, ssm_state size: {_F} ?GB"
    rf"(?:,? intermediate_ssm_state_cache size: {_F} ?GB,? intermediate_conv_window_cache size: {_F} ?GB)?"
)


def _mamba(msg: str) -> Result:
    """``Mamba Cache is allocated.`` 0.5.2 / 0.5.3 / >=0.5.3.post3, with or without spec buffers."""
    m = _MAMBA_RE.search(msg)
    if m is None:
        return ev.Unrecognized("mamba cache")
    e = ev.MambaCacheAllocated(int(m.group(1)) if m.group(1) else None, float(m.group(2)) * GIB, float(m.group(3)) * GIB)
    if m.group(4) is not None:
        e.intermediate_ssm_bytes = float(m.group(4)) * GIB
        e.intermediate_conv_bytes = float(m.group(5)) * GIB
    return e


_KV_RE = re.compile(
    r"(?:(.+?) )?KV Cache (is allocated|VA upper bound)\. (?:dtype: ([\w.]+), )?#tokens: (\d+), "
    rf"(?:K size: {_F} ?GB, V size: {_F} ?GB|KV size: {_F} ?GB)"
)
_POST_KV_RE = re.compile(
    r"Post-capture KV sizing: (draft )?KV cache allocated\. (?:dtype: ([\w.]+), )?#tokens: (\d+), "
    rf"(?:K size: {_F} ?GB, V size: {_F} ?GB|KV size: {_F} ?GB)"
)
_POST_SWA_RE = re.compile(r"Post-capture KV sizing: full_layer_tokens=(\d+), swa_layer_tokens=(\d+)")
_POST_CAP_RE = re.compile(r"Post-capture KV sizing: max_running_requests (\d+) -> (\d+)")


def _kv_event(tokens: str, k: str | None, v: str | None, kv: str | None, dtype: str | None) -> ev.KVCacheAllocated:
    e = ev.KVCacheAllocated(int(tokens), dtype=dtype)
    if kv is not None:
        e.kv_bytes = float(kv) * GIB
    else:
        e.k_bytes = float(k) * GIB  # type: ignore[arg-type]
        e.v_bytes = float(v) * GIB  # type: ignore[arg-type]
    return e


def _kv(msg: str) -> Result:
    """``[label ]KV Cache is allocated|VA upper bound.`` (<=0.5.1 .. >=0.5.18)."""
    m = _KV_RE.search(msg)
    if m is None:
        return ev.Unrecognized("kv cache")
    e = _kv_event(m.group(4), m.group(5), m.group(6), m.group(7), m.group(3))
    label = (m.group(1) or "").strip()  # (an indented paste's spaces are no label)
    if label:
        e.label = label
    e.upper_bound = m.group(2) == "VA upper bound"
    return e


def _post_capture(msg: str) -> Result:
    """``Post-capture KV sizing: ...`` (>=0.5.18 with SGLANG_ENABLE_POST_CAPTURE_KV_SIZING)."""
    m = _POST_KV_RE.match(msg)
    if m is not None:
        e = _kv_event(m.group(3), m.group(4), m.group(5), m.group(6), m.group(2))
        e.draft = m.group(1) is not None
        return e
    m = _POST_CAP_RE.match(msg)
    if m is not None:
        return ev.RequestCapReduced(int(m.group(1)), int(m.group(2)), "kv")
    m = _POST_SWA_RE.match(msg)
    if m is not None:
        return ev.SWAPool(swa_tokens=int(m.group(2)), full_tokens=int(m.group(1)))
    return ev.Unrecognized("post-capture kv sizing")


_SWAKV_RE = re.compile(rf"SWAKVPool (?:mem usage|VA upper bound): {_F} ?GB, swa size: (\d+), full size: (\d+)")
_SLIDING_RE = re.compile(
    r"use sliding window memory pool(?: \(all swa\))?\. (?:full_layer_tokens=(\d+), )?swa_layer_tokens=(\d+)",
    re.IGNORECASE,
)


def _swa(msg: str) -> Result:
    """``SWAKVPool mem usage|VA upper bound: ...`` and ``Use [Ss]liding window memory pool...``."""
    if msg[0] == "S":
        m = _SWAKV_RE.match(msg)
        if m is None:
            return ev.Unrecognized("swa kv pool")
        return ev.SWAPool(int(m.group(2)), int(m.group(3)), float(m.group(1)) * GIB)
    m = _SLIDING_RE.match(msg)
    if m is None:
        return ev.Unrecognized("sliding window pool")
    return ev.SWAPool(int(m.group(2)), int(m.group(1)) if m.group(1) else None)


_SUMMARY_KV_RE = re.compile(r"(\w+)=(-?\d+(?:\.\d+)?)( ?GB)?")


def _summary(msg: str) -> Result:
    """``max_total_num_tokens=..., ...``: independent ``key=value`` pairs (docs/formats/sglang.md#scheduler-summary)."""
    values: dict[str, float] = {}
    for k, v, gb in _SUMMARY_KV_RE.findall(msg):
        x = float(v)
        if gb or k.startswith("available_"):
            x *= GIB
        values[k] = x
    if "max_total_num_tokens" not in values:
        return ev.Unrecognized("scheduler summary")
    return ev.SchedulerSummary(values)


_CAP_RE = re.compile(
    r"max_running_requests is capped to (\d+) by the mamba state cache "
    r"\(max_mamba_cache_size=(\d+), (\d+) state slots per request\)"
)
# proposed #32360 wording; 'bound by' names the binding pool, the parenthesis its numbers
_CAP_PR_RE = re.compile(
    r"max_running_requests reduced from the requested (\d+) to (\d+)(?: \(per dp worker\))?,? "
    r"bound by ([\w.-]+)(?: \(([^)]*)\))?"
)
_CAP_PR_SLOTS_RE = re.compile(r"max_mamba_cache_size=(\d+)")
_CAP_PR_PER_RE = re.compile(r"(\d+) (?:state )?slots? per request")
_REDUCED_RE = re.compile(r"max_running_requests was reduced from the requested (\d+) to (\d+)")


def _cap(msg: str) -> Result:
    """The mamba cap warning (>=0.5.17), its proposed rewording, and the KV-bound reduction."""
    m = _CAP_RE.match(msg)
    if m is not None:
        return ev.MambaCap(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    m = _REDUCED_RE.match(msg)
    if m is not None:
        return ev.RequestCapReduced(int(m.group(1)), int(m.group(2)), "kv")
    m = _CAP_PR_RE.match(msg)
    if m is not None:
        req, eff, bound, inner = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4) or ""
        if "mamba" in bound:
            s = _CAP_PR_SLOTS_RE.search(inner)
            p = _CAP_PR_PER_RE.search(inner)
            return ev.MambaCap(eff, int(s.group(1)) if s else None, int(p.group(1)) if p else None, req)
        return ev.RequestCapReduced(req, eff, "kv" if "kv" in bound.lower() or "token" in bound else bound)
    return ev.Unrecognized("max_running_requests cap")


_REPLAY_HEAD_RE = re.compile(r"(?:\w+ )?ReplaySSM ring buffers allocated \((?:L=(\d+)|record_len=(\d+)(?:, fold=(\w+))?)\):")
_REPLAY_BUF_RE = re.compile(rf"(\w+)={_F} ?GB")


def _replay(msg: str) -> Result:
    """``GDN ReplaySSM ring buffers allocated (L=16|record_len=16, fold=False): d=..GB, ...``."""
    m = _REPLAY_HEAD_RE.search(msg)
    if m is None:
        return ev.Unrecognized("replayssm buffers")
    bufs = {k: float(v) * GIB for k, v in _REPLAY_BUF_RE.findall(msg, m.end())}
    if not bufs:
        return ev.Unrecognized("replayssm buffers")
    fold = m.group(3)
    return ev.ReplaySSMBuffers(int(m.group(1) or m.group(2)), bufs, None if fold is None else fold == "True")


# 'full max_slots=1 (min_slot_index=2, ...)' -> full_max_slots, full_min_slot_index
_UM_PAIR_RE = re.compile(r"(?:\b(full|mamba|swa|joint) )?(\w+)=(-?\d+(?:\.\d+)?|True|False)( ?GB(?: \(=(\d+) B\))?)?")


def _unified(msg: str) -> Result:
    """``[unified-memory-pool] ...`` (>=0.5.15): numeric ``key=value`` pairs and the banner."""
    if "UNIFIED MEMORY POOL ENABLED" in msg:
        return ev.UnifiedMemory(enabled=True)
    values: dict[str, float] = {}
    scope = None
    depth = 0
    last = 0
    for m in _UM_PAIR_RE.finditer(msg):
        gap = msg[last : m.start()]
        last = m.end()
        depth += gap.count("(") - gap.count(")")
        if depth <= 0:
            depth = 0
            scope = m.group(1)  # a new top-level item: its own prefix word or none
        elif m.group(1):
            scope = m.group(1)
        k, v = m.group(2), m.group(3)
        x = 1.0 if v == "True" else 0.0 if v == "False" else float(v)
        if m.group(5):
            x = float(m.group(5))  # exact '(=N B)'
        elif m.group(4):
            x *= GIB
        values[f"{scope}_{k}" if scope else k] = x
    if not values:
        return None  # separator rules and free text
    return ev.UnifiedMemory(values)


# --------------------------------------------------------------------------------------------
# server_args (docs/formats/sglang.md#server_args), weights, readiness

# fields of server_args; the fallback per-key scan extracts these when the full repr scan fails
SERVER_ARGS_FIELDS: tuple[str, ...] = (
    "model_path", "served_model_name", "tp_size", "dp_size", "pp_size", "ep_size",
    "enable_dp_attention", "mem_fraction_static", "max_running_requests", "max_total_tokens",
    "chunked_prefill_size", "max_prefill_tokens", "context_length", "page_size", "kv_cache_dtype",
    "disable_radix_cache", "disable_overlap_schedule", "max_mamba_cache_size",
    "mamba_full_memory_ratio", "mamba_ssm_dtype", "mamba_scheduler_strategy",
    "mamba_radix_cache_strategy", "mamba_track_interval", "mamba_backend", "linear_attn_backend",
    "linear_attn_decode_backend", "enable_linear_replayssm", "enable_linear_replayssm_spec",
    "linear_replayssm_cache_len", "enable_unified_memory", "enable_int8_mamba_checkpoint",
    "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
    "speculative_num_draft_tokens", "decode_log_interval", "enable_metrics", "log_level",
    "disaggregation_mode",
)  # fmt: skip

# one balanced value of a Python repr: quoted strings, (...)/[...]/{...} nested, <...>, bare text
_VAL = (
    r"(?P<val>(?:'(?:[^'\\]|\\.)*+'|\"(?:[^\"\\]|\\.)*+\""
    r"|\((?:(?&val)|[,:\s])*+\)|\[(?:(?&val)|[,:\s])*+\]|\{(?:(?&val)|[,:\s])*+\}"
    r"|<[^<>]*+>|[^,:()\[\]{}<>'\"\s]++|\s++(?=[^,:)\]}\s]))++)"
)
_ARG_ITEM_RE = regex.compile(r"\s*+(?:'(\w+)'|\"(\w+)\"|(\w+))\s*+[=:]\s*+" + _VAL + r"\s*+(?:,|(?=[)}]))")
_ARG_FALLBACK_RE = re.compile(r"['\"]?\b(" + "|".join(SERVER_ARGS_FIELDS) + r")['\"]?\s*[=:]\s*('[^']*'|\"[^\"]*\"|[^,)}]+)")
_INT_RE = re.compile(r"-?\d+")
_FLOAT_RE = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|-?inf|nan")
_UNESCAPE = {"\\\\": "\\", "\\'": "'", '\\"': '"', "\\n": "\n", "\\t": "\t"}
_ESC_RE = re.compile(r"\\[\\'\"nt]")


def _pyval(s: str) -> object:
    """A repr value -> int / float / bool / None / str (quotes removed); containers stay text."""
    s = s.strip()
    if not s:
        return s
    c = s[0]
    if (c == "'" or c == '"') and len(s) >= 2 and s[-1] == c:
        inner = s[1:-1]
        return _ESC_RE.sub(lambda m: _UNESCAPE[m.group(0)], inner) if "\\" in inner else inner
    if s == "None":
        return None
    if s == "True":
        return True
    if s == "False":
        return False
    if _INT_RE.fullmatch(s):
        return int(s)
    if _FLOAT_RE.fullmatch(s):
        return float(s)
    return s


_ARGS_MAX_BALANCED = 128 * 1024
_ARGS_MAX_ITEMS = 4096
_ARGS_MAX_SCAN = 1 << 20


def _server_args(msg: str) -> Result:
    """``server_args=ServerArgs(k=v, ...)`` (<=0.5.18) or ``server_args={'k': v, ...}`` (>=0.5.19)."""
    body = msg[12 : 12 + _ARGS_MAX_SCAN]
    if body.startswith("ServerArgs("):
        pos = 11
    elif body.startswith("{"):
        pos = 1
    else:
        return ev.Unrecognized("server_args")
    args: dict[str, object] = {}
    # the balanced scan is for real dumps (10-30 KB, ~350 fields); bigger is garbage or a paste
    n = len(body) if len(body) <= _ARGS_MAX_BALANCED else 0
    match = _ARG_ITEM_RE.match
    while pos < n and len(args) < _ARGS_MAX_ITEMS:
        m = match(body, pos)
        if m is None:
            break
        args[m.group(1) or m.group(2) or m.group(3)] = _pyval(m.group("val"))
        pos = m.end()
    rest = body[pos:].strip()
    if rest not in (")", "}", ""):
        # the balanced scan stopped early (odd value, truncated paste): per-key regex of server_args
        for m in _ARG_FALLBACK_RE.finditer(body, pos):
            args.setdefault(m.group(1), _pyval(m.group(2)))
    if not args:
        return ev.Unrecognized("server_args")
    return ev.ServerConfig("server_args", args)


_WEIGHT_ITEM_RE = re.compile(r"(\w[\w ]*?)=([^,]*)")
_COMMITTED_RE = re.compile(rf"Load weight end\. Committed real weights after CUDA graph capture in {_F} s")


def _weights(msg: str) -> Result:
    """``Load weight end.`` (type/dtype | elapsed | quant variants) and the >=0.5.23 commit line."""
    if msg.startswith("Load weight end. Committed"):
        m = _COMMITTED_RE.match(msg)
        if m is None:
            return ev.Unrecognized("load weight end")
        return ev.WeightsLoaded(seconds=float(m.group(1)))
    w = ev.WeightsLoaded()
    quant = None
    try:
        for k, v in _WEIGHT_ITEM_RE.findall(msg, 17):
            v = v.strip().rstrip(".").strip()
            if k == "mem usage":
                w.weight_bytes = float(v.split()[0]) * GIB
            elif k == "avail mem":
                w.available_bytes = float(v.split()[0]) * GIB
            elif k == "elapsed":
                w.seconds = float(v.split()[0])
            elif k == "type":
                w.model_type = v
            elif k == "dtype":
                w.dtype = v
            elif k == "quant":
                quant = v
    except (ValueError, IndexError):
        return ev.Unrecognized("load weight end")
    if w.dtype is None:
        w.dtype = quant
    if w.weight_bytes is None and w.available_bytes is None:
        return ev.Unrecognized("load weight end")
    return w


# --------------------------------------------------------------------------------------------
# dispatch


# real lines other than server_args are < 2 KB: longer ones are garbage (or drift) and must stay cheap
MAX_LINE = 64 * 1024


def _too_long(msg: str) -> Result:
    """A huge line: server_args gets its bounded scan, a marked line is drift, the rest ignored."""
    if msg.startswith("server_args="):
        return _server_args(msg)
    if _has_marker(msg[:512]):
        return ev.Unrecognized("line too long")
    return None


# --------------------------------------------------------------------------------------------
# death and shutdown lines (docs/formats/sglang.md#death-and-shutdown), read in the released code of
# 0.4.6, 0.4.10, 0.5.15-0.5.23: a process's ``except Exception`` prints ``<Name> hit an exception:
# <traceback>`` (the traceback follows on header-less lines) and sends SIGQUIT to the parent, whose handler
# prints ``SIGQUIT received. ... It usually means one child failed.`` (0.5.x; 0.4.x and the launch phase:
# ``Received sigquit from a child process. It usually means the child failed.``); 0.5.2x's subprocess
# watchdog ``Subprocess <name> (pid=N) crashed with exit code N. Triggering SIGQUIT for cleanup...``. A
# requested stop: ``SIGTERM received. signum=... Draining requests and shutting down...`` (the tokenizer
# manager's handler), ``Gracefully exiting... Remaining number of requests N``. uvicorn's ``Shutting down`` is not
# read: behind SGLang's header it is an ``INFO:`` line, which the bulk scanner counts as an access line before any
# parser sees it (so it would be read in some formats and not in others).

_HIT_CAUSE = {  # whose exception it was -> the bounded cause (ev.Lifecycle.cause)
    "Scheduler": "scheduler_error",
    "TokenizerManager": "tokenizer_error",
    "MultiTokenizerRouter": "tokenizer_error",
    "DetokenizerManager": "detokenizer_error",
    "MultiDetokenizerRouter": "detokenizer_error",
    "DataParallelController": "fatal_error",
    "TpModelWorkerClient": "fatal_error",
}
_HIT_STARTS = tuple(f"{name} hit an exception" for name in _HIT_CAUSE)
_SUBPROCESS_CRASH_RE = re.compile(r"Subprocess \S+ \(pid=\d+\) crashed with exit code ")


def _hit(msg: str) -> Result:
    """``<Name> hit an exception: Traceback ...``: the process died (its parent is told by SIGQUIT)."""
    return ev.Lifecycle("dead", _HIT_CAUSE[msg.partition(" ")[0]])


def _dispatch(msg: str) -> Result:
    if len(msg) > MAX_LINE:
        return _too_long(msg)
    c = msg[0]
    if c == "I":
        if msg.startswith("INFO:"):
            return None  # uvicorn (access and server lines; the bulk scanner counts them before any parser)
    elif c == "D":
        if msg.startswith("Decode batch"):
            return _batch(msg)
        if msg.startswith("Decode out of memory happened"):
            return _retraction(msg)
        if msg.startswith(_HIT_STARTS):
            return _hit(msg)
    elif c == "P":
        if msg.startswith("Prefill batch"):
            return _batch(msg)
        if msg.startswith("Post-capture KV sizing"):
            return _post_capture(msg)
    elif c == "K":
        if msg.startswith("KV cache pool is full"):
            return _retraction(msg)
    elif c == "T":
        if msg.startswith("Testing retraction"):
            return _retraction(msg)
        if msg.startswith("The server is fired up"):
            return ev.ServerReady()
        if msg.startswith(_HIT_STARTS):
            return _hit(msg)
    elif c == "M":
        if msg.startswith("Mamba Cache is allocated"):
            return _mamba(msg)
        if msg.startswith(_HIT_STARTS):
            return _hit(msg)
    elif c == "m":
        if msg.startswith("max_total_num_tokens="):
            return _summary(msg)
        if msg.startswith("max_running_requests") and ("capped" in msg or "reduced" in msg):
            return _cap(msg)
    elif c == "s":
        if msg.startswith("server_args="):
            return _server_args(msg)
    elif c == "S":
        if msg.startswith("SWAKVPool"):
            return _swa(msg)
        if msg.startswith(_HIT_STARTS):
            return _hit(msg)
        if msg.startswith("SIGQUIT received") and "child failed" in msg:
            return ev.Lifecycle("dead", "child_failed")
        if msg.startswith("SIGTERM received") or msg.startswith("Signal SIGTERM received"):
            return ev.Lifecycle("stopping", "signal")
        if msg.startswith("Subprocess ") and _SUBPROCESS_CRASH_RE.match(msg):
            return ev.Lifecycle("dead", "child_failed")
    elif c == "R":
        if msg.startswith("Received sigquit from a child process"):
            return ev.Lifecycle("dead", "child_failed")
    elif c == "G":
        if msg.startswith("Gracefully exiting"):
            return ev.Lifecycle("stopping", "signal")
    elif c == "U":
        if msg.startswith("Use ") and msg[4:25].lower() == "sliding window memory":
            return _swa(msg)
        if msg.startswith("Using KV cache dtype: "):
            dtype = msg[22:].strip()
            if not dtype:
                return ev.Unrecognized("kv cache dtype")
            return ev.ServerConfig("kv_cache_dtype", {"kv_cache_dtype": dtype})
    elif c == "L":
        if msg.startswith("Load weight end"):
            return _weights(msg)
        if msg.startswith("Load weight begin"):
            return ev.ServerStarting()
    elif c == "[" and msg.startswith("[unified-memory-pool]"):
        return _unified(msg)
    # markers that may sit anywhere (labelled KV pools, traceback 'XxxError: ...' lines)
    if "KV Cache " in msg:
        if "KV Cache is allocated" in msg or "KV Cache VA upper bound" in msg:
            return _kv(msg)
    elif "Mamba Cache is allocated" in msg:
        return _mamba(msg)
    elif "ReplaySSM ring buffers" in msg:
        return _replay(msg)
    if "enough" in msg or "emory" in msg or "etract" in msg or "too small" in msg or "pool is full" in msg:
        return _exhausted(msg)
    return None


# Where an SGLang message begins: the starts ``_dispatch`` tests (each ``msg.startswith`` there),
# the labelled ReplaySSM line and the pool-exhaustion messages. ``parsers.header.preamble`` asks
# :func:`starts_message` to find a message behind a header it does not know (a logging config's,
# a pasted bug report's); tests/parsers/test_preamble.py checks that every start ``_dispatch``
# tests is here.
MESSAGE_STARTS: tuple[str, ...] = (
    "INFO:",
    "Decode batch",
    "Decode out of memory happened",
    "Prefill batch",
    "Post-capture KV sizing",
    "KV cache pool is full",
    "Testing retraction",
    "The server is fired up",
    "Mamba Cache is allocated",
    "max_total_num_tokens=",
    "max_running_requests",
    "server_args=",
    "SWAKVPool",
    "Use sliding window memory",
    "Use Sliding window memory",
    "Using KV cache dtype: ",
    "Load weight end",
    "Load weight begin",
    "[unified-memory-pool]",
    "KV Cache is allocated",
    "KV Cache VA upper bound",
    "ReplaySSM ring buffers",
    *_HIT_STARTS,
    "SIGQUIT received",
    "SIGTERM received",
    "Signal SIGTERM received",
    "Subprocess ",
    "Received sigquit from a child process",
    "Gracefully exiting",
    *(marker for marker, _, _ in _EXHAUSTED),
)
_REPLAY_LABELLED_RE = re.compile(r"\w+ ReplaySSM ring buffers")


def starts_message(msg: str, pos: int = 0) -> bool:
    """Whether an SGLang message this parser reads may begin at ``msg[pos]``."""
    return msg.startswith(MESSAGE_STARTS, pos) or (msg[pos : pos + 1].isupper() and _REPLAY_LABELLED_RE.match(msg, pos) is not None)


# The messages a writer or a terminal may cut (startup facts and retractions), each as the pattern of its text
# from its first character: a line is such a message cut short when its message is a proper prefix of one
# (``regex``'s partial match, parsers/cuts.py), the proof the joiner asks before it holds a line. None begins
# with free text, so no other writer's line is the prefix of one; a labelled pool's message (``MiniMax MSA-v1 main
# NVFP4 KV Cache is allocated. ...``) is read from its marker on (``LABELLED_MARKERS``).
LABELLED_MARKERS = ("KV Cache ", "ReplaySSM ring buffers")
PREFIX_GRAMMARS: tuple[str, ...] = (
    _MAMBA_RE.pattern,
    _KV_RE.pattern.replace("(?:(.+?) )?", "", 1),
    _POST_KV_RE.pattern,
    _POST_SWA_RE.pattern,
    _POST_CAP_RE.pattern,
    _SWAKV_RE.pattern,
    "(?i:" + _SLIDING_RE.pattern + ")",
    _CAP_RE.pattern,
    _CAP_PR_RE.pattern,
    _REDUCED_RE.pattern,
    _REPLAY_HEAD_RE.pattern.replace(r"(?:\w+ )?", "", 1) + rf"(?: \w+={_F} ?GB,?)+",
    r"max_total_num_tokens=\d+(?:, \w+=-?\d+(?:\.\d+)?(?: ?GB)?)*",
    r"Load weight end\. (?:[\w ]{1,24}=[^,\s]+(?: [A-Za-z]{1,3})?, )*(?:avail mem|mem usage)=",
    r"server_args=(?:ServerArgs\(|\{).*[)}]",
    _RETRACT_RE.pattern,
)


def parse_message(msg: str) -> Result:
    """Parse the message part of one SGLang line.

    Returns a typed event, ``None`` for irrelevant lines, or ``Unrecognized`` when a known marker
    is present but the line does not parse. Never raises, whatever ``msg`` is.
    """
    try:
        if not msg:
            return None
        return _dispatch(msg)
    except Exception as e:  # noqa: BLE001 - bad input must never crash the exporter
        if isinstance(msg, str) and _has_marker(msg):
            return ev.Unrecognized(f"parser error: {type(e).__name__}")
        return None


_MARKERS = (
    "Decode batch",
    "Prefill batch",
    "Mamba Cache is allocated",
    "KV Cache is allocated",
    "VA upper bound",
    "max_running_requests",
    "max_total_num_tokens=",
    "Retract requests",
    "ReplaySSM ring buffers",
    "server_args=",
    "Load weight end",
    "SWAKVPool",
    "unified-memory-pool",
)


def _has_marker(msg: str) -> bool:
    return any(mk in msg for mk in _MARKERS)
