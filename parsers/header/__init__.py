"""The header stage: everything around an engine's message, peeled off one line.

(This docstring is replaced by the stage's catalogue in a later step.)
"""

from __future__ import annotations

import time

from .. import sglang, vllm
from ..events import SGLANG, VLLM
from . import structured
from .prefix import Header, sglang_tags, split_header, strip_collector

__all__ = ["Header", "read_header"]


def read_header(raw: str, engine: str | None = None, year: int = 2026) -> Header:
    """Everything around the message of one line: collector prefixes, a JSON or logfmt record
    (:mod:`parsers.header.structured`, twice at most: Docker's ``log`` holding a JSON formatter's line),
    the engine's header or any other (:func:`parsers.header.prefix.split_header`). The time is the
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


def _year_of(epoch: float) -> int:
    return time.gmtime(epoch).tm_year
