"""Messages a terminal wrapped (or a writer cut) onto header-less continuation lines, joined back.

A paste of a log, or a writer that cut a long line, puts the rest of a message on lines without a
header. Where that is unambiguous the pieces are joined back (docs/formats/README.md#lines-as-users-paste-them):
a line that may continue is *held* per source (:class:`Wrapped`) until a line that is not its
continuation arrives. :class:`Wraps` decides and keeps; it applies nothing: a join it makes is
handed to the pipeline (:class:`Join`: the event, its text, the lines it was read from), which
applies it like any line, and the lines it drops are counted by the source's state.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from parsers import events as ev
from parsers import has_header, parse_line
from parsers.header.patterns import VLLM_LEVELS

from .state import RUNTIME_EVENTS, SourceState

IDLE_SECONDS = 10.0  # a source quiet this long (wall time) is done with what it held
# events never joined with a continuation: runtime lines (most of a log), fatal errors, readiness,
# and a KV pool line (a second one is the SWA pool: it must not be applied twice)
_NOT_JOINED = (*RUNTIME_EVENTS, ev.PoolExhausted, ev.ServerReady, ev.KVCacheAllocated)

# a terminal's hard wrap: the first line is as wide as the terminal (pastes of 76-250 columns
# are usual), the continuation lines have no header, none wider than the first
WRAP_MIN_WIDTH, WRAP_MAX_LINES = 40, 12


@dataclass(slots=True)
class Wrapped:
    """A line that may continue on the next, header-less lines (a message wrapped by a terminal or
    cut by a writer): held, not yet counted, until a line that is not its continuation arrives.

    Two kinds: a line that carries no event on its own (a known message cut short, a header that
    says nothing yet) is joined once the joined text parses; a line that parsed on its own (a
    startup message: any event but ``_NOT_JOINED``) was counted and applied at once, and is joined
    while the joined text parses to the same kind of event and says more than the text before it:
    each such join is counted and applied too (``parsed`` is the last)."""

    lines: list[str]
    outcome: str  # the first line's outcome on its own
    ts: float | None
    engine: str | None
    fed_at: float  # time.monotonic() of its last piece
    parsed: ev.Line | None = None  # the event of the pieces so far, when the first parsed on its own


class Join(NamedTuple):
    """Held pieces joined into one event: the pipeline applies ``line`` (read from ``text``) and
    counts ``n`` lines parsed."""

    line: ev.Line
    text: str
    n: int


_LEVELS = tuple(f"{level} " for level in VLLM_LEVELS.split("|"))  # a vLLM header without its process


def _starts_with_header(line: str) -> bool:
    """The common headers, told by a few string tests (a wrap's continuation has none): SGLang's
    ``[2026-...``, vLLM's ``(Name pid=N) `` or ``LEVEL ``. False means: ask the parsers."""
    c = line[:1]
    if c == "[":
        return "0" <= line[1:2] <= "9"
    if c == "(":
        return " pid=" in line[:64]
    return line.startswith(_LEVELS)


class Wraps:
    """The held line of each source, and what the next line makes of it."""

    def __init__(self) -> None:
        self.held: dict[str, Wrapped] = {}  # source -> its held line

    def offer(self, src: SourceState, line: str, parsed: ev.Line) -> bool:
        """Hold ``line`` if it may continue on the next lines; True when held. A line without event
        is then counted when it is known not to continue (:meth:`drop`); one with an event was
        applied, and is joined again if the next lines say more."""
        if parsed.event is None:
            if len(line) >= WRAP_MIN_WIDTH and (parsed.outcome == ev.UNRECOGNIZED or parsed.engine is not None or src.engine is None):
                # a known message cut short, a line with a header that says nothing (a message cut
                # before its marker) or, before the engine is known, any line
                self.held[src.name] = Wrapped([line.rstrip("\r\n")], parsed.outcome, parsed.ts, parsed.engine, time.monotonic())
                return True
            return False
        if not isinstance(parsed.event, _NOT_JOINED):
            # a startup message that parsed on its own may still go on (cut after a number)
            self.held[src.name] = Wrapped([line.rstrip("\r\n")], ev.PARSED, parsed.ts, parsed.engine, time.monotonic(), parsed)
            return True
        return False

    def piece(self, src: SourceState, line: str) -> Join | str | None:
        """``line`` after the held line of ``src``: a header-less line that carries nothing on its own
        may be its continuation. A :class:`Join` when the joined text parses (a first line without
        event; a piece wider than the first only if the joined text parses at once) or parses to
        the same kind of event saying more (a first line that parsed alone); an outcome when the
        line was taken as a piece (counted with the held line); None when ``line`` is not a
        continuation (the held line was counted as it was, and ``line`` takes the usual path)."""
        w = self.held[src.name]
        piece = line.rstrip("\r\n")
        first = w.lines[0]
        # the usual case, in one comparison: the next line starts like the held one (the same
        # header start: '[2026-', '(APISe', 'INFO 0'), so it is a new line, not a continuation
        if piece[:6] != first[:6] and piece and not _starts_with_header(piece) and not has_header(piece, src.engine, src.year):
            alone = parse_line(piece, src.engine, src.year)
            if alone.event is None:
                text = "".join(w.lines) + piece
                joined = parse_line(text, src.engine, src.year)
                if joined.tod is not None:
                    joined.ts = src.on_date(joined.tod)
                if w.parsed is not None:  # the first parsed alone: join while the text says more
                    if joined.event is not None and type(joined.event) is type(w.parsed.event) and joined.event != w.parsed.event:
                        w.lines.append(piece)
                        w.parsed = joined
                        w.fed_at = time.monotonic()
                        if len(w.lines) >= WRAP_MAX_LINES:
                            del self.held[src.name]  # (counted and applied piece by piece)
                        return Join(joined, text, 1)  # what the pieces say together, over what the first said
                elif joined.event is not None:
                    del self.held[src.name]
                    return Join(joined, text, len(w.lines) + 1)
                elif len(piece) <= len(first):  # a terminal's wrap: no piece is wider than the first
                    w.lines.append(piece)
                    w.fed_at = time.monotonic()
                    if len(piece) >= len(first) - 1 and len(w.lines) < WRAP_MAX_LINES:
                        return ev.IGNORED  # a full-width piece: more may follow
                    self.drop(src)
                    return ev.IGNORED
        self.drop(src)
        return None

    def drop(self, src: SourceState) -> None:
        """Count a held line (and the pieces that followed it) as what they were on their own."""
        w = self.held.pop(src.name, None)
        if w is not None and w.parsed is None:  # (one that parsed alone was counted and applied already)
            src.count(w.outcome, 1, w.engine, w.ts)
            if len(w.lines) > 1:
                src.count(ev.IGNORED, len(w.lines) - 1)

    def forget(self, source: str) -> None:
        """Drop the held line of a source whose state is gone (not counted: its counts go with it)."""
        self.held.pop(source, None)

    def quiet(self, sources: Mapping[str, SourceState], now: float) -> None:
        """A held line whose source stayed quiet for ``IDLE_SECONDS`` of wall time gets no continuation any more."""
        for name, w in list(self.held.items()):
            src = sources.get(name)
            if src is not None and now - w.fed_at >= IDLE_SECONDS:
                self.drop(src)

    def finish(self, sources: Mapping[str, SourceState]) -> None:
        """End of input: held lines are counted as they were."""
        for src in sources.values():
            self.drop(src)


__all__ = ["IDLE_SECONDS", "Join", "Wrapped", "Wraps"]
