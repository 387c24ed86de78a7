"""Learned envelope templates: the fast form of a source's header, learned from its own lines.

A server writes every line in one format: a logging config's header, one JSON or logfmt record
shape, a collector's prefix before the engine's header. The generic reader
(:func:`parsers.header.read_header`) finds the message of any line by looking at it token by token
(40 µs); a :class:`Template` made from one line it read reads every later line of that shape in
one ``match`` and gives the same header (the same time, rank tags, engine, message and ``via``),
and the bulk scanner (``exporter/_scan.c``, ``exporter/state/scan.py``) reads runs of such lines with
no Python per line at all. What was learned belongs to one source (the stage's
:class:`parsers.header.Stage`), like the batch-line shapes (:mod:`parsers.shapes`).

A template is a tuple of items, one description that this module compiles to a regex (the line
path and the pure-Python scanner) and the C scanner reads as it is:

* ``("L", text)``: literal text;
* ``("T", sep, fsep, fdigits, zone, use)``: a date and time ``YYYY-MM-DD{sep}HH:MM:SS``, then
  ``fsep`` and exactly ``fdigits`` digits (``-1``: SGLang's optional ``.mmm``; ``0``: none), then
  the literal ``zone`` (``''``, ``'Z'``, ``'+02:00'``); ``use`` 1 for the time the line is read at
  (the one the generic reader takes), 0 for a time only checked (a collector's stamp before the
  engine's header);
* ``("G", kind)``: rank tags: ``'h'`` the tags of SGLang's default header (``[^][\\n]*``; ``'H'``
  the same inside a record's string, without quotes and backslashes), ``'b'`` a ``[DP1 TP0]``
  group of a logging config (``[A-Z0-9_ ]*``), ``'t'`` a bare tag (``[A-Z0-9_]+``);
* ``("R", kind, key)``: a record's rank, process or tags field: ``'i'`` a JSON integer, ``'d'``
  digits (a quoted or a logfmt number), ``'q'`` a string without escapes, ``'w'`` a logfmt bare
  word;
* ``("S", kind)``: a value skipped: ``'b'`` a bracket group's text that says no rank or process
  (``[scheduler.py:212]``, ``[INFO]``; ``'B'`` nor a time, before the line's time), ``'v'`` a
  level word, ``'j'`` a JSON string's
  content, ``'n'`` a JSON number, ``'q'`` a logfmt quoted value's content, ``'w'`` a logfmt bare
  word;
* ``("M", mode)``: the message region: ``'E'`` to the end of the line, ``'J'`` a JSON string's
  content, ``'Q'`` a logfmt quoted value's content; items after it up to ``("B",)`` are an
  engine header inside the region (Fluent Bit's ``log`` holding the whole engine line), the items
  after ``("B",)`` follow the region.

The rank tags of a line are the text from the first ``G``/``R`` item to the last (the scanner
groups lines by it); the level is not read (nothing downstream uses it). A line the template
matches but whose message is not one the generic reader would take as it stands (a message that
is not a known message start, a record in the message, a blank after the header, ``\\r`` or an
escape code) is left to the generic reader. A template is kept only when it reads the line it was
made from exactly as the generic reader did (:func:`derive`); tests/parsers/test_templates.py
compares the two on every line of every fixture in every format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from .. import sglang
from ..clock import minute_epoch, rfc3339_epoch
from ..events import SGLANG, Line
from . import preamble, structured
from .prefix import COLLECTOR_RE, Header, sglang_tags

Item = tuple
Items = tuple[Item, ...]

MAX_ITEMS = 48  # the C scanner's limit per template
MAX_LOGFMT = 65536  # structured.logfmt_record reads no longer line
_DIGITS = "[0-9]"
# what each hole admits (the C scanner, exporter/_scan.c, checks the same characters)
# a JSON string's content, a logfmt quoted value's (the loops unrolled: a run of plain characters
# at a time, which the regex engine reads ten times faster than an alternation per character)
JSTR = r'[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*'
QSTR = r'[^"\\\n]*(?:\\[^\n][^"\\\n]*)*'
WORD = r"[A-Za-z0-9_.:/@+\-]*"  # a logfmt bare value this module accepts (a narrower class than logfmt's)
_BRACKET = r"(?!unified-memory-pool)(?:(?!P[0-9]|pid=)[^\[\]\n]){0,160}"
_BRACKET_BAD = {"b": re.compile(r"P[0-9]|pid="), "B": re.compile(r"P[0-9]|pid=|[0-9]{2}:[0-9]{2}")}
_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL", "TRACE", "NOTICE")
_HOLES = {
    ("G", "h"): r"[^\]\[\n]*",
    ("G", "H"): r'[^\]\[\n"\\\x00-\x1f]*',
    ("G", "b"): r"[A-Z0-9_ ]*",
    ("G", "t"): r"[A-Z0-9_]+",
    ("R", "i"): r"(?:0|[1-9][0-9]*)",
    ("R", "d"): r"[0-9]+",
    ("R", "q"): r'[^"\\\x00-\x1f]*',
    ("R", "w"): WORD,
    ("S", "b"): _BRACKET,
    ("S", "B"): r"(?!unified-memory-pool)(?:(?!P[0-9]|pid=|[0-9]{2}:[0-9]{2})[^\[\]\n]){0,160}",
    ("S", "v"): "(?:" + "|".join(_LEVELS) + ")",
    ("S", "j"): JSTR,
    ("S", "n"): r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?",
    ("S", "q"): QSTR,
    ("S", "w"): WORD,
}
_REGION = {"E": ".*", "J": JSTR, "Q": QSTR}
_ESC_RE = re.compile(r"\\(.)")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


def time_pattern(t: Item, groups: bool, names: tuple[str, str, str, str] | None = None) -> str:
    """The regex of a ``T`` item; with ``groups`` its date, ``HH:MM``, seconds and fraction are
    groups 1-4 of the pattern (named ``names`` when given; the fraction's may be empty)."""
    _, sep, fsep, fd, zone, _ = t
    if not groups:
        g = ["(?:"] * 4
    elif names:
        g = [f"(?P<{n}>" for n in names]
    else:
        g = ["("] * 4
    out = rf"{g[0]}{_DIGITS}{{4}}-{_DIGITS}{{2}}-{_DIGITS}{{2}}){re.escape(sep)}{g[1]}{_DIGITS}{{2}}:{_DIGITS}{{2}}):{g[2]}{_DIGITS}{{2}})"
    if fd == -1:
        out += rf"(?:\.{g[3]}{_DIGITS}{{3}}))?"
    elif fd:
        out += re.escape(fsep) + rf"{g[3]}{_DIGITS}{{{fd}}})"
    elif groups:
        out += g[3] + ")"
    return out + re.escape(zone)


def hole_pattern(item: Item) -> str:
    """The regex of a ``G``, ``R`` or ``S`` item: an atomic group. No hole gives back what it
    read (the C scanner's holes are greedy; what follows a hole never starts with a character it
    takes), so a line that does not fit fails at once instead of after every shorter reading."""
    return "(?>" + _HOLES[item[0], item[1]] + ")"


def time_item(text: str, use: int) -> Item | None:
    """The ``T`` item of a written time (the whole of ``text``), or None when it is not one this
    module reads (no seconds, no date, another zone spelling)."""
    m = re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ])[0-9]{2}:[0-9]{2}:[0-9]{2}(?:([.,])([0-9]{1,9}))?(Z|[+-][0-9]{2}:?[0-9]{2})?", text)
    if m is None:
        return None
    sep, fsep, frac, zone = m.groups()
    return ("T", sep, fsep or "", len(frac) if frac else 0, zone or "", use)


