"""The plain pipeline: one line -> one parsed event -> the source's state -> the observers.

Nothing here knows an engine's line shapes or samples anything: every line is parsed by
:func:`parsers.parse_line` and every event is applied to the state (:meth:`SourceState.apply`)
and handed to the observers (the rules, the history) in log order. The observer list is given by
whoever builds the flow (``exporter/app.py``). The sampler (:mod:`exporter.sampler`) sits in
front of it for the hot path; before an event is applied the flow calls its ``barrier`` so that
lines the sampler still holds go first and the observers see one log order.

One thing happens here that is about lines rather than events: a message a terminal wrapped (or
a writer cut) onto header-less continuation lines is joined back where that is unambiguous
(:class:`Wrapped`; docs/formats/README.md#lines-as-users-paste-them).

Thread-safety: tailer threads feed while the HTTP thread reads, both under ``Flow.lock``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from parsers import events as ev
from parsers import has_header, parse_line
from parsers.clock import day_start

from .state import DEFAULT_MAX_DP_RANKS, RUNTIME_EVENTS, ServerState, SourceState

# observers called after each applied event: (source_state, server_state, parsed line, raw line)
Observer = Callable[[SourceState, ServerState, ev.Line, str], None]

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


_LEVELS = ("INFO ", "WARNING ", "DEBUG ", "ERROR ", "CRITICAL ")


def _starts_with_header(line: str) -> bool:
    """The common headers, told by a few string tests (a wrap's continuation has none): SGLang's
    ``[2026-...``, vLLM's ``(Name pid=N) `` or ``LEVEL ``. False means: ask the parsers."""
    c = line[:1]
    if c == "[":
        return "0" <= line[1:2] <= "9"
    if c == "(":
        return " pid=" in line[:64]
    return line.startswith(_LEVELS)


class Flow:
    """Every source's state, and the plain path of a line into it."""

    def __init__(
        self,
        engine: str | None = None,
        observers: Iterable[Observer] = (),
        max_dp_ranks: int = DEFAULT_MAX_DP_RANKS,
    ) -> None:
        self.engine = engine  # forced engine for every source, or None = auto-detect per source
        self.max_dp_ranks = max_dp_ranks  # per source (--max-dp-ranks, SourceState.admits)
        self.sources: dict[str, SourceState] = {}
        self.lock = threading.RLock()
        self.observers: list[Observer] = list(observers)
        # called with the source before one of its events is applied (the sampler's pending lines)
        self.barrier: Callable[[SourceState], None] | None = None
        self._wrapped: dict[str, Wrapped] = {}  # source -> its held line

    def source(self, name: str) -> SourceState:
        """The state of source ``name``, created on first use (so it is listed before any line)."""
        with self.lock:
            s = self.sources.get(name)
            if s is None:
                s = self.sources[name] = SourceState(name, engine=self.engine, max_dp_ranks=self.max_dp_ranks)
            return s

    # ------------------------------------------------------------------------------------
    def feed(self, source: str, line: str) -> str:
        """Parse and apply one line; return its outcome (parsed / ignored / unrecognized)."""
        src = self.sources.get(source) or self.source(source)
        if self._wrapped and source in self._wrapped:
            out = self.continuation(src, line)
            if out is not None:
                return out
        return self.take(src, line, self.parse(src, line))

    def parse(self, src: SourceState, line: str) -> ev.Line:
        """``line`` parsed for ``src``: its engine and year, a time of day dated (:meth:`on_date`)."""
        parsed = parse_line(line, src.engine, src.year)
        if parsed.tod is not None:
            parsed.ts = self.on_date(src, parsed.tod)
        return parsed

    def take(self, src: SourceState, line: str, parsed: ev.Line) -> str:
        """Count and apply a parsed line (or hold it: it may continue on the next lines)."""
        source = src.name
        with self.lock:
            if parsed.event is None:
                if len(line) >= WRAP_MIN_WIDTH and (parsed.outcome == ev.UNRECOGNIZED or parsed.engine is not None or src.engine is None):
                    # a known message cut short, a line with a header that says nothing (a message
                    # cut before its marker) or, before the engine is known, any line: it may
                    # continue on the next lines
                    self._wrapped[source] = Wrapped([line.rstrip("\r\n")], parsed.outcome, parsed.ts, parsed.engine, time.monotonic())
                    return parsed.outcome
                self.count(src, parsed.outcome, parsed.engine, parsed.ts)
                return parsed.outcome
            src.lines[parsed.outcome] += 1
            self.apply(src, parsed, line)
            if not isinstance(parsed.event, _NOT_JOINED):
                # a startup message that parsed on its own may still go on (cut after a number):
                # applied now (a scrape sees it), and again, joined, if the next lines say more
                self._wrapped[source] = Wrapped([line.rstrip("\r\n")], ev.PARSED, parsed.ts, parsed.engine, time.monotonic(), parsed)
        return parsed.outcome

    def feed_lines(self, source: str, lines: Iterable[str]) -> None:
        """Feed many lines in order."""
        feed = self.feed
        for line in lines:
            feed(source, line)

    def apply(self, src: SourceState, parsed: ev.Line, raw: str, counted: bool = False) -> None:
        """Apply one event (after the barrier) and hand it to the observers. ``counted``: the
        sampler already counted this batch line; only its gauges are applied."""
        if not counted and self.barrier is not None:
            self.barrier(src)  # keep log order: what the sampler holds is older
        srv = src.apply(parsed, counted)
        if srv is not None and self.observers:
            for obs in self.observers:
                obs(src, srv, parsed, raw)

    @staticmethod
    def on_date(src: SourceState, tod: float) -> float | None:
        """The time of a header that kept its time of day but lost its date, on the date the
        source's log was at (the next day when it is more than 12 hours earlier: midnight
        passed); None while no line of the source gave a date."""
        last = src.last_ts
        if last is None:
            return None
        ts = day_start(last) + tod  # midnight in the zone log times are read in (parsers.clock)
        return ts + 86400 if ts < last - 43200 else ts

    @staticmethod
    def count(src: SourceState, outcome: str, engine: str | None, ts: float | None, n: int = 1) -> None:
        """Count lines that carry no event; their time still counts, and a known message that did
        not parse (unrecognized) tells the engine. A header alone does not: another engine's line
        may wear one like it (lmdeploy prints '[2026-03-02 08:01:44 DP0] ...')."""
        src.lines[outcome] += n
        if engine and src.engine is None and outcome != ev.IGNORED:
            src.engine = engine
        if ts is not None and (src.last_ts is None or ts > src.last_ts):
            src.last_ts = ts

    # ------------------------------------------------------------------------------------
    def holds(self, source: str) -> bool:
        """Whether a line of ``source`` waits for its possible continuation (the next line must
        come here, whatever shortcut the sampler knows)."""
        return source in self._wrapped

    def continuation(self, src: SourceState, line: str) -> str | None:
        """``line`` after a held line (:class:`Wrapped`): a header-less line that carries nothing on
        its own may be its continuation. Joined, and its lines counted as parsed, when the joined
        text parses (a first line without event; a piece wider than the first only if the joined
        text parses at once) or parses to the same kind of event saying more (a first line that
        parsed alone: the event applied is the last such join). Returns the outcome, or None when
        ``line`` is not a continuation (the held line was counted and applied as it was, and
        ``line`` takes the usual path)."""
        w = self._wrapped[src.name]
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
                    joined.ts = self.on_date(src, joined.tod)
                if w.parsed is not None:  # the first parsed alone: join while the text says more
                    if joined.event is not None and type(joined.event) is type(w.parsed.event) and joined.event != w.parsed.event:
                        w.lines.append(piece)
                        w.parsed = joined
                        w.fed_at = time.monotonic()
                        with self.lock:
                            src.lines[ev.PARSED] += 1
                            self.apply(src, joined, text)  # what the pieces say together, over what the first said
                        if len(w.lines) >= WRAP_MAX_LINES:
                            self._drop_wrapped(src)
                        return ev.PARSED
                elif joined.event is not None:
                    del self._wrapped[src.name]
                    with self.lock:
                        src.lines[ev.PARSED] += len(w.lines) + 1
                        self.apply(src, joined, text)
                    return ev.PARSED
                elif len(piece) <= len(first):  # a terminal's wrap: no piece is wider than the first
                    w.lines.append(piece)
                    w.fed_at = time.monotonic()
                    if len(piece) >= len(first) - 1 and len(w.lines) < WRAP_MAX_LINES:
                        return ev.IGNORED  # a full-width piece: more may follow
                    self._drop_wrapped(src)
                    return ev.IGNORED
        self._drop_wrapped(src)
        return None

    def _drop_wrapped(self, src: SourceState) -> None:
        """Count a held line (and the pieces that followed it) as what they were on their own."""
        w = self._wrapped.pop(src.name, None)
        if w is not None and w.parsed is None:  # (one that parsed alone was counted and applied already)
            with self.lock:
                self.count(src, w.outcome, w.engine, w.ts)
                if len(w.lines) > 1:
                    src.lines[ev.IGNORED] += len(w.lines) - 1

    def tick(self, now: float | None = None) -> None:
        """The ingest side's periodic call: a held line whose source stayed quiet for
        ``IDLE_SECONDS`` of wall time gets no continuation any more."""
        if not self._wrapped:
            return
        now = time.monotonic() if now is None else now
        with self.lock:
            for name, w in list(self._wrapped.items()):
                src = self.sources.get(name)
                if src is not None and now - w.fed_at >= IDLE_SECONDS:
                    self._drop_wrapped(src)

    def finish(self) -> None:
        """End of input: held lines are counted as they were."""
        with self.lock:
            for src in self.sources.values():
                self._drop_wrapped(src)

    def gauges_of(self, src: SourceState, srv: ServerState) -> dict[str, float]:
        """The runtime gauges of a server, for the collector (a copy; nothing is written)."""
        return dict(srv.gauges)


__all__ = ["Flow", "Observer", "Wrapped"]
