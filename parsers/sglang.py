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
from collections.abc import Callable
from dataclasses import MISSING, fields

import regex

from . import events as ev
from .numbers import GIB, MAX_COUNT, bad_count, count_fields, is_count
from .prefix import sglang_tags, sglang_ts

Result = object | None  # an event dataclass, None (ignored) or ev.Unrecognized
_NO_TAGS: tuple[str, int | None, int | None] = ("0", None, None)  # dp, tp, pp of an untagged header

# --------------------------------------------------------------------------------------------
# batch lines (docs/formats/sglang.md#batch-lines)

_BATCH_HEAD_RE = re.compile(r"(Prefill|Decode) batch(?: \[(\d+)\])?[.,] ")


def _used(v: str) -> int:
    """FreeToken's ``used/total`` -> used."""
    return int(v.partition("/")[0])


def _graph(v: str) -> bool:
    """``cuda graph: True`` (or cpu / npu / musa / xpu graph) -> the flag; spaces around it do not count."""
    return v.strip() == "True"


# key as printed -> (BatchStats attribute, converter); converters are builtins on the hot path
_BATCH_KEYS: dict[str, tuple[str, object]] = {
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
_HISPARSE_KEYS: dict[str, tuple[str, object]] = {"#gpu token": ("kv_used_tokens", int), "gpu token usage": ("kv_usage", float)}


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


# Learned shapes: a server prints the same key sequence on every batch line of a kind, so the
# first generic parse of a sequence compiles one anchored regex for it; later lines of that shape
# are matched in one C call and converted by position. Any mismatch (new field, odd value) falls
# back to the generic split, after which the new shape is learned. What was learned belongs to
# one log source (a LineShapes object): two servers of different releases keep their own shapes.
_MAX_TEMPLATES = 64  # per source
LINE_HEADER = r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}):(\d{2})(?:\.(\d{3}))?([^\]\[\n]*)\] "
Steps = tuple[tuple[int, str, Callable[[str], object]], ...]  # (group index, attribute, converter)
Build = Callable[[tuple[str, ...]], "ev.Line | None"]  # match groups -> parsed Line (Shape.sample)
# what the bulk scanner (exporter/scan.py) accepts per kind: (head, keys, index of #new-token,
# index of #cached-token)
ScanShape = tuple[str, tuple[str, ...], "int | None", "int | None"]


class Shape:
    """One learned batch-line shape (head + key sequence) and its compiled forms.

    ``body``: the message regex; ``line``: the whole-line regex (``LINE_HEADER`` groups ymdhm, sec,
    ms, tags, then the values) with the group index of ``#new-token`` / ``#cached-token`` in it;
    ``attrs``: the BatchStats attributes every line of the shape carries (so that which fields a
    line of another shape leaves out is known without parsing); ``scan``: the scanner's form;
    ``sample``: the whole-line regex with the parser's header pattern and the function that builds
    the parsed Line from its groups (built on first use, for the samples)."""

    __slots__ = ("body", "plan", "i_new", "i_cached", "line", "line_new", "line_cached", "attrs", "scan", "_sample")

    def __init__(self, head: str, keys: tuple[str, ...], plan: list) -> None:
        attrs = [p[0] if p else None for p in plan]
        self.plan = tuple(plan)
        self.i_new = attrs.index("new_tokens") if "new_tokens" in attrs else None
        self.i_cached = attrs.index("cached_tokens") if "cached_tokens" in attrs else None
        body = re.escape(head) + ", ".join(re.escape(k) + r": ([^,\n]*)" for k in keys) + r"(?:, )?"
        self.body = re.compile(body)
        self.line = re.compile(LINE_HEADER + body)
        self.line_new = None if self.i_new is None else self.i_new + 4
        self.line_cached = None if self.i_cached is None else self.i_cached + 4
        self.attrs = frozenset(a for a in attrs if a is not None)
        self.scan: ScanShape = (head, keys, self.i_new, self.i_cached)
        self._sample: tuple[Callable[[str], re.Match | None], Build] | None = None

    def sample(self) -> tuple[Callable[[str], re.Match | None], Build]:
        """The ``fullmatch`` of the whole-line regex (split_header's header pattern in front of the
        body) and the function that builds the parsed Line from its groups (:func:`_builder`)."""
        c = self._sample
        if c is None:
            head, keys = self.scan[0], self.scan[1]
            body, steps = _sample_body(keys, self.plan)
            whole = re.compile(_SAMPLE_HEADER + re.escape(head) + body)
            c = self._sample = (whole.fullmatch, _builder("prefill" if head[0] == "P" else "decode", steps))
        return c


