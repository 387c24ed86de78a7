"""Scanning runs of steady-state SGLang lines in bulk: aggregates instead of one object per line.

A busy SGLang log is almost all ``Decode batch`` / ``Prefill batch`` lines of one learned shape
and uvicorn ``INFO:`` lines. :func:`scan` walks a list of lines from ``start`` while every line
is one of those (the source's current shapes, :class:`parsers.shapes.LineShapes`, which the
line path accepts too) and returns, for the run it consumed, a :class:`ScanResult`
``(stop, info, top, counts, new_sums, cached_sums, first, last)`` (the C scanner returns the
plain tuple; :func:`result` names it).

``stop`` is the index of the first line it did not consume (``len(lines)`` if none); ``top`` the
newest ``(ymdhm, sec, ms)`` header; ``counts`` ``{(kind, tags): n}``; the sums the prefill new
and cached tokens per ``tags``; ``first``/``last`` the index of the first/last line of each
``(kind, tags, bucket)``. :class:`exporter.state.sampler.Sampler` turns that into the same state the
line-by-line path reaches, and hands the line at ``stop`` to the line path. :func:`scan_text` does
the same over the lines of one string (``replay`` reads blocks of lines without splitting them);
its indices are the offsets where lines start.

Two implementations with one contract: the C extension ``exporter._scan`` (built by ``pip
install`` when a compiler is there, ~20x faster) and :func:`scan_py`, a per-line loop used when
the extension is missing and as the oracle in the tests. ``HCE_PURE_PYTHON=1`` forces the pure
one. Both take only the values the line templates admit (``parsers.shapes.VALUE_PATTERNS``: a
ratio in 0..1, a count or rate that is not negative), and stop at a line that is not a one-byte
(Latin-1) string and before a prefill value of more than 9 digits (``parsers.numbers.MAX_COUNT``: the line path makes such a line ``unrecognized``,
or counts it when leading zeros made it long) or one that takes the call's sum past 2**63 - 1,
which the line path handles instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from itertools import islice
from typing import NamedTuple

from parsers.header import preamble
from parsers.header.templates import JSTR, MAX_LOGFMT, QSTR, hole_pattern, time_pattern
from parsers.numbers import MAX_COUNT_DIGITS
from parsers.shapes import LINE_HEADER, VALUE_PATTERNS, LineShapes

# (head, keys, i_new, i_cached[, value checks: one VALUE_PATTERNS code per key, '-' if absent])
Template = tuple
# (decode, prefill[, envelopes]): envelopes, when given, are the header templates of the source's
# stage (parsers.header.templates: (checks, items) each), and only lines in one of them are read
Spec = tuple


class ScanResult(NamedTuple):
    """What one call scanned: the run from its start to ``stop``."""

    stop: int  # the index (offset) of the first line not consumed
    info: int  # uvicorn lines in the run
    top: tuple[str, str, str | None] | None  # the newest header's (ymdhm, sec, ms)
    counts: dict  # (kind 'D'/'P', tags) -> batch lines
    new_sums: dict  # tags -> prefill new tokens
    cached_sums: dict  # tags -> prefill cached tokens
    first: dict  # (kind, tags, bucket) -> index of its first line
    last: dict  # (kind, tags, bucket) -> index of its last line


result = ScanResult._make  # the C scanner's plain tuple, named

_INT64_MAX = (1 << 63) - 1

try:
    if os.environ.get("HCE_PURE_PYTHON"):
        raise ImportError("HCE_PURE_PYTHON is set")
    from .. import _scan as native  # type: ignore[attr-defined]
except ImportError:
    native = None


def spec(shapes: LineShapes) -> Spec | None:
    """A source's current decode and prefill shapes, or None until its line path learned both."""
    return shapes.scan_spec()


_REGEXES: dict[Spec, re.Pattern[str]] = {}


