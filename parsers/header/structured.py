"""Structured lines: a JSON object or a logfmt line -> the message and the fields around it.

What common formatters and collectors write, one object per line:

* python-json-logger (vLLM's ``--logging-config.formatter json``, any ``dictConfig``):
  ``{"asctime": "2026-03-02 08:01:44,123", "levelname": "INFO", "name": ..., "processName":
  "EngineCore_DP0", "process": 7, "message": "..."}``;
* structlog's ``JSONRenderer``: ``{"event": "...", "level": "info", "timestamp": "...Z"}``;
* Docker's json-file and collectors that keep the raw line (Fluent Bit, Fluentd): ``{"log":
  "<the engine's whole line>\\n", "stream": ..., "time": ..., "kubernetes": {...}}``; Vector:
  ``{"message": ..., "timestamp": ...}``; Cloud Logging ``textPayload`` / ``jsonPayload.message``;
  ``journalctl -o json``'s ``MESSAGE`` and ``__REALTIME_TIMESTAMP`` (microseconds); tracing's
  ``{"fields": {"message": ...}}``; loguru's ``{"text": ..., "record": {...}}``;
* logfmt: ``ts=2026-03-02T08:01:44.123Z level=info msg="..."`` (go-kit, logrus, structlog's
  ``LogfmtRenderer`` with ``event=``, logfmter's ``at=``).

The message is the first of ``MESSAGE_KEYS`` found, at the top level first, then in nested
objects (breadth first, bounded); the time, the level and the rank fields likewise. The message
is then read like any line (it may carry the engine's own header: Docker's ``log``, Vector's
``message``); what the record says fills in what that header does not. Pure; never raises: a line
that is not such a record gives None and is read as text.
"""

from __future__ import annotations

import json
import re

from .preamble import dp_of_process, read_time
from .prefix import Header, sglang_tags

MESSAGE_KEYS = ("message", "msg", "event", "log", "MESSAGE", "textPayload", "body", "stringValue")
LAST_KEYS = ("text",)  # looked for only where none of MESSAGE_KEYS is (loguru's 'text' is the formatted line)
TIME_KEYS = (
    "asctime", "timestamp", "time", "ts", "@timestamp", "datetime", "date", "t", "when", "created",
    "__REALTIME_TIMESTAMP", "timeUnixNano", "time_unix_nano", "repr",
)  # fmt: skip
LEVEL_KEYS = ("levelname", "level", "severity", "lvl", "log.level", "loglevel", "at")
RANK_KEYS = {"dp_rank": "dp", "tp_rank": "tp", "pp_rank": "pp", "dp": "dp", "tp": "tp", "pp": "pp"}
PROCESS_KEYS = ("processName", "process_name", "vllm_process_name")
TAG_KEYS = ("prefix", "tags", "ranks")
_EXTRA_KEYS = frozenset(RANK_KEYS) | frozenset(PROCESS_KEYS) | frozenset(TAG_KEYS)
MAX_NODES = 64  # nested objects looked into, per record
MAX_DEPTH = 4
MAX_RECORD = 4 << 20  # longer lines are not decoded as records (the line cap is 1 MiB anyway)
_LEVEL_WORDS = frozenset(("debug", "info", "warning", "warn", "error", "critical", "fatal", "trace", "notice"))


class Record:
    """One structured line: its message and what the record said around it."""

    __slots__ = ("kind", "msg", "msg_key", "ts", "tod", "level", "dp", "tp", "pp", "process", "tags")

    def __init__(self, kind: str, msg: str, msg_key: str) -> None:
        self.kind = kind  # 'json' | 'logfmt'
        self.msg = msg
        self.msg_key = msg_key  # where the message was ('message', 'fields.message', 'log', ...)
        self.ts: float | None = None
        self.tod: float | None = None
        self.level: str | None = None
        self.dp: str | None = None
        self.tp: int | None = None
        self.pp: int | None = None
        self.process: str | None = None
        self.tags = ""  # rank tags as text (' DP1 TP0'), from a 'prefix'/'tags' field


def record(line: str, year: int) -> Record | None:
    """The record ``line`` is (a JSON object or a logfmt line with a message), or None."""
    c = line[:1]
    if c == "{":
        return json_record(line, year)
    if ("a" <= c <= "z" or "A" <= c <= "Z" or c == "_" or c == "@") and "=" in line[:64]:
        return logfmt_record(line, year)
    return None


def json_record(line: str, year: int) -> Record | None:
    if len(line) > MAX_RECORD:
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    return from_fields(obj, "json", year)


