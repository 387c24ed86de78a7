"""Learned batch-line shapes: the samples' fast path of the SGLang parser (:mod:`parsers.sglang`).

A server prints the same key sequence on every ``Decode batch`` / ``Prefill batch`` line of a
kind, so the first generic parse of a sequence (``parsers.sglang.parse_message``) is turned into a
:class:`Shape`: an anchored message regex, the whole-line regex the sampler and the bulk scanner
(:mod:`exporter.state.scan`) use, and a generated function that builds the parsed Line of a sample.
Later lines of that shape are matched in one C call and converted by position; any mismatch (a
new field, an odd value) falls back to the generic parser, after which the new shape is learned.
What was learned belongs to one log source (a :class:`LineShapes` object, kept by the sampler),
so two servers of different releases keep their own shapes. Pure: nothing here reads or writes
anything but the object it is called on.

It lives apart from the message parser because it is one concern of its own (learning, the
compiled forms, the generated builder) that only the sampler and the scanner use; every Line it
builds is the one the generic parser gives (tests/pipeline/test_sample_cost.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import MISSING, fields

from . import events as ev
from .clock import sglang_ts
from .header.prefix import sglang_tags
from .headers import sglang_header
from .numbers import MAX_COUNT, NONNEGATIVE_FIELDS, RATIO_FIELDS, bad_value, count_fields, is_count
from .sglang import BATCH_HEAD_RE, BATCH_KEYS, HISPARSE_KEYS, MAX_LINE, graph_flag, parse_message

_NO_TAGS: tuple[str, int | None, int | None] = ("0", None, None)  # dp, tp, pp of an untagged header

_MAX_TEMPLATES = 64  # per source
LINE_HEADER = sglang_header(one_line=True)  # groups ymdhm, sec, ms, tags (the scanner runs it over blocks)
Steps = tuple[tuple[int, str, Callable[[str], object]], ...]  # (group index, attribute, converter)
Build = Callable[[tuple[str, ...]], "ev.Line | None"]  # match groups -> parsed Line (Shape.sample)
# what the bulk scanner (exporter/state/scan.py) accepts per kind: (head, keys, index of #new-token,
# index of #cached-token, the value check of each key: VALUE_PATTERNS' codes)
ScanShape = tuple[str, tuple[str, ...], "int | None", "int | None", str]

# The values a learned shape admits for the fields a gauge takes (parsers.numbers.bad_value): a
# ratio 0..1 ('r'), a count ('n') or a rate ('f') that is not negative and finite, each with an
# optional '\r' (a CRLF log's last value; int() and float() read it); other values ('-') as the
# generic split cuts them. A value outside its pattern (nan, -3, 1.7, an empty one) sends the
# line to the generic parser, which makes it `unrecognized`. The C scanner (exporter/_scan.c,
# value_ok) checks the same codes the same way.
VALUE_PATTERNS = {
    "r": r"(?:0(?:\.[0-9]*)?|1(?:\.0*)?|\.[0-9]+)\r?",
    "n": r"[0-9]{1,18}\r?",
    "f": r"[0-9]{1,15}(?:\.[0-9]*)?\r?",
    "-": r"[^,\n]*",
}
_RATIOS = frozenset(RATIO_FIELDS["BatchStats"])
_NONNEGATIVE = frozenset(NONNEGATIVE_FIELDS["BatchStats"]) | frozenset(count_fields("BatchStats"))


def value_code(spec: tuple[str, object] | None) -> str | None:
    """The VALUE_PATTERNS code of a planned key (None: a checked field whose converter no pattern
    describes, so the shape is not learned and its lines stay generic)."""
    if spec is None:
        return "-"
    attr, conv = spec
    if attr in _RATIOS:
        return "r" if conv is float else None
    if attr in _NONNEGATIVE:
        return "n" if conv is int else "f" if conv is float else None
    return "-"


class Shape:
    """One learned batch-line shape (head + key sequence) and its compiled forms.

    ``body``: the message regex; ``line``: the whole-line regex (``LINE_HEADER`` groups ymdhm, sec,
    ms, tags, then the values) with the group index of ``#new-token`` / ``#cached-token`` in it;
    ``attrs``: the BatchStats attributes every line of the shape carries (so that which fields a
    line of another shape leaves out is known without parsing); ``scan``: the scanner's form;
    ``sample``: the whole-line regex with the parser's header pattern and the function that builds
    the parsed Line from its groups (built on first use, for the samples)."""

    __slots__ = ("body", "plan", "i_new", "i_cached", "line", "line_new", "line_cached", "attrs", "scan", "_sample", "_peeled")

    def __init__(self, head: str, keys: tuple[str, ...], plan: list) -> None:
        attrs = [p[0] if p else None for p in plan]
        self.plan = tuple(plan)
        self.i_new = attrs.index("new_tokens") if "new_tokens" in attrs else None
        self.i_cached = attrs.index("cached_tokens") if "cached_tokens" in attrs else None
        codes = "".join(value_code(p) or "-" for p in plan)
        body = re.escape(head) + ", ".join(re.escape(k) + f": ({VALUE_PATTERNS[c]})" for k, c in zip(keys, codes, strict=True)) + r"(?:, )?"
        self.body = re.compile(body)
        self.line = re.compile(LINE_HEADER + body)
        self.line_new = None if self.i_new is None else self.i_new + 4
        self.line_cached = None if self.i_cached is None else self.i_cached + 4
        self.attrs = frozenset(a for a in attrs if a is not None)
        self.scan: ScanShape = (head, keys, self.i_new, self.i_cached, codes)
        self._sample: tuple[Callable[[str], re.Match | None], Build] | None = None
        self._peeled: tuple[Callable[[str], re.Match | None], Callable] | None = None

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

    def in_record(self, mode: str) -> tuple[str, int, Callable]:
        """The shape's message inside a header template's message region (``mode`` as the
        template's ``M`` item: ``'E'`` the rest of the line, ``'J'`` / ``'Q'`` a JSON / logfmt
        string): its regex, its number of groups and the builder ``build(g, ts, dp, tp, pp)``
        (:meth:`parsers.header.Stage.batch_line`)."""
        head, keys = self.scan[0], self.scan[1]
        free = {"E": "[^,:]", "J": r'[^,:"\\\x00-\x1f]', "Q": r'[^,:"\\]'}[mode]
        body, steps = _sample_body(keys, self.plan, free)
        if mode != "E":
            body += r"(?:\\n)?"  # a record's message loses its newline
        return re.escape(head) + body, len(steps), _builder("prefill" if head[0] == "P" else "decode", steps, True)

    def peeled(self) -> tuple[Callable[[str], re.Match | None], Callable]:
        """The sample's form for a message whose header the header stage read: the ``fullmatch`` of
        the message alone and a builder that takes the time and ranks (``build(g, ts, dp, tp, pp)``)."""
        c = self._peeled
        if c is None:
            head, keys = self.scan[0], self.scan[1]
            body, steps = _sample_body(keys, self.plan)
            rx = re.compile(re.escape(head) + body)
            c = self._peeled = (rx.fullmatch, _builder("prefill" if head[0] == "P" else "decode", steps, True))
        return c


# prefix.SGLANG_HEADER_RE, written the way the regex engine runs fastest (headers.sglang_header)
_SAMPLE_HEADER = sglang_header(fast=True)


def _sample_body(keys: tuple[str, ...], plan: tuple, free: str = "[^,:]") -> tuple[str, Steps]:
    """The keys-and-values part of a shape's regex for the samples, and the steps that read its
    groups (numbered after the header's four).

    It reads a value as the generic split does, which cuts items at ``', '`` and a key from its
    value at the *last* ``': '`` of the item. So no value holds a ``','``; one that ``int`` or
    ``float`` reads may hold a ``':'`` (neither converts it: the generic path gets the line); the
    others must not (``est. x: cuda graph: True`` is a graph flag for the generic split,
    ``#mamba-slot: 3/48: 2`` an unknown key), and the values of unknown keys are not captured.
    ``[^,]`` rather than the scanner's ``[^,\n]``: a single excluded character is the regex
    engine's fastest loop, and a newline converts the same on both paths. ``free``: the class of
    the characters of a value no pattern checks (inside a record's string: no quote, backslash or
    control character either, :meth:`Shape.in_record`)."""
    parts, steps = [], []
    for k, spec in zip(keys, plan, strict=True):
        if spec is None:
            parts.append(re.escape(k) + f": {free}*")
            continue
        attr, conv = spec
        code = value_code(spec)
        parts.append(re.escape(k) + (f": ({VALUE_PATTERNS[code]})" if code != "-" else f": ({free}*)"))
        steps.append((4 + len(steps), attr, conv))
    return ", ".join(parts) + r"(?:, )?", tuple(steps)


@functools.lru_cache(maxsize=256)  # one per shape, shared by the sources that print it (2,000 files: 2 s of exec)
def _builder(kind: str, steps: Steps, peeled: bool = False) -> Build:
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
    tests/pipeline/test_sample_cost.py compares every Line built here with the generic parse.

    ``peeled``: the groups are the message's alone (the header stage read the header) and the
    function is ``build(g, ts, dp, tp, pp)``."""
    shift = 4 if peeled else 0
    # ``__name__``: the function is this module's, as a dataclass's ``__init__`` is its class's module's
    ns: dict[str, object] = {
        "__name__": __name__,
        "BatchStats": ev.BatchStats,
        "Line": ev.Line,
        "new": object.__new__,
        "MAX_COUNT": MAX_COUNT,
    }
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
        # the graph flag's test (graph_flag) is written in: calling it cost as much as the test
        j = i - shift
        value[attr] = (f"g[{j}].strip() == 'True'" if conv is graph_flag else f"{name}(g[{j}])", conv)
    given = {a: expr for a, (expr, _) in value.items()}
    body += _assign("e", ev.BatchStats, {"kind": repr(kind), **given}, ns, "        ")
    body += ["    except ValueError:", "        return None"]
    # an int() result is an int: its range is the whole check (numbers.is_count)
    counts = [f"0 <= e.{a} <= MAX_COUNT" if value[a][1] is int else f"is_count(e.{a})" for a in count_fields("BatchStats") if a in value]
    if counts:
        body += [f"    if not ({' and '.join(counts)}):", "        return None"]
    if not peeled:
        body.append("    dp, tp, pp = sglang_tags(g[3]) if g[3] else NO_TAGS")
    line = {"outcome": repr(ev.PARSED), "engine": repr(ev.SGLANG), "ts": "ts" if peeled else "sglang_ts(g[0], g[1], g[2])"}
    line.update(dp_rank="dp", tp_rank="tp", pp_rank="pp", event="e")
    body += ["    x = new(Line)", *_assign("x", ev.Line, line, ns, "    "), "    return x"]
    exec(
        "\n".join(["def build(g, ts, dp, tp, pp):" if peeled else "def build(g):", *body]), ns
    )  # our own text, from the steps and the dataclasses' fields
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
    m = BATCH_HEAD_RE.match(msg)
    if m is None or m.group(2) is not None:
        return None
    keys = tuple(item.rpartition(": ")[0] for item in msg[m.end() :].rstrip(", \t").split(", "))
    if "" in keys:
        return None
    plan = []
    for k in keys:
        spec = BATCH_KEYS.get(k)
        if spec is not None:
            if value_code(spec) is None:
                return None  # FreeToken's 'used/total' counts: no pattern checks them, keep them generic
            plan.append(spec)
        elif k.endswith(" graph"):
            plan.append(("cuda_graph", graph_flag))
        elif k in HISPARSE_KEYS:
            return None  # rare: keep these on the generic path
        else:
            plan.append(None)
    return msg[: m.end()], keys, plan


class LineShapes:
    """The batch-line shapes one log source prints: the current one per kind ('D' / 'P'), learned
    from its lines, and the fast paths that use them. One object per source (the pipeline's
    sampler keeps it), so sources of different releases never overwrite each other's shapes."""

    __slots__ = ("current", "_known", "checked")

    def __init__(self) -> None:
        self.current: dict[str, Shape] = {}  # kind -> the shape of the last learned line of that kind
        self._known: dict[tuple, Shape] = {}  # every shape learned so far (at most _MAX_TEMPLATES)
        self.checked: frozenset[str] | None = None  # the attributes of the shape check_batch last read a line with

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
        if t is None or len(line) > MAX_LINE or "\r" in line or "\x1b" in line:
            return None
        fullmatch, build = t._sample or t.sample()
        m = fullmatch(line)
        if m is None:
            return None
        return build(m.groups())

    def batch_read(self, line: str, ts: float, dp: str, tp: int | None, pp: int | None) -> ev.Line | None:
        """:meth:`batch_line` of a line in SGLang's default header whose header was read already (its time and
        ranks given, as ``sglang_ts`` and ``sglang_tags`` read them): its message matched alone, the header not
        again. The same Line as :meth:`batch_line`, None where it gives None."""
        if len(line) > MAX_LINE:
            return None
        return self.batch_message(line[line.find("] ", 20) + 2 :], ts, dp, tp, pp)

    def batch_message(self, msg: str, ts: float | None, dp: str, tp: int | None, pp: int | None) -> ev.Line | None:
        """The parsed Line of a batch message of the current shape of its kind whose header the
        header stage read (time and ranks given), in one ``fullmatch``; None as for :meth:`batch_line`.
        The same Line as ``message_line`` of the header gives for an SGLang source."""
        t = self.current.get(msg[:1])
        if t is None or ts is None or len(msg) > MAX_LINE or "\r" in msg or "\x1b" in msg:
            return None
        fullmatch, build = t._peeled or t.peeled()
        m = fullmatch(msg)
        if m is None:
            return None
        return build(m.groups(), ts, dp, tp, pp)

    def whole(self, msg: str) -> bool:
        """Whether a batch message has the current shape of its kind: every field of the batch lines
        the source printed, in their order (a line read without its newline is whole so)."""
        t = self.current.get(msg[:1])
        return t is not None and t.body.fullmatch(msg) is not None

    def check_batch(self, msg: str) -> tuple[int | None, int | None] | ev.Unrecognized | None:
        """Validate a ``Prefill batch`` / ``Decode batch`` message without building its event.

        The sampler counts every batch line but builds the full event only for the samples the
        rules see. Returns ``(new_tokens, cached_tokens)`` (None where the line has no such field)
        for a well-formed line, ``Unrecognized`` for a malformed one, None if not a batch line. A
        line of the current shape costs one ``fullmatch``; other lines take the generic parser,
        and their shape is learned."""
        self.checked = None
        if len(msg) > MAX_LINE or not msg.startswith(("Decode batch", "Prefill batch")):
            return None
        t = self.current.get(msg[0])
        if t is not None:
            m = t.body.fullmatch(msg)
            if m is not None:
                g = m.groups()
                try:
                    r = (int(g[t.i_new]) if t.i_new is not None else None, int(g[t.i_cached]) if t.i_cached is not None else None)
                    if is_count(r[0]) and is_count(r[1]):
                        self.checked = t.attrs
                        return r
                except ValueError:
                    pass
        b = parse_message(msg)
        if type(b) is ev.BatchStats:
            bad = bad_value(b)
            if bad is not None:  # counters only count, gauges take what an engine prints (parsers.numbers)
                return ev.Unrecognized(bad)
            self.learn(msg)
            return (b.new_tokens, b.cached_tokens)
        return b if type(b) is ev.Unrecognized else None
