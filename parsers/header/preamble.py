"""Any header: find the engine's message by its own text, and read what precedes it.

The engines' default headers have fast paths (:mod:`parsers.header.prefix`). Everything else a server
can be configured to print before a message (an ``SGLANG_LOGGING_CONFIG_PATH`` format such as
``[%(asctime)s][%(filename)s:%(lineno)d][%(levelname)s]: ``, Python's classic
``%(asctime)s - %(name)s - %(levelname)s - ``, loguru's ``time | LEVEL | name:fn:N - ``, a
``VLLM_LOGGING_PREFIX``, the remains of a header pasted into a bug report) is read here, by one
rule instead of a list of formats:

1. The text is cut into header tokens from its start: ``[...]`` and ``(...)`` groups, timestamps
   (ISO 8601 with ``T`` or a space, a comma or dot fraction, an optional zone; vLLM's
   ``MM-DD HH:MM:SS``; syslog's ``Mon DD HH:MM:SS``; a bare ``HH:MM:SS``), level words
   (``INFO``, ``WARNING``...), rank tags (``DP1``, ``TP0``...), source files (``x.py:12``) and
   names followed by a separator (``lmdeploy - ``, ``sglang.srt.scheduler: ``), each followed by
   separators (spaces, ``-``, ``|``, ``:``, ``]``). No prose: a word followed by a space is not a
   token, so the tokens stop where the message starts.
2. The message starts at the first token boundary where an engine's message begins
   (``sglang.starts_message`` / ``vllm.starts_message``: the message's own first words), or else
   where the tokens end, if they said something a header says (a time, a level, a rank tag, a
   source file, a process ``(Name pid=N)``). Otherwise the line has no header at all.
3. What precedes the message gives the time (the first full date and time; a year-less vLLM or
   syslog date takes the caller's year; a time of day alone is kept as such, ``tod``), the level,
   the rank tags (``DP``/``TP``/``PP``, a vLLM process ``EngineCore_DP1``) and the process name.

The engine is left to the message (``Header.engine`` None): the caller offers it to the parsers,
whose markers do not overlap, as for a line without header. Pure; never raises.
"""

from __future__ import annotations

import re

from .. import sglang, vllm
from ..clock import minute_epoch, rfc3339_epoch, wall_epoch
from ..events import SGLANG, VLLM
from ..headers import SGLANG_TAG_NAMES, VLLM_DP

MAX_TOKENS = 16
MAX_PREAMBLE = 320  # characters before the message: a header is short

_TIME = (
    r"(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<hms>\d{2}:\d{2}(?::\d{2})?)(?:[.,](?P<frac>\d{1,9}))?"
    r"(?P<zone>Z|[+-]\d{2}:?\d{2}(?!\d))?"
    r"|(?P<md>\d{2}-\d{2}) (?P<mdhms>\d{2}:\d{2}:\d{2})(?:[.,](?P<mdfrac>\d{1,9}))?"
    r"|(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) {1,2}(?P<day>\d{1,2}) (?P<monhms>\d{2}:\d{2}:\d{2})"
    r"|(?P<tod>\d{2}:\d{2}:\d{2})(?:[.,](?P<todfrac>\d{1,9}))?"
)
_LEVEL = r"DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE|NOTICE"
_TAG = rf"(?:{SGLANG_TAG_NAMES})\d+"
_TOKEN_RE = re.compile(
    r"\[(?P<br>[^\[\]\n]{0,160})\]"
    r"|\((?P<pa>[^()\n]{1,160})\)(?=[\s\[(:|\-]|$)"
    r"|(?P<time>" + _TIME + r")(?![\w:])"
    r"|(?P<level>" + _LEVEL + r")(?![\w\-])"
    r"|(?P<tag>" + _TAG + r")(?!\w)"
    r"|(?P<file>[\w.\-/]+\.(?:py|rs|go|cc|cpp|c|h|js|ts|java)(?::\d+)?)(?![\w.])"
    # a logger, module or program name: only when a separator follows it ('lmdeploy - ',
    # 'text_generation_router::server: ', 'python3[28059]: ', 'sglang |'); an exception's name
    # ('ValueError: ...') is the message's own first word
    r"|(?!\w*(?:Error|Exception|Warning)\b)(?P<name>[A-Za-z_][\w.\-/:@<>]{0,80}?(?:\[\d+\])?)(?=: |:$| +- | *\| |\])"
)
_SEP_RE = re.compile(r"[ \t|:\]>\-»]*")
_TIME_RE = re.compile(_TIME)
_TAG_RE = re.compile(r"\b(" + _TAG + r")\b")
_LEVEL_IN_RE = re.compile(r"\b(" + _LEVEL + r")\b", re.IGNORECASE)
_FILE_IN_RE = re.compile(r"[\w\-/]\.(?:py|rs|go|cc|cpp|c|h|js|ts|java):\d+\b")
_PROC_IN_RE = re.compile(r"^\s*(?P<proc>[A-Za-z][\w \-]*?)(?: rank=\d+)? pid=\d+")
_VLLM_DP_RE = re.compile(VLLM_DP)
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}

