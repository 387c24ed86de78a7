"""Line prefixes: collector wrappers, ANSI colours, and each engine's logging header.

Pure functions, no I/O. The order follows the reference's pitfalls list: collector prefix
(docker compose ``svc | ``, RFC3339 ``...Z ``, CRI ``... stdout F ``, journald ``short`` and
``short-iso``), ANSI codes, ``\\r``; then the engine header. The engines' default headers are the
fast paths: SGLang ``[YYYY-MM-DD HH:MM:SS(.mmm)? TAGS] `` (not anchored: junk and Ray prefixes may
precede it) and vLLM ``[(Name pid=N) ]LEVEL MM-DD HH:MM:SS [file:N] ``; any other header (a logging
config's, a pasted one, a damaged one) is read by :mod:`parsers.header.preamble`, which finds the message
by its own text. Structured lines (JSON, logfmt) are unwrapped by :mod:`parsers.header.structured`
before any of this. Times become Unix seconds in :mod:`parsers.clock` (the zone rule).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import regex

from ..clock import minute_epoch, rfc3339_epoch, sglang_ts
from ..events import SGLANG, VLLM
from ..headers import SGLANG_TAG_NAMES, VLLM_DP, VLLM_LEVELS, VLLM_PROC, sglang_header
from . import preamble

ANSI_RE = regex.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# RFC3339 timestamp a collector put in front (docker logs -t, CRI, kubectl --timestamps)
_RFC3339 = r"(?P<cts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))"
COLLECTOR_RE = regex.compile(
    r"^(?:"
    + _RFC3339
    + r"(?:\s+(?:stdout|stderr)\s+[FP]\s+"  # CRI: '<ts> stdout F <msg>'
    + r"| [\w.\-]{1,64} [\w.\-/@]{1,64}(?:\[\d+\])?: "  # journalctl -o short-iso: '<ts> host ident[pid]: '
    + r"|\s+)"
    + r"|(?P<dcts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?) \| "  # compose with timestamps
    + r"|[\w.-]{1,64}\s{1,32}\| "  # docker compose service prefix 'sglang-1  | ' (bounded: no backtracking on long lines)
    + r"|[A-Za-zА-Яа-я]{3}\.? {1,2}\d{1,2} \d{2}:\d{2}:\d{2} \S+ [\w.\-/]+(?:\[\d+\])?: "  # journald (short)
    + r")"
)

# stdlib re: ~3x faster than `regex` for these short patterns (measured on the bench log)
SGLANG_HEADER_RE = re.compile(sglang_header())
SGLANG_TAG_RE = re.compile(rf"\b({SGLANG_TAG_NAMES})(\d+)\b")

VLLM_HEADER_RE = re.compile(
    r"(?:" + VLLM_PROC + r"?)?"
    r"(?P<level>" + VLLM_LEVELS + r") "
    r"(?P<md>\d{2}-\d{2}) (?P<time>\d{2}:\d{2}:\d{2})(?:[.,]\d+)? "
    r"\[?(?P<file>[^\]\s:]+):(?P<lineno>\d+)\] "
)
# a process prefix without a level (tracebacks, prints under the stdout wrapper)
VLLM_PROC_RE = re.compile(VLLM_PROC)
VLLM_DP_RE = re.compile(VLLM_DP)


_LEVELS = tuple(f"{level} " for level in VLLM_LEVELS.split("|"))
# a vLLM header's level and date, for the cheap test whether an untagged SGLang-like stamp
# stands before a whole vLLM line (only asked while a source's engine is not known)
_VLLM_WORDS_RE = re.compile(r"(?:" + VLLM_LEVELS + r") \d\d-\d\d \d\d:")
_BLANK = (" ", "\t")  # a second space or a tab after a header (pastes, collectors): not the message


@dataclass(slots=True)
class Header:
    engine: str | None
    msg: str
    ts: float | None = None
    dp_rank: str = "0"
    tp_rank: int | None = None
    pp_rank: int | None = None
    level: str | None = None
    process: str | None = None
    tod: float | None = None  # seconds since midnight of a header that has no date
    via: str = ""  # which reader found it: 'sglang', 'vllm' (the default headers), 'preamble'; '' none
    bucket: str | None = None  # the 10-s bucket of a zone-less time as its text gives it (a template's; else from ts)


_TAGS_CACHE: dict[str, tuple[str, int | None, int | None]] = {}


def sglang_tags(tags: str) -> tuple[str, int | None, int | None]:
    """``' DP1 PP0 TP4 EP4'`` -> (dp_rank, tp_rank, pp_rank); cached, tag strings are few."""
    v = _TAGS_CACHE.get(tags)
    if v is None:
        dp, tp, pp = "0", None, None
        for name, num in SGLANG_TAG_RE.findall(tags):
            if name == "DP":
                dp = num
            elif name == "TP":
                tp = int(num)
            elif name == "PP":
                pp = int(num)
        v = (dp, tp, pp)
        if len(_TAGS_CACHE) < 4096:
            _TAGS_CACHE[tags] = v
    return v


def strip_collector(line: str) -> tuple[str, float | None]:
    """Remove a collector prefix and ANSI codes and ``\\r``; return the line and the collector's
    timestamp (Unix seconds) when it carried one."""
    if "\r" in line:
        # vLLM's multi-line messages end in '\r\n'; tqdm bars overwrite with '\r': keep the last
        line = line.rstrip("\r\n")
        if "\r" in line:
            line = line.rsplit("\r", 1)[-1] or line.replace("\r", "")
    if "\x1b" in line:
        line = ANSI_RE.sub("", line)
    cts = None
    c = line[:1]
    if c == "[":  # an SGLang header right away: no collector prefix starts with '['
        return line, None
    m = COLLECTOR_RE.match(line)
    if m is not None:
        try:
            if m.group("cts"):
                cts = rfc3339_epoch(m.group("cts"))
            elif m.group("dcts"):
                d = m.group("dcts")
                cts = minute_epoch(d[:16]) + float(d[17:])
        except (ValueError, IndexError):
            cts = None
        line = line[m.end() :]
    return line, cts


def split_header(line: str, engine: str | None, year: int) -> Header:
    """Find the engine's logging header in an already unwrapped line.

    ``engine`` restricts the search when the source's engine is known; ``year`` completes vLLM's
    year-less timestamps. The default headers first (the fast paths), then any other header
    (:func:`parsers.header.preamble.locate`). Returns ``Header(engine=None, msg=line)`` when no header is
    present (continuations, tracebacks, third-party prints), so message parsers can still run.
    """
    if engine != VLLM:
        m = SGLANG_HEADER_RE.match(line) if line[:1] == "[" else SGLANG_HEADER_RE.search(line)
        if m is not None:
            ymdhm, sec, ms, tags = m.groups()
            ts = sglang_ts(ymdhm, sec, ms)
            msg = line[m.end() :]
            if msg[:1] in _BLANK:
                msg = msg.lstrip(" \t")
            if tags:
                dp, tp, pp = sglang_tags(tags)
                return Header(SGLANG, msg, ts, dp, tp, pp, via=SGLANG)
            if msg[:1] == "[" or (engine is None and _VLLM_WORDS_RE.search(msg, 0, 512) is not None):
                # an untagged '[date time] ' before a whole engine line is a collector's stamp
                # ('[2025-01-09 11:20:03] INFO 01-09 03:20:03 metrics.py:455] ...', maybe with
                # another collector's prefix between): the inner header is the engine's, the stamp
                # gives the time where it has none (vLLM's year)
                inner = _inner_header(msg, engine, int(ymdhm[:4]), ts)
                if inner is not None:
                    return inner
            return Header(SGLANG, msg, ts, via=SGLANG)
    if engine != SGLANG:
        if engine == VLLM and line[:2] == "[2":
            st = SGLANG_HEADER_RE.match(line)  # a collector's '[date time] ' stamp: its year is the line's
            if st is not None:
                h = _inner_header(line[st.end() :], engine, int(st.group(1)[:4]), sglang_ts(*st.groups()[:3]))
                if h is not None:
                    return h
        h = _vllm_header(line, year)
        if h is not None:
            return h
    return _any_header(line, engine, year)


def _inner_header(msg: str, engine: str | None, year: int, outer_ts: float) -> Header | None:
    """The engine header after a collector's ``[date time] `` stamp, or None."""
    if msg[:1] == "[" and SGLANG_HEADER_RE.match(msg) is not None:
        h = split_header(msg, engine, year)
    else:
        if engine == SGLANG:
            return None
        m = VLLM_HEADER_RE.search(msg, 0, 512)
        if m is None:
            return None
        h = _vllm_header(msg, year)
    if h.ts is None:
        h.ts = outer_ts
    return h


