"""``replay --explain``: what each line of a log was read as, and why (docs/formats/README.md#checking-a-format).

For every line: its outcome, the engine, the time read (in the zone of ``--log.timezone``), the
rank tags, what read its header (``Header.via``: the SGLang or vLLM fast path, the generic
``preamble`` reader, a JSON or logfmt record and the key its message was in) and the event with
its numbers, or why it says nothing. The lines are read as ``replay`` reads them (rotated
generations, compressed files, Docker and CRI records: :mod:`exporter.offline`,
:mod:`exporter.reading`) and fed, one by one, into the pipeline it is given, so the engine and
year each line is read with are the source's at that line, and the totals at the end are the
pipeline's own (a message a terminal wrapped counts where it was joined).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import fields, is_dataclass
from typing import TextIO

from parsers import events as ev
from parsers import message_line
from parsers.clock import zone_name
from parsers.header import read_header

from .offline import order_generations
from .reading import Reader, read_blocks

MAX_EVENT_TEXT = 240


def explain_files(pipe, paths: list[str], source: str | None, out: TextIO, err: TextIO) -> int:
    """Explain every line of ``paths`` on ``out`` and feed it to ``pipe``; returns the number of
    files that could not be read (reported on ``err``)."""
    failed = 0
    for name, members in order_generations(list(paths), getattr(pipe, "engine", None), err):
        name = source or name
        src = pipe.source(name)
        reader = Reader()
        read_by: Counter[str] = Counter()
        for path in members:
            label = "stdin" if path == "-" else os.path.basename(path)
            n = 0
            try:
                for text in read_blocks(path, reader):
                    for line in text[:-1].split("\n"):
                        n += 1
                        out.write(f"{label}:{n}  {describe(src, line, read_by)}\n")
                        pipe.feed(name, line)
            except (OSError, EOFError, ValueError) as e:
                print(f"hybrid-cache-exporter: {path}: cannot read: {getattr(e, 'strerror', None) or e}", file=err)
                failed += 1
        pipe.finish()
        lines = src.lines
        out.write(
            f"-- source {name}: {lines.get(ev.PARSED, 0)} parsed, {lines.get(ev.IGNORED, 0)} ignored, "
            f"{lines.get(ev.UNRECOGNIZED, 0)} unrecognized; engine {src.engine or 'not known (no SGLang or vLLM message)'}; "
            f"times read in zone {zone_name()}\n"
        )
        if read_by:
            out.write("-- headers read by: " + ", ".join(f"{k} {v}" for k, v in read_by.most_common()) + "\n")
    return failed


def describe(src, line: str, read_by: Counter | None = None) -> str:
    """One line's verdict as the parsers give it for the source ``src`` as it stands."""
    h = read_header(line, src.engine, src.year)
    parsed = message_line(h, src.engine)
    if parsed.tod is not None:
        parsed.ts = src.on_date(parsed.tod)
    via = h.via or "no header"
    if read_by is not None:
        read_by[via] += 1
    parts = [f"{parsed.outcome:<12}", f"{parsed.engine or '-':<6}", _time(parsed.ts, parsed.tod)]
    ranks = [f"dp={parsed.dp_rank}"] + [f"{k}={v}" for k, v in (("tp", parsed.tp_rank), ("pp", parsed.pp_rank)) if v is not None]
    parts.append(" ".join(ranks))
    parts.append(f"[{via}]")
    parts.append(_what(parsed, h))
    return "  ".join(parts)


def _time(ts: float | None, tod: float | None) -> str:
    if ts is not None:
        t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f"{ts % 1:.3f}"[1:] + "Z"
        return t
    if tod is not None:
        return f"time of day {int(tod // 3600):02d}:{int(tod % 3600 // 60):02d}:{tod % 60:06.3f} (no date yet)"
    return "no time"


def _what(parsed: ev.Line, h) -> str:
    if parsed.outcome == ev.PARSED:
        return _event(parsed.event)
    if parsed.outcome == ev.UNRECOGNIZED:
        return f"a known message that did not parse: {parsed.reason} (format drift, or a damaged line)"
    msg = h.msg.lstrip()
    if msg.startswith("INFO:"):
        return "an HTTP server line (uvicorn): nothing to read"
    if not msg:
        return "no message"
    if parsed.engine is not None:
        return f"a {parsed.engine} header; the message is not one the exporter reads"
    if h.via:
        return "a header, but no message SGLang or vLLM prints after it"
    return "no header, and no message SGLang or vLLM prints"


def _event(e: object) -> str:
    if not is_dataclass(e):
        return type(e).__name__
    items = []
    for f in fields(e):
        v = getattr(e, f.name)
        if v is None or v == {} or (f.name in ("upper_bound", "swa", "draft", "test", "enabled", "fatal") and v is False):
            continue
        if isinstance(v, float):
            v = f"{v:.6g}"
        elif isinstance(v, dict):
            v = (
                "{"
                + ", ".join(f"{k}: {x:.6g}" if isinstance(x, float) else f"{k}: {x}" for k, x in list(v.items())[:8])
                + (", ..." if len(v) > 8 else "")
                + "}"
            )
        items.append(f"{f.name}={v}")
    text = f"{type(e).__name__}(" + ", ".join(items) + ")"
    return text if len(text) <= MAX_EVENT_TEXT else text[: MAX_EVENT_TEXT - 4] + " ...)"


__all__ = ["describe", "explain_files"]