def from_fields(obj: dict, kind: str, year: int) -> Record | None:
    """The record of a decoded object: the message, then the other fields, nearest first."""
    nodes = _nodes(obj)
    found = _first(nodes, MESSAGE_KEYS, str) or _first(nodes, LAST_KEYS, str)
    if found is None:
        return None
    path, msg = found
    rec = Record(kind, msg.rstrip("\n"), path)
    t = _first(nodes, TIME_KEYS, (str, int, float))
    if t is not None:
        rec.ts, rec.tod = _time(t[0].rsplit(".", 1)[-1], t[1], year)
    lv = _first(nodes, LEVEL_KEYS, str, lambda v: v.lower() in _LEVEL_WORDS)
    if lv is not None:
        rec.level = str(lv[1]).upper()
    for node in nodes:
        if _EXTRA_KEYS.isdisjoint(node):  # the usual record: none of them (one set operation)
            continue
        for key, what in RANK_KEYS.items():
            v = node.get(key)
            if getattr(rec, what) is None and (type(v) is int or (isinstance(v, str) and v.isdigit())):
                setattr(rec, what, str(int(v)) if what == "dp" else int(v))
        for key in PROCESS_KEYS:
            v = node.get(key)
            if rec.process is None and isinstance(v, str):
                rec.process = v
        for key in TAG_KEYS:
            v = node.get(key)
            if isinstance(v, str) and not rec.tags:
                rec.tags = " " + v.strip()
    if rec.process and rec.dp is None:
        rec.dp = dp_of_process(rec.process)
    return rec


def _nodes(obj: dict) -> list[dict]:
    """``obj`` and the objects nested in it, breadth first (at most MAX_NODES, MAX_DEPTH deep)."""
    out, level = [obj], [obj]
    for _ in range(MAX_DEPTH):
        nxt = []
        for node in level:
            for v in node.values():
                if isinstance(v, dict) and len(out) + len(nxt) < MAX_NODES:
                    nxt.append(v)
        if not nxt:
            break
        out += nxt
        level = nxt
    return out


def _first(nodes: list[dict], keys: tuple[str, ...], types, ok=None) -> tuple[str, object] | None:
    """``(key, value)`` of the first key of ``keys`` with a value of ``types`` (and ``ok``), in the
    nearest object that has one."""
    for node in nodes:
        for k in keys:
            v = node.get(k)
            if isinstance(v, types) and type(v) is not bool and (ok is None or ok(v)):
                return k, v
            if isinstance(v, dict) and k in ("time", "timestamp", "body", "message", "log"):
                continue  # looked into as a nested object (loguru's 'time': {'repr': ...})
    return None


def _time(key: str, v: object, year: int) -> tuple[float | None, float | None]:
    """A time field's value -> (ts, tod). Numbers are Unix time in s, ms, us or ns (by size);
    journald's ``__REALTIME_TIMESTAMP`` and OpenTelemetry's ``timeUnixNano`` are integers in text."""
    if isinstance(v, str):
        s = v.strip()
        if s.replace(".", "", 1).isdigit():
            try:
                v = float(s)
            except ValueError:
                return None, None
        else:
            return read_time(s, year)
    if isinstance(v, (int, float)) and v == v and v > 0:
        x = float(v)
        if key == "__REALTIME_TIMESTAMP":
            return x / 1e6, None
        # seconds until the year 5138; after that milliseconds, microseconds, nanoseconds
        for limit, unit in ((1e11, 1.0), (1e14, 1e3), (1e17, 1e6), (1e20, 1e9)):
            if x < limit:
                return x / unit, None
    return None, None


def merge(inner: Record, outer: Record) -> None:
    """Fill what the inner record lacks from the outer one (Docker's record around a JSON line)."""
    for a in ("ts", "tod", "level", "dp", "tp", "pp", "process"):
        if getattr(inner, a) is None:
            setattr(inner, a, getattr(outer, a))
    inner.tags = inner.tags or outer.tags
    inner.kind = f"{outer.kind}+{inner.kind}"
    inner.msg_key = f"{outer.msg_key}>{inner.msg_key}"


def fill(h: Header, rec: Record) -> None:
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


# logfmt: key=value pairs, values bare or double-quoted with backslash escapes
_PAIR_RE = re.compile(r'([A-Za-z_@][\w.@/\-]*)=("(?:[^"\\]|\\.)*"|[^\s"]*)(?:\s+|$)')
_ESC_RE = re.compile(r"\\(.)")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


def logfmt_record(line: str, year: int) -> Record | None:
    """A logfmt line with a message key (``msg``, ``message``, ``event``...), or None: every
    token must be a ``key=value`` pair (a bare SGLang ``max_total_num_tokens=...`` line has no
    message key and stays text)."""
    if len(line) > 65536:
        return None
    fields: dict[str, str] = {}
    pos, n = 0, len(line.rstrip())
    match = _PAIR_RE.match
    while pos < n:
        m = match(line, pos)
        if m is None:
            return None
        v = m.group(2)
        if v[:1] == '"':
            v = v[1:-1]
            if "\\" in v:
                v = _ESC_RE.sub(lambda e: _ESCAPES.get(e.group(1), e.group(1)), v)
        fields.setdefault(m.group(1), v)
        pos = m.end()
    if not any(k in fields for k in MESSAGE_KEYS + LAST_KEYS):
        return None
    return from_fields(fields, "logfmt", year)


__all__ = ["LAST_KEYS", "MESSAGE_KEYS", "Record", "fill", "from_fields", "json_record", "logfmt_record", "merge", "record"]
