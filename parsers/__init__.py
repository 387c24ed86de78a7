"""Pure parsers: one log line -> a :class:`parsers.events.Line` carrying at most one typed event.

``parse_line`` is the single entry point used by ``replay``, ``serve`` and ``report``. It does no
I/O and keeps no state; whatever needs memory (the engine of a source, the year of vLLM's
timestamps, which TP rank speaks for a DP group) lives in ``exporter.state``.
"""

from __future__ import annotations

from . import labels, sglang, structured, vllm
from .events import IGNORED, PARSED, SGLANG, UNRECOGNIZED, VLLM, Line, ServerReady, Unrecognized
from .foreign import foreign
from .numbers import bad_value
from .prefix import Header, sglang_tags, split_header, strip_collector
from .shapes import LineShapes

__all__ = ["parse_line", "read_header", "message_line", "detect_engine", "has_header", "SGLANG", "VLLM"]

_MESSAGE_PARSERS = {SGLANG: sglang.parse_message, VLLM: vllm.parse_message}
# whether a message begins like one of the engine's own (its marker where the message starts, not inside it)
_OPENS = {SGLANG: sglang.starts_message, VLLM: vllm.opens_known}


def parse_line(raw: str, engine: str | None = None, year: int = 2026, shapes: LineShapes | None = None) -> Line:
    """Parse one line (without or with its trailing newline).

    ``engine`` is the source's engine when known (``None`` = auto-detect from the header, or
    from the message itself on a line without header).
    Lines without any engine header are still offered to the known engine's message parser,
    since vLLM tracebacks and unprefixed prints carry facts too (``max_num_seqs (N) exceeds``).
    ``shapes``: the batch-line shapes the source's sampler learned; a line of one of them is
    read by one ``fullmatch`` (the same Line as the generic path). Nothing here learns.
    """
    if shapes is not None and raw[:1] == "[" and engine != VLLM:
        # most lines that get here are the sampler's batch samples: one fullmatch when the line
        # has the learned shape of its kind, the same Line as the generic path below (the shape
        # checked its counts: a line with a bad one is left to that path)
        hit = shapes.batch_line(raw)
        if hit is not None:
            return hit
    h = read_header(raw, engine, year)
    if "\n" in h.msg:  # a structured record's message of several lines: the first that says something
        first = None
        for piece in h.msg.split("\n"):
            if not piece.strip():
                continue
            ph = split_header(piece, engine, year)
            _inherit(ph, h)
            got = message_line(ph, engine)
            if got.outcome != IGNORED:
                return got
            first = first or got
        return first or Line(IGNORED)
    return message_line(h, engine)


def message_line(h: Header, engine: str | None) -> Line:
    """The Line of a header already read (:func:`read_header`): its message through the engine's
    parser (both, when neither the header nor the source tells the engine)."""
    eng = h.engine or engine
    if eng is None:
        # no header and no engine yet (a paste of bare messages): the engine whose parser
        # recognises the message, if any; their markers do not overlap
        damaged = None
        for cand, parse in _MESSAGE_PARSERS.items():
            res = parse(h.msg)
            if res is not None and type(res) is not Unrecognized and not (type(res) is ServerReady and h.msg.startswith("INFO:")):
                # (a bare uvicorn 'Application startup complete.' is any uvicorn app's: it does not tell the engine)
                eng = cand
                break
            if type(res) is Unrecognized and damaged is None and _OPENS[cand](h.msg):
                damaged = cand, res  # a damaged or abridged form of one of its messages (it begins like one)
        else:
            tod = h.tod if h.ts is None else None
            if damaged is not None:
                return Line(UNRECOGNIZED, damaged[0], h.ts, h.dp_rank, h.tp_rank, h.pp_rank, None, damaged[1].reason, tod)
            return Line(IGNORED, None, h.ts, h.dp_rank, h.tp_rank, h.pp_rank, tod=tod)
    else:
        res = _MESSAGE_PARSERS[eng](h.msg)
        if type(res) is ServerReady and eng == VLLM and h.via == "preamble" and h.process is None and h.msg.startswith("INFO:"):
            res = None  # uvicorn's line behind a header that is not vLLM's (SGLang's '[date] INFO: ...'): not vLLM's readiness
    ts = h.ts
    tod = h.tod if ts is None else None
    if res is None:
        return Line(IGNORED, eng if h.engine else None, ts, h.dp_rank, h.tp_rank, h.pp_rank, tod=tod)
    if type(res) is Unrecognized:
        return Line(UNRECOGNIZED, eng, ts, h.dp_rank, h.tp_rank, h.pp_rank, None, res.reason, tod)
    bad = bad_value(res)
    if bad is not None:  # counters only count, ratios are 0-1, counts not negative (parsers.numbers)
        return Line(UNRECOGNIZED, eng, ts, h.dp_rank, h.tp_rank, h.pp_rank, None, bad, tod)
    dp = h.dp_rank
    idx = getattr(res, "engine_index", None)
    if idx is not None:
        dp = str(idx)
    if isinstance(res, labels.LABELLED):
        res, bad = labels.checked(res)  # label values named as the engine names them, within their bounds
        if bad is not None:  # one out of bound: dropped, the rest read, the line unrecognized
            return Line(UNRECOGNIZED, eng, ts, dp, h.tp_rank, h.pp_rank, res, bad, tod)
    return Line(PARSED, eng, ts, dp, h.tp_rank, h.pp_rank, res, tod=tod)