# prefix.SGLANG_HEADER_RE, written the way the regex engine runs fastest (a third of the samples'
# match cost was the header): digits one by one rather than \d{4}, the optional milliseconds as an
# alternative, and ASCII digits only: on an ASCII header it matches the same text with the same
# groups; a header with other Unicode digits (which \d accepts) is left to the generic path.
_D = "[0-9]"
_SAMPLE_HEADER = rf"\[({_D * 4}-{_D * 2}-{_D * 2} {_D * 2}:{_D * 2}):({_D * 2})(?:\.({_D * 3})|)([^\]\[]*)\] "


def _sample_body(keys: tuple[str, ...], plan: tuple) -> tuple[str, Steps]:
    """The keys-and-values part of a shape's regex for the samples, and the steps that read its
    groups (numbered after the header's four).

    It reads a value as the generic split does, which cuts items at ``', '`` and a key from its
    value at the *last* ``': '`` of the item. So no value holds a ``','``; one that ``int`` or
    ``float`` reads may hold a ``':'`` (neither converts it: the generic path gets the line); the
    others must not (``est. x: cuda graph: True`` is a graph flag for the generic split,
    ``#mamba-slot: 3/48: 2`` an unknown key), and the values of unknown keys are not captured.
    ``[^,]`` rather than the scanner's ``[^,\n]``: a single excluded character is the regex
    engine's fastest loop, and a newline converts the same on both paths."""
    parts, steps = [], []
    for k, spec in zip(keys, plan, strict=True):
        if spec is None:
            parts.append(re.escape(k) + r": [^,:]*")
            continue
        attr, conv = spec
        parts.append(re.escape(k) + (r": ([^,]*)" if conv is int or conv is float else r": ([^,:]*)"))
        steps.append((4 + len(steps), attr, conv))
    return ", ".join(parts) + r"(?:, )?", tuple(steps)


def _builder(kind: str, steps: Steps) -> Build:
    """The function that turns the match groups of a line of one learned shape into its parsed
    Line, or None when a value does not convert or a count is out of range
    (``numbers.is_count``): the generic parser decides such a line, as it does any line the shape
    does not match.

    Generated once per shape, as ``dataclasses`` generates an ``__init__``, and doing what the
    ``__init__`` of the event and of the Line do (one assignment per field, absent fields get their
    default) with the conversions written in: no ``__init__`` called with 27 arguments, no
    ``setattr`` by name, and only the count fields this shape carries are checked instead of the
    generic ``bad_count``. That is about half the cost of ``BatchStats(kind)`` + a ``setattr`` per
    value + ``bad_count`` + ``Line(...)``. For the 0.5.23 prefill shape the source is::

        def build(g):
            try:
                e = new(BatchStats)
                e.kind = 'prefill'
                e.running = int(g[9])
                ...
                e.new_tokens = int(g[5])
                e.cached_tokens = int(g[6])
                ...
                e.cuda_graph = g[12].strip() == 'True'
                e.forward_iter = None
                ...
            except ValueError:
                return None
            if not (0 <= e.new_tokens <= MAX_COUNT and 0 <= e.cached_tokens <= MAX_COUNT):
                return None
            dp, tp, pp = sglang_tags(g[3]) if g[3] else NO_TAGS
            x = new(Line)
            x.outcome = 'parsed'
            x.engine = 'sglang'
            x.ts = sglang_ts(g[0], g[1], g[2])
            x.dp_rank = dp
            ...
            x.event = e
            x.reason = None
            x.tod = None
            return x

    A key printed twice sets its field from the last one, as the generic split does, and the
    earlier value is still converted (an odd value there sends the line to the generic path too).
    tests/pipeline/test_sample_cost.py compares every Line built here with the generic parse."""
    ns: dict[str, object] = {"BatchStats": ev.BatchStats, "Line": ev.Line, "new": object.__new__, "MAX_COUNT": MAX_COUNT}
    ns.update(is_count=is_count, sglang_tags=sglang_tags, sglang_ts=sglang_ts, NO_TAGS=_NO_TAGS)
    value: dict[str, tuple[str, Callable]] = {}  # attribute -> the expression of its (last) value, converter
    body = ["    try:", "        e = new(BatchStats)"]
    for i, attr, conv in steps:
        name = conv.__name__
        if ns.setdefault(name, conv) is not conv:  # two converters of one name (none today)
            name = f"c{i}"
            ns[name] = conv
        if attr in value:
            body.append(f"        {value[attr][0]}  # overwritten below, still converted")
        # the graph flag's test (_graph) is written in: calling it cost as much as the test
        value[attr] = (f"g[{i}].strip() == 'True'" if conv is _graph else f"{name}(g[{i}])", conv)
    given = {a: expr for a, (expr, _) in value.items()}
    body += _assign("e", ev.BatchStats, {"kind": repr(kind), **given}, ns, "        ")
    body += ["    except ValueError:", "        return None"]
    # an int() result is an int: its range is the whole check (numbers.is_count)
    counts = [f"0 <= e.{a} <= MAX_COUNT" if value[a][1] is int else f"is_count(e.{a})" for a in count_fields("BatchStats") if a in value]
    if counts:
        body += [f"    if not ({' and '.join(counts)}):", "        return None"]
    body.append("    dp, tp, pp = sglang_tags(g[3]) if g[3] else NO_TAGS")
    line = {"outcome": repr(ev.PARSED), "engine": repr(ev.SGLANG), "ts": "sglang_ts(g[0], g[1], g[2])"}
    line.update(dp_rank="dp", tp_rank="tp", pp_rank="pp", event="e")
    body += ["    x = new(Line)", *_assign("x", ev.Line, line, ns, "    "), "    return x"]
    exec("\n".join(["def build(g):", *body]), ns)  # our own text, from the steps and the dataclasses' fields
    return ns["build"]  # type: ignore[return-value]