def _body(t: Template, mode: str = "E") -> str:
    """A batch message of template ``t`` (its head without the first letter, which the caller's
    group holds); ``mode`` ``'J'`` / ``'Q'``: inside a JSON / logfmt string (no quote or backslash
    in a value, nor a control character in JSON's), and one escaped newline may follow it (the
    record's message loses it)."""
    head, keys, i_new, i_cached = t[:4]
    codes = t[4] if len(t) > 4 else "-" * len(keys)
    vals = []
    for i, k in enumerate(keys):
        if i in (i_new, i_cached):
            v = f"(?P<new>[0-9]{{1,{MAX_COUNT_DIGITS}}})" if i == i_new else f"(?P<cached>[0-9]{{1,{MAX_COUNT_DIGITS}}})"
        else:
            v = VALUE_PATTERNS[codes[i]]
            if mode != "E" and codes[i] == "-":
                v = r'[^,\n"\\\x00-\x1f]*' if mode == "J" else r'[^,\n"\\]*'
        vals.append(re.escape(k) + ": " + v)
    return re.escape(head[1:]) + ", ".join(vals) + ("(?:, )?" if mode == "E" else r"(?:, )?(?:\\n)?")


def _regex(sp: Spec) -> re.Pattern[str]:
    """One whole-line regex for the spec: the line templates' header, then a decode body, a prefill
    body or ``INFO:``. Groups: ymdhm, sec, ms, tags, 'D', 'P', new, cached, 'I'. (The header's
    ``\\d`` is ``[0-9]`` for the Latin-1 lines that reach it, as in the C scanner.)"""
    rx = _REGEXES.get(sp)
    if rx is None:
        d, p = sp
        pattern = rf"{LINE_HEADER}(?:(D){_body(d)}|(P){_body(p)}|(I)NFO:[^\n]*)"
        if "(?P<new>" not in pattern:
            pattern += "(?P<new>)?"
        if "(?P<cached>" not in pattern:
            pattern += "(?P<cached>)?"
        rx = re.compile(pattern)
        if len(_REGEXES) > 16:
            _REGEXES.pop(next(iter(_REGEXES)))
        _REGEXES[sp] = rx
    return rx


_REST = {"E": r"[^\n]*", "J": JSTR, "Q": QSTR}  # an INFO: message to its end


def _env_regex(d: Template, p: Template, items: tuple) -> re.Pattern[str]:
    """The whole-line regex of a header template around a batch or uvicorn message. Groups: td,
    thm, tsec, tf (the line's time), tags (from its first rank item to its last), D, P, new,
    cached, I."""
    ranks = [i for i, it in enumerate(items) if it[0] in "GR"]
    lo, hi = (ranks[0], ranks[-1]) if ranks else (-1, -1)
    parts = [] if ranks else ["(?P<tags>)"]
    mode = "E"
    for i, it in enumerate(items):
        if i == lo:
            parts.append("(?P<tags>")
        op = it[0]
        if op == "L":
            parts.append(re.escape(it[1]))
        elif op == "T":
            parts.append(time_pattern(it, bool(it[5]), ("td", "thm", "tsec", "tf") if it[5] else None))
        elif op in "GRS":
            parts.append(hole_pattern(it))
        elif op == "M":
            mode = it[1]
        elif op == "B":
            parts.append(f"(?:(?P<D>D){_body(d, mode)}|(?P<P>P){_body(p, mode)}|(?P<I>I)NFO:{_REST[mode]})")
        if i == hi:
            parts.append(")")
    pattern = "".join(parts)
    if "(?P<new>" not in pattern:
        pattern += "(?P<new>)?"
    if "(?P<cached>" not in pattern:
        pattern += "(?P<cached>)?"
    return re.compile(pattern)


def _env_regexes(sp: Spec) -> list[tuple[re.Pattern[str], str]]:
    rx = _REGEXES.get(sp)
    if rx is None:
        d, p, envs = sp
        rx = [(_env_regex(d, p, items), checks) for checks, items in envs]
        if len(_REGEXES) > 16:
            _REGEXES.pop(next(iter(_REGEXES)))
        _REGEXES[sp] = rx  # type: ignore[assignment]
    return rx  # type: ignore[return-value]


def _match_env(rxs: list[tuple[re.Pattern[str], str]], line: str) -> tuple[int, re.Match] | None:
    """The first template in order that reads ``line`` (its index and match), as the C scanner
    tries them."""
    if "\r" in line or "\x1b" in line:
        return None
    for k in range(len(rxs)):
        rx, checks = rxs[k]
        m = rx.fullmatch(line)
        if m is None:
            continue
        if checks == "l" and len(line) > MAX_LOGFMT:
            continue
        if checks == "p" and m.start("D" if m.group("D") else "P" if m.group("P") else "I") > preamble.MAX_PREAMBLE:
            continue
        return k, m
    return None