def read_header(raw: str, engine: str | None = None, year: int = 2026) -> Header:
    """Everything around the message of one line: collector prefixes, a JSON or logfmt record
    (:mod:`parsers.structured`, twice at most: Docker's ``log`` holding a JSON formatter's line),
    the engine's header or any other (:func:`parsers.prefix.split_header`). The time is the
    engine header's own, else the record's, else the collector's (docs/formats/README.md#time);
    ``Header.via`` names what was read, for ``replay --explain``."""
    line, cts = strip_collector(raw)
    rec = None
    for _ in range(2):
        c = line[:1]
        if c != "{" and not ("=" in line[:64] and (c.isalpha() or c == "_" or c == "@")):
            break
        r = structured.record(line, year)
        if r is None:
            break
        if rec is not None:
            _merge(r, rec)
        rec = r
        line, inner_cts = strip_collector(r.msg)
        if inner_cts is not None:
            cts = inner_cts
    if engine == VLLM:
        t = rec.ts if rec is not None and rec.ts is not None else cts
        if t is not None:
            year = _year_of(t)
    if rec is not None and ((engine != VLLM and sglang.starts_message(line)) or (engine != SGLANG and vllm.starts_message(line))):
        h = Header(None, line)  # a record's bare message (the usual case): no header to look for
    else:
        h = split_header(line, engine, year)
    if rec is not None:
        _from_record(h, rec)
    if h.ts is None and cts is not None:
        h.ts = cts
        h.tod = None
    elif h.tod is not None and h.via == "preamble" and foreign(line):
        h.tod = None  # another writer's stamp (torch's '[W1104 10:12:44.361437153 ...]'): not the log's clock
    return h


def _merge(inner: structured.Record, outer: structured.Record) -> None:
    """Fill what the inner record lacks from the outer one (Docker's record around a JSON line)."""
    for a in ("ts", "tod", "level", "dp", "tp", "pp", "process"):
        if getattr(inner, a) is None:
            setattr(inner, a, getattr(outer, a))
    inner.tags = inner.tags or outer.tags
    inner.kind = f"{outer.kind}+{inner.kind}"
    inner.msg_key = f"{outer.msg_key}>{inner.msg_key}"


def _from_record(h: Header, rec: structured.Record) -> None:
    """What a structured record says, where the header in its message did not say it."""
    if h.ts is None:
        h.ts = rec.ts
        if rec.ts is None and h.tod is None:
            h.tod = rec.tod
        elif rec.ts is not None:
            h.tod = None
    if h.level is None:
        h.level = rec.level
    if h.process is None and rec.process is not None:
        h.process = rec.process
    if h.via not in ("sglang", "vllm"):  # a default header's rank tags are the engine's own
        if rec.tags:
            dp, tp, pp = sglang_tags(rec.tags)
            h.dp_rank = dp if dp != "0" or h.dp_rank == "0" else h.dp_rank
            h.tp_rank = tp if tp is not None else h.tp_rank
            h.pp_rank = pp if pp is not None else h.pp_rank
        if rec.dp is not None and h.dp_rank == "0":
            h.dp_rank = rec.dp
        if rec.tp is not None and h.tp_rank is None:
            h.tp_rank = rec.tp
        if rec.pp is not None and h.pp_rank is None:
            h.pp_rank = rec.pp
    h.via = f"{rec.kind}[{rec.msg_key}]" + (f" + {h.via}" if h.via else "")


def _inherit(piece: Header, whole: Header) -> None:
    """A line of a multi-line record message: the record's time and ranks where the line has none."""
    if piece.ts is None and piece.tod is None:
        piece.ts, piece.tod = whole.ts, whole.tod
    if piece.dp_rank == "0":
        piece.dp_rank = whole.dp_rank
    piece.tp_rank = whole.tp_rank if piece.tp_rank is None else piece.tp_rank
    piece.pp_rank = whole.pp_rank if piece.pp_rank is None else piece.pp_rank
    piece.engine = piece.engine or whole.engine
    piece.via = whole.via


def _year_of(epoch: float) -> int:
    import time

    return time.gmtime(epoch).tm_year


def has_header(raw: str, engine: str | None = None, year: int = 2026) -> bool:
    """Whether the line starts with an engine header or any other header (a terminal's wrapped
    continuation lines have none), or is a structured record."""
    return read_header(raw, engine, year).via != ""


def detect_engine(raw: str) -> str | None:
    """The engine whose header this line carries, or None."""
    return read_header(raw, None, 2026).engine