_STARTS = {SGLANG: (sglang.starts_message,), VLLM: (vllm.starts_message,), None: (sglang.starts_message, vllm.starts_message)}


class Found:
    """What :func:`locate` read: where the message starts and what the header said."""

    __slots__ = ("start", "ts", "tod", "year_less", "level", "tags", "process", "signal")

    def __init__(self) -> None:
        self.start = 0
        self.ts: float | None = None  # the first full date and time (or year-less date completed)
        self.tod: float | None = None  # seconds since midnight of a time without date
        self.year_less = False  # ts came from a date without year (vLLM, syslog)
        self.level: str | None = None
        self.tags = ""  # rank tags as text, ' DP1 TP0'
        self.process: str | None = None
        self.signal = False  # the tokens said something a header says


def locate(line: str, engine: str | None, year: int, spans: list | None = None) -> Found | None:
    """The message behind whatever header ``line`` starts with (see the module docstring), or
    None when ``line`` has no header before a known message and no header-like start at all.
    ``spans``: when given, each token read is appended as ``(match, end of its separators)``
    (the learned templates of :mod:`parsers.header.templates` are made from them)."""
    starts = _STARTS.get(engine, _STARTS[None])
    for s in starts:
        if s(line, 0):
            return None  # the message itself starts the line
    f = Found()
    pos, n = 0, min(len(line), MAX_PREAMBLE)
    token = _TOKEN_RE.match
    sep = _SEP_RE.match
    for _ in range(MAX_TOKENS):
        m = token(line, pos)
        if m is None or m.end() > n:
            break
        _read(m, f, year)
        pos = sep(line, m.end()).end()
        if spans is not None:
            spans.append((m, pos))
        if pos >= len(line):
            return None  # a line of header tokens only: nothing after them
        # a message may start with the dashes a separator is made of (vLLM 0.34's '--max-model-len auto reduced ...')
        dashes = pos
        while dashes > m.end() and line[dashes - 1] == "-":
            dashes -= 1
        for at in (pos, dashes) if dashes != pos else (pos,):
            for s in starts:
                if s(line, at):
                    f.start = at
                    return f
    if f.signal and pos > 0:
        f.start = pos
        return f
    return None


def _read(m: re.Match, f: Found, year: int) -> None:
    """Take what one token says into ``f`` (the first time and level win; tags add up)."""
    kind = m.lastgroup
    if kind == "br" or kind == "pa":
        inner = m.group(kind)
        _read_group(inner, f, year)
    elif kind == "time":
        _read_time(m, f, year)
        f.signal = True
    elif kind == "level":
        f.level = f.level or m.group("level")
        f.signal = True
    elif kind == "tag":
        f.tags += " " + m.group("tag")
        f.signal = True
    elif kind == "file":
        f.signal = f.signal or ":" in m.group("file")


