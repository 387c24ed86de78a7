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
``(kind, tags, bucket)``. :class:`exporter.sampler.Sampler` turns that into the same state the
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
from collections.abc import Iterator
from itertools import islice
from typing import NamedTuple

from parsers.numbers import MAX_COUNT_DIGITS
from parsers.shapes import LINE_HEADER, VALUE_PATTERNS, LineShapes

# (head, keys, i_new, i_cached[, value checks: one VALUE_PATTERNS code per key, '-' if absent])
Template = tuple
Spec = tuple[Template, Template]  # (decode, prefill)


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
    from . import _scan as native  # type: ignore[attr-defined]
except ImportError:
    native = None


def spec(shapes: LineShapes) -> Spec | None:
    """A source's current decode and prefill shapes, or None until its line path learned both."""
    return shapes.scan_spec()


_REGEXES: dict[Spec, re.Pattern[str]] = {}


def _regex(sp: Spec) -> re.Pattern[str]:
    """One whole-line regex for the spec: the line templates' header, then a decode body, a prefill
    body or ``INFO:``. Groups: ymdhm, sec, ms, tags, 'D', 'P', new, cached, 'I'. (The header's
    ``\\d`` is ``[0-9]`` for the Latin-1 lines that reach it, as in the C scanner.)"""
    rx = _REGEXES.get(sp)
    if rx is None:

        def body(t: Template) -> str:
            head, keys, i_new, i_cached = t[:4]
            codes = t[4] if len(t) > 4 else "-" * len(keys)
            vals = []
            for i, k in enumerate(keys):
                if i in (i_new, i_cached):
                    v = f"(?P<new>[0-9]{{1,{MAX_COUNT_DIGITS}}})" if i == i_new else f"(?P<cached>[0-9]{{1,{MAX_COUNT_DIGITS}}})"
                else:
                    v = VALUE_PATTERNS[codes[i]]
                vals.append(re.escape(k) + ": " + v)
            return re.escape(head[1:]) + ", ".join(vals) + "(?:, )?"

        d, p = sp
        pattern = rf"{LINE_HEADER}(?:(D){body(d)}|(P){body(p)}|(I)NFO:[^\n]*)"
        if "(?P<new>" not in pattern:
            pattern += "(?P<new>)?"
        if "(?P<cached>" not in pattern:
            pattern += "(?P<cached>)?"
        rx = re.compile(pattern)
        if len(_REGEXES) > 16:
            _REGEXES.pop(next(iter(_REGEXES)))
        _REGEXES[sp] = rx
    return rx


def _scan_items(items: Iterator[tuple[int, str]], end: int, sp: Spec) -> ScanResult:
    """The reference implementation: one ``fullmatch`` per ``(index, line)``; ``end`` is the stop
    value when every item is taken."""
    fullmatch = _regex(sp).fullmatch
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
        m = fullmatch(line)
        if m is None:
            stop = i
            break
        ymdhm, sec, ms, tags, d, p, new, cached, info = m.group(1, 2, 3, 4, 5, 6, "new", "cached", 9)
        if info:
            n_info += 1
        else:
            kind = d or p
            if p:
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