def _vllm_header(line: str, year: int, anchored: bool = False) -> Header | None:
    m = VLLM_HEADER_RE.match(line) if anchored else VLLM_HEADER_RE.search(line)
    if m is None:
        return None
    md = m.group("md")
    t = m.group("time")
    ts = minute_epoch(f"{year:04d}-{md} {t[:5]}") + int(t[6:8])
    proc = m.group("proc")
    if proc is None:
        pm = VLLM_PROC_RE.search(line, 0, m.start() + 1)
        proc = pm.group("proc") if pm else None
    msg = line[m.end() :]
    h = Header(VLLM, msg.lstrip(" \t") if msg[:1] in _BLANK else msg, ts, level=m.group("level"), process=proc, via=VLLM)
    if proc:
        dm = VLLM_DP_RE.search(proc)
        if dm:
            h.dp_rank = dm.group(1)
    return h


def _any_header(line: str, engine: str | None, year: int) -> Header:
    """Any other header, or none (:func:`parsers.header.preamble.locate`): the engine is left to the message."""
    f = preamble.locate(line, engine, year)
    if f is None:
        return Header(None, line)
    # a vLLM source's '(Name pid=N) ' process prefix is its own (the stdout wrapper of <=0.30
    # puts it before every line it prints); any other header leaves the engine to the message
    eng = VLLM if engine == VLLM and f.process is not None else None
    h = Header(eng, line[f.start :], f.ts, level=f.level, process=f.process, tod=f.tod if f.ts is None else None, via="preamble")
    if f.tags:
        h.dp_rank, h.tp_rank, h.pp_rank = sglang_tags(f.tags)
    if f.process:
        dp = preamble.dp_of_process(f.process)
        if dp is not None:
            h.dp_rank = dp
    return h