def _read_group(inner: str, f: Found, year: int) -> None:
    """A ``[...]`` or ``(...)`` group: a time, rank tags, a level, a file, a process may be in it.
    (Cheap tests first: most groups hold one of these, and each search costs.)"""
    if ":" in inner:
        if f.ts is None and f.tod is None:
            t = _TIME_RE.search(inner)
            if t is not None:
                _read_time(t, f, year)
                f.signal = True
        if not f.signal and "." in inner and _FILE_IN_RE.search(inner):
            f.signal = True
    if "P" in inner:  # DP, TP, PP, EP, ATTN_CP, MOE_DP
        tags = _TAG_RE.findall(inner)
        if tags:
            f.tags += " " + " ".join(tags)
            f.signal = True
    if "pid=" in inner:
        p = _PROC_IN_RE.match(inner)
        if p is not None:
            f.process = f.process or p.group("proc")
            f.signal = True
    if f.level is None and len(inner) <= 10:  # '[INFO]', '[info     ]', not prose
        lv = _LEVEL_IN_RE.search(inner)
        if lv is not None:
            f.level = lv.group(1).upper()
            f.signal = True


def _read_time(m: re.Match, f: Found, year: int) -> None:
    if f.ts is not None:
        return
    ts, tod, year_less = time_of(m, year)
    if ts is not None:
        f.ts, f.tod, f.year_less = ts, None, year_less
    elif f.tod is None:
        f.tod = tod


def time_of(m: re.Match, year: int) -> tuple[float | None, float | None, bool]:
    """``(ts, tod, year_less)`` of a match of ``_TIME``: a full date and time -> ts (its zone if it
    has one, else the configured zone); a year-less date -> ts in ``year``; a time alone -> tod."""
    g = m.groupdict()
    try:
        if g["date"]:
            hms = g["hms"] if len(g["hms"]) == 8 else g["hms"] + ":00"
            frac = g["frac"]
            if g["zone"]:
                z = g["zone"]
                if z != "Z" and ":" not in z:
                    z = z[:3] + ":" + z[3:]
                return rfc3339_epoch(f"{g['date']}T{hms}{'.' + frac if frac else ''}{z}"), None, False
            # the minute's start from the clock's cache: one conversion per minute of log
            return minute_epoch(f"{g['date']} {hms[:5]}") + int(hms[6:8]) + _frac(frac), None, False
        if g["md"]:
            md, hms = g["md"], g["mdhms"]
            return minute_epoch(f"{year:04d}-{md} {hms[:5]}") + int(hms[6:8]) + _frac(g["mdfrac"]), None, True
        if g["mon"]:
            hms = g["monhms"]
            return wall_epoch(year, _MONTHS[g["mon"]], int(g["day"]), int(hms[:2]), int(hms[3:5]), int(hms[6:8])), None, True
        hms = g["tod"]
        return None, int(hms[:2]) * 3600 + int(hms[3:5]) * 60 + int(hms[6:8]) + _frac(g["todfrac"]), False
    except (ValueError, OverflowError, IndexError):
        return None, None, False


def _frac(s: str | None) -> float:
    return float("0." + s) if s else 0.0


def read_time(text: str, year: int) -> tuple[float | None, float | None]:
    """``(ts, tod)`` of a time written alone (a JSON or logfmt field): ISO 8601 with or without
    zone, a year-less vLLM date, a syslog date, or a time of day; (None, None) for anything else."""
    m = _TIME_RE.match(text.strip())
    if m is None:
        return None, None
    ts, tod, _ = time_of(m, year)
    return ts, tod


def tags_in(text: str) -> str:
    """The rank tags a ``[...]`` group's text carries, as the reader adds them up (``'DP1 TP0'``)."""
    return " ".join(_TAG_RE.findall(text)) if "P" in text else ""


def dp_of_process(proc: str) -> str | None:
    """The DP rank a vLLM process name carries (``EngineCore_DP1``, ``Worker_DP1_TP0``), or None."""
    m = _VLLM_DP_RE.search(proc)
    return m.group(1) if m else None


__all__ = ["Found", "dp_of_process", "locate", "read_time", "tags_in", "time_of"]
