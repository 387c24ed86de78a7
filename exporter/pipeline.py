"""The one-way flow: lines -> parsers -> per-source state -> rules.

``Pipeline.feed`` is the single entry point that ``replay``, ``serve`` and ``report`` use, so all
three reach the same state from the same lines. It is thread-safe: tailer threads feed while the
HTTP thread collects, both under ``Pipeline.lock``.

Hot path. Most of a busy SGLang log is ``Decode batch`` / ``Prefill batch`` lines. Each one is
validated and counted (counters and line outcomes are exact for every line), but its full event
is built only for the *samples*: per server and kind, the last batch line of each
``sample_seconds`` bucket of **log** time. Samples go through the state and the rules in log
order; the newest line of each kind waits as "pending" until the next bucket starts or another
event arrives, and the collector folds pending lines into the gauges at scrape time
(:meth:`sync`), so a gauge always shows the newest line that carried its field. Since buckets
are defined by the log's own timestamps, ``replay`` and ``serve`` see the same samples whatever
the read chunking, and reach the same verdicts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from parsers import events as ev
from parsers import parse_line
from parsers.prefix import SGLANG_HEADER_RE, minute_epoch, sglang_tags
from parsers.sglang import LINE_TEMPLATES, check_batch

from .state import ServerState, SourceState

# observers called after each applied event: (source_state, server_state, parsed line, raw line)
Observer = Callable[[SourceState, ServerState, ev.Line, str], None]

DEFAULT_SAMPLE_SECONDS = 5.0


@dataclass(slots=True)
class Pending:
    """The newest batch line of one kind for one server, not yet sampled."""

    bucket: int
    seq: int
    raw: str
    parsed: ev.Line | None = None  # parsed lazily (scrape or commit), at most once


class Pipeline:
    """Holds every source's state and feeds lines into it."""

    def __init__(
        self, engine: str | None = None, observers: Iterable[Observer] = (), sample_seconds: float = DEFAULT_SAMPLE_SECONDS
    ) -> None:
        self.engine = engine  # forced engine for every source, or None = auto-detect per source
        self.sources: dict[str, SourceState] = {}
        self.lock = threading.RLock()
        self.observers: list[Observer] = list(observers)
        self.sample_seconds = sample_seconds
        self._seq = 0

    def source(self, name: str) -> SourceState:
        """The state of source ``name``, created on first use (so it is listed before any line)."""
        with self.lock:
            s = self.sources.get(name)
            if s is None:
                s = self.sources[name] = SourceState(name, engine=self.engine)
            return s

    # ------------------------------------------------------------------------------------
    def feed(self, source: str, line: str) -> str:
        """Parse and apply one line; return its outcome (parsed / ignored / unrecognized)."""
        src = self.sources.get(source) or self.source(source)
        if src.engine == ev.SGLANG and line[:1] == "[":
            out = self._feed_sglang_fast(src, line)
            if out is not None:
                return out
        parsed = parse_line(line, src.engine, src.year)
        with self.lock:
            src.lines[parsed.outcome] += 1
            if parsed.event is None:
                if parsed.engine and src.engine is None:
                    src.engine = parsed.engine
                if parsed.ts is not None and (src.last_ts is None or parsed.ts > src.last_ts):
                    src.last_ts = parsed.ts
                return parsed.outcome
            if src.pending_count:
                self._commit_all(src)  # keep log order: older batch samples first
            self._apply(src, parsed, line)
        return parsed.outcome

    def feed_lines(self, source: str, lines: Iterable[str]) -> None:
        feed = self.feed
        for line in lines:
            feed(source, line)

    def _feed_sglang_fast(self, src: SourceState, line: str) -> str | None:
        """SGLang batch and uvicorn lines without building events; None = take the full path.

        A batch line of a shape seen before is validated and split by one ``fullmatch`` of its
        learned whole-line template; other shapes go through the header regex and the generic
        parser once, which learns them."""
        i = line.find("] ", 20)  # end of '[YYYY-MM-DD HH:MM:SS TAGS] '
        c = line[i + 2 : i + 3] if i > 0 else ""
        if c == "D" or c == "P":
            t = LINE_TEMPLATES.get(c)
            m = t[0].fullmatch(line) if t is not None else None
            if m is not None:
                g = m.groups()
                ymdhm, sec, ms, tags = g[0], g[1], g[2], g[3]
                new = cached = None
                if c == "P":
                    try:
                        new = int(g[t[1]]) if t[1] is not None else None
                        cached = int(g[t[2]]) if t[2] is not None else None
                    except ValueError:
                        m = None
            if m is None:
                h = SGLANG_HEADER_RE.match(line)
                if h is None or "\r" in line or "\x1b" in line:
                    return None
                r = check_batch(line[h.end() :])
                if r is None:
                    return None
                if type(r) is ev.Unrecognized:
                    with self.lock:
                        src.lines[ev.UNRECOGNIZED] += 1
                    return ev.UNRECOGNIZED
                ymdhm, sec, ms, tags = h.groups()
                new, cached = r
            return self._batch_line(src, line, c, ymdhm, sec, ms, tags, new, cached)
        if c == "I" and line.startswith("INFO:", i + 2) and "\r" not in line and "\x1b" not in line:
            h = SGLANG_HEADER_RE.match(line)
            if h is None:
                return None
            ymdhm, sec, _, _ = h.groups()
            ts = minute_epoch(ymdhm) + int(sec)
            with self.lock:
                src.lines[ev.IGNORED] += 1
                if src.last_ts is None or ts > src.last_ts:
                    src.last_ts = ts
            return ev.IGNORED
        return None

    def _batch_line(self, src: SourceState, line: str, c: str, ymdhm: str, sec: str, ms: str | None, tags: str, new, cached) -> str:
        """Count one valid batch line and make it its server's pending line of kind ``c``."""
        ts = minute_epoch(ymdhm) + int(sec)
        if ms:
            ts += int(ms) / 1000.0
        dp, tp, pp = sglang_tags(tags) if tags else ("0", None, None)
        with self.lock:
            src.lines[ev.PARSED] += 1
            srv = src.servers.get(dp) or src.server(dp)
            if (tp is not None or pp is not None) and not srv.speaks((pp or 0, tp or 0)):
                return ev.PARSED
            if src.last_ts is None or ts > src.last_ts:
                src.last_ts = ts
            srv.last_ts = ts
            src.runtime_seen = True
            cnt = srv.counters
            if c == "D":
                cnt["decode_batches"] = cnt.get("decode_batches", 0.0) + 1.0
            else:
                cnt["prefill_batches"] = cnt.get("prefill_batches", 0.0) + 1.0
                if new is not None:
                    cnt["prefill_tokens_new"] = cnt.get("prefill_tokens_new", 0.0) + new
                if cached is not None:
                    cnt["prefill_tokens_cached"] = cnt.get("prefill_tokens_cached", 0.0) + cached
            bucket = int(ts // self.sample_seconds)
            self._seq += 1
            pend = srv.pending.get(c)
            if pend is None:
                srv.pending[c] = Pending(bucket, self._seq, line)
                src.pending_count = 1
            elif pend.bucket == bucket:
                pend.seq, pend.raw, pend.parsed = self._seq, line, None
            else:
                self._commit(src, srv, c)
                srv.pending[c] = Pending(bucket, self._seq, line)
                src.pending_count = 1
        return ev.PARSED

    # ------------------------------------------------------------------------------------
    def _apply(self, src: SourceState, parsed: ev.Line, raw: str, counted: bool = False) -> None:
        if src.apply(parsed, counted) and self.observers:
            srv = src.server(parsed.dp_rank)
            for obs in self.observers:
                obs(src, srv, parsed, raw)

    @staticmethod
    def _parsed(src: SourceState, p: Pending) -> ev.Line:
        if p.parsed is None:
            p.parsed = parse_line(p.raw, src.engine, src.year)
        return p.parsed

    def _commit(self, src: SourceState, srv: ServerState, kind: str) -> None:
        """Send the pending line of ``kind`` through the state (counters already counted) and the
        rules; then let newer pending lines of the other kind keep their say on shared gauges."""
        p = srv.pending.pop(kind)
        parsed = self._parsed(src, p)
        if parsed.event is not None:
            self._apply(src, parsed, p.raw, counted=True)
        for other in srv.pending.values():
            if other.seq > p.seq:
                o = self._parsed(src, other)
                if type(o.event) is ev.BatchStats:
                    srv.set_gauges(o.event)

    def _commit_all(self, src: SourceState) -> None:
        for srv in src.servers.values():
            while srv.pending:
                kind = min(srv.pending, key=lambda k: srv.pending[k].seq)
                self._commit(src, srv, kind)
        src.pending_count = 0

    def sync(self) -> None:
        """Fold pending lines into the gauges (in arrival order) without sampling them: called by
        the collector before every scrape so gauges show the newest line."""
        with self.lock:
            for src in self.sources.values():
                if not src.pending_count:
                    continue
                for srv in src.servers.values():
                    for p in sorted(srv.pending.values(), key=lambda p: p.seq):
                        o = self._parsed(src, p)
                        if type(o.event) is ev.BatchStats:
                            srv.set_gauges(o.event)

    def finish(self) -> None:
        """Sample every pending line (end of a ``report``: nothing more will come)."""
        with self.lock:
            for src in self.sources.values():
                self._commit_all(src)