def _assign(var: str, cls: type, given: dict[str, str], ns: dict[str, object], indent: str) -> list[str]:
    """The lines of a generated ``__init__`` body: ``var.field = expression`` for every field of
    dataclass ``cls``, the ``given`` expression or the field's default (a default other than None
    is bound in ``ns``)."""
    out = []
    for f in fields(cls):
        expr = given.get(f.name)
        if expr is None:
            if f.default is None:
                expr = "None"
            elif f.default is not MISSING:
                ns[f"{cls.__name__}_{f.name}"] = f.default
                expr = f"{cls.__name__}_{f.name}"
            elif f.default_factory is not MISSING:
                ns[f"{cls.__name__}_{f.name}"] = f.default_factory
                expr = f"{cls.__name__}_{f.name}()"
            else:
                raise TypeError(f"{cls.__name__}.{f.name} has no default: the shape builder must set it")
        out.append(f"{indent}{var}.{f.name} = {expr}")
    return out


def _shape_key(msg: str) -> tuple[str, tuple[str, ...], list] | None:
    """(head, keys, conversion plan) of a batch message the template path may learn, or None
    (forward-iteration headers, HiSparse fields and items without ``': '`` stay generic)."""
    m = _BATCH_HEAD_RE.match(msg)
    if m is None or m.group(2) is not None:
        return None
    keys = tuple(item.rpartition(": ")[0] for item in msg[m.end() :].rstrip(", \t").split(", "))
    if "" in keys:
        return None
    plan = []
    for k in keys:
        spec = _BATCH_KEYS.get(k)
        if spec is not None:
            plan.append(spec)
        elif k.endswith(" graph"):
            plan.append(("cuda_graph", _graph))
        elif k in _HISPARSE_KEYS:
            return None  # rare: keep these on the generic path
        else:
            plan.append(None)
    return msg[: m.end()], keys, plan


