"""Pure parsers: one log line -> a :class:`parsers.events.Line` carrying at most one typed event.

``parse_line`` is the single entry point used by ``replay``, ``serve`` and ``report``. It does no
I/O and keeps no state; whatever needs memory (the engine of a source, the year of vLLM's
timestamps, which TP rank speaks for a DP group) lives in ``exporter.state.store``.
"""

from __future__ import annotations

from . import labels, sglang, vllm
from .events import IGNORED, PARSED, SGLANG, UNRECOGNIZED, VLLM, Line, ServerReady, Unrecognized
from .header import Stage, read_header
from .header.prefix import Header, split_header
from .numbers import bad_value
from .shapes import LineShapes

__all__ = ["parse_line", "message_line", "detect_engine", "has_header", "SGLANG", "VLLM"]

_MESSAGE_PARSERS = {SGLANG: sglang.parse_message, VLLM: vllm.parse_message}
# whether a message begins like one of the engine's own (its marker where the message starts, not inside it)
_OPENS = {SGLANG: sglang.starts_message, VLLM: vllm.opens_known}


def parse_line(raw: str, engine: str | None = None, year: int = 2026, shapes: LineShapes | None = None, stage: Stage | None = None) -> Line:
    """Parse one line (without or with its trailing newline).

    ``engine`` is the source's engine when known (``None`` = auto-detect from the header, or
    from the message itself on a line without header).
    Lines without any engine header are still offered to the known engine's message parser,
    since vLLM tracebacks and unprefixed prints carry facts too (``max_num_seqs (N) exceeds``).
    ``shapes``: the batch-line shapes the source's sampler learned; a line of one of them is
    read by one ``fullmatch`` (the same Line as the generic path). ``stage``: the source's header
    stage, whose learned templates read the header (:meth:`parsers.header.Stage.read`). Nothing
    here learns.
    """
    if shapes is not None and raw[:1] == "[" and engine != VLLM:
        # most lines that get here are the sampler's batch samples: one fullmatch when the line
        # has the learned shape of its kind, the same Line as the generic path below (the shape
        # checked its counts: a line with a bad one is left to that path)
        hit = shapes.batch_line(raw)
        if hit is not None:
            return hit
    if stage is not None:
        if shapes is not None and engine == SGLANG and stage.templates:
            hit = stage.batch_line(raw, shapes)  # the samples again: envelope and message in one fullmatch
            if hit is not None:
                return hit
        h = stage.read(raw, engine, year)
        if shapes is not None and engine == SGLANG and h.msg[:1] in "DP" and h.tod is None:
            hit = shapes.batch_message(h.msg, h.ts, h.dp_rank, h.tp_rank, h.pp_rank)
            if hit is not None:
                return hit
    else:
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


def has_header(raw: str, engine: str | None = None, year: int = 2026) -> bool:
    """Whether the line starts with an engine header or any other header (a terminal's wrapped
    continuation lines have none), or is a structured record."""
    return read_header(raw, engine, year).via != ""


def detect_engine(raw: str) -> str | None:
    """The engine whose header this line carries, or None."""
    return read_header(raw, None, 2026).engine
