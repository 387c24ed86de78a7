"""Pure parsers: one log line -> a :class:`parsers.events.Line` carrying at most one typed event.

``parse_line`` is the single entry point used by ``replay``, ``serve`` and ``report``. It does no
I/O and keeps no state; whatever needs memory (the engine of a source, the year of vLLM's
timestamps, which TP rank speaks for a DP group) lives in ``exporter.state``.
"""

from __future__ import annotations

from . import sglang, vllm
from .events import IGNORED, PARSED, SGLANG, UNRECOGNIZED, VLLM, Line, Unrecognized
from .numbers import bad_count
from .prefix import split_header, strip_collector
from .shapes import LineShapes

__all__ = ["parse_line", "detect_engine", "has_header", "SGLANG", "VLLM"]

_MESSAGE_PARSERS = {SGLANG: sglang.parse_message, VLLM: vllm.parse_message}


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
    line, cts = strip_collector(raw)
    if cts is not None and engine == VLLM:
        year = _year_of(cts)
    h = split_header(line, engine, year)
    eng = h.engine or engine
    if eng is None:
        # no header and no engine yet (a paste of bare messages): the engine whose parser
        # recognises the message, if any; their markers do not overlap
        for cand, parse in _MESSAGE_PARSERS.items():
            res = parse(h.msg)
            if res is not None and type(res) is not Unrecognized:
                eng = cand
                break
        else:
            return Line(IGNORED)
    else:
        res = _MESSAGE_PARSERS[eng](h.msg)
    ts = h.ts if h.ts is not None else cts
    tod = h.tod if ts is None else None
    if res is None:
        return Line(IGNORED, eng if h.engine else None, ts, h.dp_rank, h.tp_rank, h.pp_rank, tod=tod)
    if type(res) is Unrecognized:
        return Line(UNRECOGNIZED, eng, ts, h.dp_rank, h.tp_rank, h.pp_rank, None, res.reason, tod)
    bad = bad_count(res)
    if bad is not None:  # counters only count (parsers.numbers.MAX_COUNT)
        return Line(UNRECOGNIZED, eng, ts, h.dp_rank, h.tp_rank, h.pp_rank, None, f"count out of range: {bad}", tod)
    dp = h.dp_rank
    idx = getattr(res, "engine_index", None)
    if idx is not None:
        dp = str(idx)
    return Line(PARSED, eng, ts, dp, h.tp_rank, h.pp_rank, res, tod=tod)


def _year_of(epoch: float) -> int:
    import time

    return time.gmtime(epoch).tm_year


def has_header(raw: str, engine: str | None = None, year: int = 2026) -> bool:
    """Whether the line starts with an engine header, whole or damaged (a terminal's wrapped
    continuation lines have none)."""
    line, _ = strip_collector(raw)
    h = split_header(line, engine, year)
    return h.engine is not None or h.msg is not line


def detect_engine(raw: str) -> str | None:
    """The engine whose header this line carries, or None."""
    line, _ = strip_collector(raw)
    return split_header(line, None, 2026).engine