class LineShapes:
    """The batch-line shapes one log source prints: the current one per kind ('D' / 'P'), learned
    from its lines, and the fast paths that use them. One object per source (the pipeline's
    sampler keeps it), so sources of different releases never overwrite each other's shapes."""

    __slots__ = ("current", "_known")

    def __init__(self) -> None:
        self.current: dict[str, Shape] = {}  # kind -> the shape of the last learned line of that kind
        self._known: dict[tuple, Shape] = {}  # every shape learned so far (at most _MAX_TEMPLATES)

    def learn(self, msg: str) -> None:
        """Make the shape of this well-formed batch message the current one of its kind."""
        k = _shape_key(msg)
        if k is None:
            return
        head, keys, plan = k
        shape = self._known.get((head, *keys))
        if shape is None:
            if len(self._known) >= _MAX_TEMPLATES:
                return
            shape = self._known[(head, *keys)] = Shape(head, keys, plan)
        self.current[msg[0]] = shape

    def scan_spec(self) -> tuple[ScanShape, ScanShape] | None:
        """The current decode and prefill shapes in the scanner's form, or None until both kinds
        were learned."""
        d, p = self.current.get("D"), self.current.get("P")
        return None if d is None or p is None else (d.scan, p.scan)

    def batch_line(self, line: str) -> ev.Line | None:
        """The parsed Line of a whole ``[ts tags] Decode batch, ...`` / ``Prefill batch`` line of the
        current shape of its kind, in one ``fullmatch``; None for any other line, and for one with
        a value that does not convert or a count out of range.

        ``parse_line`` takes this for the sampler's samples: it matches the same header regex and
        the same template, and converts the same way, as ``split_header`` + ``parse_message``
        would, and gives the same Line, but without splitting the line first. Lines the generic
        path would rewrite (``\\r``, ANSI codes) or treat as too long are left to it."""
        i = line.find("] ", 20)
        if i < 0:
            return None
        t = self.current.get(line[i + 2 : i + 3])
        if t is None or len(line) > _MAX_LINE or "\r" in line or "\x1b" in line:
            return None
        fullmatch, build = t._sample or t.sample()
        m = fullmatch(line)
        if m is None:
            return None
        return build(m.groups())

    def check_batch(self, msg: str) -> tuple[int | None, int | None] | ev.Unrecognized | None:
        """Validate a ``Prefill batch`` / ``Decode batch`` message without building its event.

        The sampler counts every batch line but builds the full event only for the samples the
        rules see. Returns ``(new_tokens, cached_tokens)`` (None where the line has no such field)
        for a well-formed line, ``Unrecognized`` for a malformed one, None if not a batch line. A
        line of the current shape costs one ``fullmatch``; other lines take the generic parser,
        and their shape is learned."""
        if len(msg) > _MAX_LINE or not msg.startswith(("Decode batch", "Prefill batch")):
            return None
        t = self.current.get(msg[0])
        if t is not None:
            m = t.body.fullmatch(msg)
            if m is not None:
                g = m.groups()
                try:
                    r = (int(g[t.i_new]) if t.i_new is not None else None, int(g[t.i_cached]) if t.i_cached is not None else None)
                    if is_count(r[0]) and is_count(r[1]):
                        return r
                except ValueError:
                    pass
        b = parse_message(msg)
        if type(b) is ev.BatchStats:
            bad = bad_count(b)
            if bad is not None:  # counters only count (numbers.MAX_COUNT)
                return ev.Unrecognized(f"count out of range: {bad}")
            self.learn(msg)
            return (b.new_tokens, b.cached_tokens)
        return b if type(b) is ev.Unrecognized else None


def _batch(msg: str) -> Result:
    """``Prefill batch`` / ``Decode batch`` lines of every release (docs/formats/sglang.md#fields, #older-shapes).

    Generic ``key: value`` split (on the *last* ``': '`` of each item) so that unknown keys,
    trailing ``', '``, graph-label variants and ``est.``/occupancy suffixes never break it.
    """
    m = _BATCH_HEAD_RE.match(msg)
    if m is None:
        return ev.Unrecognized("batch header")
    b = ev.BatchStats("prefill" if msg[0] == "P" else "decode")
    if m.group(2) is not None:
        b.forward_iter = int(m.group(2))
    keys = _BATCH_KEYS
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
            b.cuda_graph = _graph(v)
        elif k in _HISPARSE_KEYS:
            if hisparse is None:
                hisparse = []
            hisparse.append((k, v))
        # everything else (est. ..., fwd occupancy, PD queues, cap len, items without ': ') is ignored
    if hisparse is not None:
        for k, v in hisparse:
            attr, conv = _HISPARSE_KEYS[k]
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
    label = m.group(1)
    if label:
        e.label = label.strip()
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
_MAX_LINE = 64 * 1024


def _too_long(msg: str) -> Result:
    """A huge line: server_args gets its bounded scan, a marked line is drift, the rest ignored."""
    if msg.startswith("server_args="):
        return _server_args(msg)
    if _has_marker(msg[:512]):
        return ev.Unrecognized("line too long")
    return None


def _dispatch(msg: str) -> Result:
    if len(msg) > _MAX_LINE:
        return _too_long(msg)
    c = msg[0]
    if c == "I":
        if msg.startswith("INFO:"):
            return None  # uvicorn (access and server lines)
    elif c == "D":
        if msg.startswith("Decode batch"):
            return _batch(msg)
        if msg.startswith("Decode out of memory happened"):
            return _retraction(msg)
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
    elif c == "M":
        if msg.startswith("Mamba Cache is allocated"):
            return _mamba(msg)
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
