"""The one-way flow: lines -> parsers -> per-source state -> rules.

``Pipeline.feed`` is the single entry point that ``replay``, ``serve`` and ``report`` use, so all
three reach the same state from the same lines. It is thread-safe: tailer threads feed while the
HTTP thread collects, both under ``Pipeline.lock``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from parsers import events as ev
from parsers import parse_line

from .state import SourceState

# observers called after each applied event: (source_state, server_state, parsed line, raw line)
Observer = Callable[[SourceState, object, ev.Line, str], None]


class Pipeline:
    """Holds every source's state and feeds lines into it."""

    def __init__(self, engine: str | None = None, observers: Iterable[Observer] = ()) -> None:
        self.engine = engine  # forced engine for every source, or None = auto-detect per source
        self.sources: dict[str, SourceState] = {}
        self.lock = threading.RLock()
        self.observers: list[Observer] = list(observers)

    def source(self, name: str) -> SourceState:
        """The state of source ``name``, created on first use (so it is listed before any line)."""
        with self.lock:
            s = self.sources.get(name)
            if s is None:
                s = self.sources[name] = SourceState(name, engine=self.engine)
            return s

    def feed(self, source: str, line: str) -> str:
        """Parse and apply one line; return its outcome (parsed / ignored / unrecognized)."""
        src = self.sources.get(source) or self.source(source)
        parsed = parse_line(line, src.engine, src.year)
        with self.lock:
            src.lines[parsed.outcome] += 1
            if parsed.event is None:
                if parsed.engine and src.engine is None:
                    src.engine = parsed.engine
                if parsed.ts is not None and (src.last_ts is None or parsed.ts > src.last_ts):
                    src.last_ts = parsed.ts
                return parsed.outcome
            if src.apply(parsed) and self.observers:
                srv = src.server(parsed.dp_rank)
                for obs in self.observers:
                    obs(src, srv, parsed, line)
        return parsed.outcome

    def feed_lines(self, source: str, lines: Iterable[str]) -> None:
        for line in lines:
            self.feed(source, line)