# what a line the scanner takes says: (ymdhm, sec, fraction, tags, 'D'/'P'/None, new, cached, is INFO)
Read = tuple[str, str, "str | None", str, "str | None", "str | None", "str | None", bool]


def _default_reader(sp: Spec) -> Callable[[str], Read | None]:
    """A line in SGLang's default header, read by one ``fullmatch`` of the spec's regex."""
    fullmatch = _regex(sp).fullmatch

    def read(line: str) -> Read | None:
        m = fullmatch(line)
        if m is None:
            return None
        ymdhm, sec, ms, tags, d, p, new, cached, info = m.group(1, 2, 3, 4, 5, 6, "new", "cached", 9)
        return ymdhm, sec, ms, tags, d or p, new, cached, bool(info)

    return read


def _envelope_reader(sp: Spec) -> Callable[[str], Read | None]:
    """A line in one of the spec's header templates: its time item's time, its tags the template's
    index and the text of its rank items."""
    rxs = _env_regexes(sp)

    def read(line: str) -> Read | None:
        hit = _match_env(rxs, line)
        if hit is None:
            return None
        k, m = hit
        td, thm, tsec, tf, tags, d, p, new, cached, info = m.group("td", "thm", "tsec", "tf", "tags", "D", "P", "new", "cached", "I")
        return f"{td} {thm}", tsec, tf, chr(48 + k) + tags, d or p, new, cached, bool(info)

    return read


def _scan_items(items: Iterator[tuple[int, str]], end: int, sp: Spec) -> ScanResult:
    """The reference implementation: one ``fullmatch`` per ``(index, line)``; ``end`` is the stop
    value when every item is taken."""
    read = _envelope_reader(sp) if len(sp) == 3 else _default_reader(sp)
    counts: dict[tuple[str, str], int] = {}
    new_sums: dict[str, int] = {}
    cached_sums: dict[str, int] = {}
    first: dict[tuple[str, str, str], int] = {}
    last: dict[tuple[str, str, str], int] = {}
    has_new, has_cached = sp[1][2] is not None, sp[1][3] is not None
    n_info = total_new = total_cached = 0
    top = None
    stop = end
    for i, line in items:
        if not line.isascii() and max(line) > "\xff":
            stop = i
            break
        r = read(line)
        if r is None:
            stop = i
            break
        ymdhm, sec, ms, tags, kind, new, cached, info = r
        if info:
            n_info += 1
        else:
            if kind == "P":
                a, b = int(new or 0), int(cached or 0)
                if total_new + a > _INT64_MAX or total_cached + b > _INT64_MAX:
                    stop = i  # as the C scanner, whose sums are 64-bit
                    break
                total_new += a
                total_cached += b
                if has_new:
                    new_sums[tags] = new_sums.get(tags, 0) + a
                if has_cached:
                    cached_sums[tags] = cached_sums.get(tags, 0) + b
            ck = (kind, tags)
            counts[ck] = counts.get(ck, 0) + 1
            key = (kind, tags, ymdhm + sec[0])
            if key not in first:
                first[key] = i
            last[key] = i
        t = (ymdhm, sec, ms or "")
        if top is None or t > top:
            top = t
    return ScanResult(stop, n_info, top, counts, new_sums, cached_sums, first, last)


def scan_py(lines: list[str], start: int, sp: Spec) -> ScanResult:
    """:func:`scan` in pure Python."""
    start = max(start, 0)
    return _scan_items(enumerate(islice(lines, start, None), start), len(lines), sp)


def _text_lines(text: str, pos: int) -> Iterator[tuple[int, str]]:
    while pos < len(text):
        line = line_at(text, pos)
        yield pos, line
        pos += len(line) + 1


def scan_text_py(text: str, pos: int, sp: Spec) -> ScanResult:
    """:func:`scan_text` in pure Python."""
    return _scan_items(_text_lines(text, max(pos, 0)), len(text), sp)


def line_at(text: str, pos: int) -> str:
    """The line of ``text`` that starts at offset ``pos``."""
    e = text.find("\n", pos)
    return text[pos:] if e < 0 else text[pos:e]


scan = native.scan if native is not None else scan_py
scan_text = native.scan_text if native is not None else scan_text_py