class Template:
    """One learned envelope: its items, their regex, and how a match becomes a :class:`Header`.

    ``kind``: the envelope it reads (``'config'``, ``'json'``, ``'logfmt'``, ``'collector'``);
    ``via``: what the generic reader says it read (``Header.via``); ``record``: ``'json'`` or
    ``'logfmt'`` when the line is a record; ``zoned``: the line's time carries its zone (its 10-s
    bucket is then the configured zone's, not the text's); ``zone``: that zone's text."""

    __slots__ = (
        "kind",
        "items",
        "via",
        "engine",
        "record",
        "zone",
        "zoned",
        "rx",
        "_ranks",
        "_times",
        "_rank_groups",
        "_time_group",
        "_msg_group",
        "_mode",
        "_brackets",
        "_pre",
        "_post",
        "_groups",
        "_batch",
        "_bracket_texts",
        "_minutes",
    )

    def __init__(self, kind: str, items: Items, via: str, engine: str | None, record: str | None = None) -> None:
        self.kind = kind
        self.items = items
        self.via = via
        self.engine = engine
        self.record = record
        self.zone = next(t for t in items if t[0] == "T" and t[5])[4]
        self.zoned = bool(self.zone)
        self._ranks: dict[tuple, tuple[str, int | None, int | None, str | None]] = {}
        self._times: dict[str, float] = {}
        self._minutes: dict[tuple[str, str], float] = {}  # a zoned time's (date, HH:MM) -> its minute's Unix time
        self._mode = "E"
        # the regex in two parts, the message between them; each captured group is named by its
        # part and its number in it, so that the batch readers (batch_reader) number them too
        pre: list[str] = []
        post: list[str] = []
        groups: dict[str, list] = {"pre": [], "post": []}  # (role, item) per group, in order
        side = "pre"
        for it in items:
            op = it[0]
            parts = pre if side == "pre" else post
            if op == "L":
                parts.append(re.escape(it[1]))
            elif op == "T":
                if it[5]:
                    parts.append("(" + time_pattern(it, True) + ")")
                    groups[side] += [("time", it), ("", it), ("", it), ("", it), ("", it)]
                else:
                    parts.append(time_pattern(it, False))
            elif op in ("G", "R"):
                parts.append("(" + hole_pattern(it) + ")")
                groups[side].append(("rank", it))
            elif op == "S" and it[1] in "bB":
                # the bracket text captured and checked after the match (_BRACKET_BAD): the same as
                # the scanner's per-character test, which costs the regex engine ten times more
                parts.append(r"(?!unified-memory-pool)((?>[^\[\]\n]{0,160}))")
                groups[side].append(("bracket", it))
            elif op == "S":
                parts.append(hole_pattern(it))
            elif op == "M":
                self._mode = it[1]  # the region opens: what follows up to B is inside it
            elif op == "B":
                side = "post"
        self._pre, self._post, self._groups = "".join(pre), "".join(post), groups
        self._batch: dict[tuple, tuple] = {}
        self._bracket_texts: dict[tuple[str, re.Pattern[str]], bool] = {}
        self.rx = re.compile(self._pre + "((?>" + _REGION[self._mode] + "))" + self._post)
        self._msg_group = len(groups["pre"]) + 1
        self._time_group, self._rank_groups, self._brackets = self._numbered(1)

    def _numbered(self, between: int) -> tuple[int, list[tuple[int, Item]], list[tuple[int, re.Pattern[str]]]]:
        """The group numbers of the line's time, its rank items and its bracket texts, in a regex
        of the two parts with ``between`` groups between them."""
        time_group, ranks, brackets = 0, [], []
        base = {"pre": 0, "post": len(self._groups["pre"]) + between}
        for side in ("pre", "post"):
            for k, (role, it) in enumerate(self._groups[side], 1):
                g = base[side] + k
                if role == "time":
                    time_group = g
                elif role == "rank":
                    ranks.append((g, it))
                elif role == "bracket":
                    brackets.append((g, _BRACKET_BAD[it[1]]))
        return time_group, ranks, brackets

    def batch_reader(self, d: Any, p: Any) -> Callable[[str], Line | None]:
        """The reader of a whole batch line of the current decode or prefill shape
        (``parsers.shapes.Shape``) in this envelope, made once per pair of shapes: one ``fullmatch``
        of the envelope's regex with the two messages in it, and the Line the generic path gives
        (its header by :meth:`peel`, its message by the shape); None for any other line, or one
        with a value that does not convert (the generic path decides those)."""
        key = (d, p)
        read = self._batch.get(key)
        if read is not None:
            return read
        dre, dn, dbuild = d.in_record(self._mode)
        pre_, pn, pbuild = p.in_record(self._mode)
        npre = len(self._groups["pre"])
        fullmatch = re.compile(self._pre + "(?:()" + dre + "|()" + pre_ + ")" + self._post).fullmatch
        dm, pm = npre + 1, npre + 2 + dn  # the markers: an empty group at each message's start
        tg, rank_groups, brackets = self._numbered(2 + dn + pn)
        ranks, ranks_of, time_of, brackets_ok = self._ranks, self._ranks_of, self._time, self._brackets_ok
        text = self.record is None and self.engine is None  # a logging config's header: MAX_PREAMBLE
        rank_at = tuple(i for i, _ in rank_groups)

        def read(line: str) -> Line | None:
            m = fullmatch(line)
            if m is None or (brackets and not brackets_ok(m, brackets)):
                return None
            g = m.groups()
            is_d = g[dm - 1] is not None
            if text and m.start(dm if is_d else pm) > preamble.MAX_PREAMBLE:
                return None
            try:
                ts = time_of(m, tg)
            except (ValueError, OverflowError):
                return None
            r = ranks.get(k := m.group(*rank_at) if len(rank_at) > 1 else (m.group(rank_at[0]),) if rank_at else ())
            if r is None:
                r = ranks_of(k)
            if is_d:
                return dbuild(g[dm : dm + dn], ts, r[0], r[1], r[2])
            return pbuild(g[pm : pm + pn], ts, r[0], r[1], r[2])

        if len(self._batch) > 16:
            self._batch.clear()
        self._batch[key] = read
        return read

    @property
    def scannable(self) -> bool:
        """Whether the C scanner reads lines by it (its literals are ASCII: it reads lines as Latin-1)."""
        return len(self.items) <= MAX_ITEMS and all(
            (it[0] != "L" or it[1].isascii()) and (it[0] != "T" or it[4].isascii()) for it in self.items
        )

    def scanner(self) -> tuple[str, Items]:
        """The template as the bulk scanner reads it: ``(checks, items)``; the checks are ``'l'`` (a
        logfmt line: at most ``MAX_LOGFMT`` characters) and ``'p'`` (a logging config's header: the
        message starts within ``preamble.MAX_PREAMBLE`` characters)."""
        return ("l" if self.record == "logfmt" else "p" if self.record is None and self.engine is None else ""), self.items

    # ------------------------------------------------------------------------------------
    def peel(self, line: str) -> Header | None:
        """The header of ``line`` as the generic reader gives it, or None when the template does not
        read it (then the generic reader does)."""
        if "\r" in line or "\x1b" in line or (self.record == "logfmt" and len(line) > MAX_LOGFMT):
            return None
        m = self.rx.fullmatch(line)
        if m is None:
            return None
        if self._brackets and not self._brackets_ok(m, self._brackets):
            return None
        msg = m.group(self._msg_group)
        if self._mode != "E" and "\\" in msg:
            msg = _unescape(msg, self._mode)
            if msg is None:
                return None
        if self.record is not None:
            msg = msg.rstrip("\n")
        if not self._message_ok(msg, m):
            return None
        try:
            ts = self._time(m)
        except (ValueError, OverflowError):
            return None  # a date the clock cannot read (month 38): the generic reader says no time
        key = tuple(m.group(i) for i, _ in self._rank_groups)
        r = self._ranks.get(key)
        if r is None:
            r = self._ranks_of(key)
            if len(self._ranks) < 4096:
                self._ranks[key] = r
        h = Header(self.engine, msg, ts, r[0], r[1], r[2], None, r[3], None, self.via)
        if not self.zoned:  # the 10-s bucket as the text gives it, as the bulk scanner makes it
            g = self._time_group
            h.bucket = f"{m.group(g + 1)} {m.group(g + 2)}{m.group(g + 3)[0]}"
        return h

    def _brackets_ok(self, m: re.Match, brackets: list[tuple[int, re.Pattern[str]]]) -> bool:
        """Whether the bracket texts the match holds name no rank, process (or time): each text
        looked at once (a server prints a handful: its files and lines, its levels)."""
        seen = self._bracket_texts
        for i, bad in brackets:
            text = m.group(i)
            ok = seen.get((text, bad))
            if ok is None:
                ok = bad.search(text) is None
                if len(seen) > 4096:
                    seen.clear()
                seen[text, bad] = ok
            if not ok:
                return False
        return True

    def _message_ok(self, msg: str, m: re.Match) -> bool:
        """Whether the generic reader takes ``msg`` as the message, as it stands."""
        if not msg or "\r" in msg or "\x1b" in msg:
            return False
        c = msg[0]
        if self.engine == SGLANG:  # the message after SGLang's default header
            if c == " " or c == "\t":
                return False  # split_header strips blanks after a header
            return not (c == "[" and not self._default_tags(m))  # an untagged header before another: a stamp
        if self.record is not None:
            if c == "{" or ("=" in msg[:64] and (c.isalpha() or c == "_" or c == "@")):
                return False  # a record in the record: read twice by the generic reader
            if c != "[" and COLLECTOR_RE.match(msg) is not None:
                return False  # a collector's prefix in the record's message
        elif m.start(self._msg_group) > preamble.MAX_PREAMBLE:
            return False
        return sglang.starts_message(msg)

    def _default_tags(self, m: re.Match) -> str:
        for i, it in reversed(self._rank_groups):
            if it[0] == "G" and it[1] in "hH":
                return m.group(i)
        return ""

    def _time(self, m: re.Match, g: int = 0) -> float:
        g = g or self._time_group
        text = m.group(g)
        ts = self._times.get(text)
        if ts is None:  # once per run of equal times
            date, hm, sec, frac = m.group(g + 1, g + 2, g + 3, g + 4)
            zone = self.zone
            if zone:
                # rfc3339_epoch's sum, with its minute converted once per minute of log
                minute = self._minutes.get((date, hm))
                if minute is None:
                    if len(self._minutes) > 64:  # the times come in order: a few minutes are enough
                        self._minutes.clear()
                    z = zone if zone == "Z" or ":" in zone else zone[:3] + ":" + zone[3:]
                    minute = self._minutes[date, hm] = rfc3339_epoch(f"{date}T{hm}:00{z}")
                ts = minute + int(sec) + (float("0." + frac) if frac else 0.0)
            else:
                ts = minute_epoch(f"{date} {hm}") + int(sec) + (float("0." + frac) if frac else 0.0)
            if len(self._times) > 256:
                self._times.clear()
            self._times[text] = ts
        return ts

    def _ranks_of(self, key: tuple) -> tuple[str, int | None, int | None, str | None]:
        """(dp, tp, pp, process) of a line whose rank items read ``key``, by the generic reader's
        own rules (``split_header``, ``preamble``'s tags, :func:`parsers.header.structured.fill`)."""
        default = next((v for v, (_, it) in zip(key, self._rank_groups, strict=True) if it[0] == "G" and it[1] in "hH"), None)
        dtags = (sglang_tags(default) if default else ("0", None, None)) if default is not None else None
        if self.record is None:
            if dtags is not None:  # SGLang's default header
                return (*dtags, None)
            tags = ""
            for v, (_, it) in zip(key, self._rank_groups, strict=True):
                found = preamble.tags_in(v) if it[1] == "b" else v
                if found:
                    tags += " " + found
            return (*(sglang_tags(tags) if tags else ("0", None, None)), None)
        node: dict[str, object] = {}
        for v, (_, it) in zip(key, self._rank_groups, strict=True):
            if it[0] == "R":
                node.setdefault(it[2], int(v) if it[1] == "i" else v)
        node[self.via.split("[", 1)[1].split("]", 1)[0]] = "x"
        rec = structured.from_fields(node, self.record, 2026)
        h = Header(None, "", 0.0) if dtags is None else Header(SGLANG, "", 0.0, *dtags, via=SGLANG)
        if rec is not None:
            structured.fill(h, rec)
        return h.dp_rank, h.tp_rank, h.pp_rank, h.process


def _unescape(raw: str, mode: str) -> str | None:
    if mode == "J":
        try:
            return json.loads('"' + raw + '"')
        except ValueError:
            return None
    return _ESC_RE.sub(lambda e: _ESCAPES.get(e.group(1), e.group(1)), raw)


def same(a: Header, b: Header) -> bool:
    """Whether two headers say the same (the level aside: the fast path does not read it)."""
    return (a.engine, a.msg, a.ts, a.dp_rank, a.tp_rank, a.pp_rank, a.process, a.tod, a.via) == (
        b.engine,
        b.msg,
        b.ts,
        b.dp_rank,
        b.tp_rank,
        b.pp_rank,
        b.process,
        b.tod,
        b.via,
    )


__all__ = [
    "JSTR",
    "MAX_ITEMS",
    "MAX_LOGFMT",
    "QSTR",
    "WORD",
    "Item",
    "Items",
    "Template",
    "hole_pattern",
    "same",
    "time_item",
    "time_pattern",
]
