"""The one-way flow: lines -> parsers -> per-source state -> rules.

``Pipeline.feed`` is the single entry point that ``replay``, ``serve`` and ``report`` use, so all
three reach the same state from the same lines. It is thread-safe: tailer threads feed while the
HTTP thread collects, both under ``Pipeline.lock``.

Hot path. Most of a busy SGLang log is ``Decode batch`` / ``Prefill batch`` and uvicorn lines. Each
batch line is validated and counted (counters and line outcomes are exact for every line), but its
full event is built only for the *samples*: per server and kind, the last batch line of each
10-second bucket of the **log clock** (``YYYY-MM-DD HH:MM:S``). Samples go through the state and the
rules in log order; the newest line of each kind waits as "pending" until a line of the next
bucket arrives (or another event does), and the collector folds pending lines into the gauges at
scrape time (:meth:`Pipeline.sync`), so a gauge always shows the newest line that carried its field.
Buckets come from the log's own timestamps, so ``replay`` and ``serve`` sample the same lines
whatever the read chunking, and reach the same verdicts.

``feed_lines`` goes further for the steady state: when a whole list of lines consists of batch lines
of learned shapes and uvicorn lines, one multi-line ``findall`` splits them all and the counting,
bucketing and "last line per bucket" bookkeeping run as C-level passes (``Counter``, ``map``,
``dict(zip(...))``); any other list is fed line by line. Both paths give the same state.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import add, itemgetter

from parsers import events as ev
from parsers import parse_line
from parsers.prefix import SGLANG_HEADER_RE, minute_epoch, sglang_tags
from parsers.sglang import LINE_TEMPLATES, check_batch, chunk_regex

from .state import ServerState, SourceState

# observers called after each applied event: (source_state, server_state, parsed line, raw line)
Observer = Callable[[SourceState, ServerState, ev.Line, str], None]

# a sample bucket is 10 s of log clock: the header's 'YYYY-MM-DD HH:MM' plus the tens of seconds
CHUNK_MIN = 32  # lists shorter than this are fed line by line
IDLE_SAMPLE_SECONDS = 10.0  # a source quiet this long (wall time) has its pending lines sampled
_G0, _G1, _G2, _G3 = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)


@dataclass(slots=True)
class Pending:
    """The newest batch line of one kind for one server in its current bucket, not yet sampled."""

    seq: int
    raw: str
    parsed: ev.Line | None = None  # parsed lazily (scrape or commit), at most once


def _is_vllm_access(line: str) -> bool:
    """``(APIServer pid=1) INFO:     127.0.0.1:40052 - "POST ..." 200 OK``: a uvicorn access line
    (no timestamp, nothing to parse), most of a busy vLLM log."""
    j = line.find(") INFO:     ", 0, 120)
    if j < 0:
        return False
    c = line[j + 12 : j + 13]
    return (c.isdigit() or c == "[") and ' - "' in line


class Pipeline:
    """Holds every source's state and feeds lines into it."""

    def __init__(self, engine: str | None = None, observers: Iterable[Observer] = ()) -> None:
        self.engine = engine  # forced engine for every source, or None = auto-detect per source
        self.sources: dict[str, SourceState] = {}
        self.lock = threading.RLock()
        self.observers: list[Observer] = list(observers)
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
        src.fed_at = time.monotonic()
        if src.engine == ev.SGLANG and line[:1] == "[":
            out = self._feed_sglang_fast(src, line)
            if out is not None:
                return out
        elif src.engine == ev.VLLM and _is_vllm_access(line):
            with self.lock:
                src.lines[ev.IGNORED] += 1
            return ev.IGNORED
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
        """Feed many lines in order; same result as ``feed`` on each, faster on busy SGLang logs."""
        if not isinstance(lines, list):
            lines = list(lines)
        src = self.sources.get(source) or self.source(source)
        src.fed_at = time.monotonic()
        if src.engine == ev.SGLANG and len(lines) >= CHUNK_MIN and self._feed_chunk(src, lines):
            return
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
            if src.last_ts is None or ts > src.last_ts:
                src.last_ts = ts
            src.runtime_seen = True
            srv = src.servers.get(dp) or src.server(dp)
            if (tp is not None or pp is not None) and not srv.speaks((pp or 0, tp or 0)):
                return ev.PARSED
            srv.count_batches(c == "D", 1.0, new, cached)
            bucket = ymdhm + sec[0]
            if bucket != srv.bucket:
                if srv.pending:
                    self._commit_server(src, srv)  # the last bucket's lines become samples
                srv.bucket = bucket
            self._seq += 1
            pend = srv.pending.get(c)
            if pend is None:
                srv.pending[c] = Pending(self._seq, line)
                src.pending_count = 1
            else:
                pend.seq, pend.raw, pend.parsed = self._seq, line, None
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

    def _commit_server(self, src: SourceState, srv: ServerState) -> None:
        """Send the server's pending lines (one per kind, in arrival order) through the state (their
        counters were counted when they arrived) and the rules. Gauges of newer lines are folded
        in at scrape time by :meth:`sync`."""
        for p in sorted(srv.pending.values(), key=lambda p: p.seq):
            parsed = self._parsed(src, p)
            if parsed.event is not None:
                self._apply(src, parsed, p.raw, counted=True)
        srv.pending.clear()

    def _sample(self, src: SourceState, raw: str) -> None:
        parsed = parse_line(raw, src.engine, src.year)
        if parsed.event is not None:
            self._apply(src, parsed, raw, counted=True)

    def _feed_chunk(self, src: SourceState, lines: list[str]) -> bool:
        """A whole list of lines in C-level passes, when every line is a batch line of a learned
        shape or a uvicorn line (the steady state of a busy server). Returns False, having changed
        nothing, when the list needs the line-by-line path (startup, retractions, a new shape, a
        rank change); the result is then the same either way."""
        c = chunk_regex()
        if c is None:
            return False
        rx, i_d, i_p, i_new, i_cached = c
        rows = rx.findall("\n".join(lines))
        n = len(lines)
        if len(rows) != n:
            return False
        kcol = list(map(add, map(itemgetter(i_d), rows), map(itemgetter(i_p), rows)))  # 'D' / 'P' / ''
        tcol = list(map(_G3, rows))
        counts = Counter(zip(kcol, tcol, strict=True))
        ranks: dict[str, tuple[str, tuple[int, int] | None]] = {}
        dps: dict[str, tuple[int, int] | None] = {}
        for kind, tags in counts:
            if kind and tags not in ranks:
                dp, tp, pp = sglang_tags(tags) if tags else ("0", None, None)
                rank = None if tp is None and pp is None else (pp or 0, tp or 0)
                if dp in dps and dps[dp] != rank:
                    return False  # two ranks of one DP group in one chunk: keep line order
                dps[dp] = rank
                ranks[tags] = (dp, rank)
        new_sums: dict[str, int] = {}
        cached_sums: dict[str, int] = {}
        n_p = sum(v for (k, _), v in counts.items() if k == "P")
        if n_p:
            try:
                for idx, sums in ((i_new, new_sums), (i_cached, cached_sums)):
                    if idx is None:
                        continue
                    col = [x for x in map(itemgetter(idx), rows) if x]
                    if len(col) != n_p:
                        return False
                    ptags = [t for k, t in counts if k == "P"]
                    if len(ptags) == 1:
                        sums[ptags[0]] = sum(map(int, col))
                    else:
                        for r in rows:
                            if r[i_p]:
                                sums[r[3]] = sums.get(r[3], 0) + int(r[idx])
            except ValueError:
                return False
        ymd, secs = list(map(_G0, rows)), list(map(_G1, rows))
        keys = list(zip(kcol, tcol, map(add, ymd, map(_G0, secs)), strict=True))  # (kind, tags, bucket)
        last = dict(zip(keys, range(n), strict=True))  # last line per kind and bucket
        first = dict(zip(reversed(keys), range(n - 1, -1, -1), strict=True))  # first line per kind and bucket
        top = max(zip(ymd, secs, map(_G2, rows), strict=True))
        ts = minute_epoch(top[0]) + int(top[1]) + (int(top[2]) / 1000.0 if top[2] else 0.0)
        n_batch = n - sum(v for (k, _), v in counts.items() if not k)
        with self.lock:
            src.lines[ev.PARSED] += n_batch
            src.lines[ev.IGNORED] += n - n_batch
            if src.last_ts is None or ts > src.last_ts:
                src.last_ts = ts
            if not n_batch:
                return True
            src.runtime_seen = True
            speaking: dict[str, ServerState] = {}
            for tags, (dp, rank) in ranks.items():
                srv = src.servers.get(dp) or src.server(dp)
                if rank is None or srv.speaks(rank):
                    speaking[tags] = srv
            for (kind, tags), k in counts.items():
                srv = speaking.get(tags) if kind else None
                if srv is None:
                    continue
                srv.count_batches(kind == "D", k, new_sums.get(tags), cached_sums.get(tags))
            # each server's buckets in order of their first line; at a bucket change the lines of
            # the bucket before become samples, exactly as line by line
            begins: dict[str, dict[str, int]] = {}  # tags -> bucket -> its first batch line
            for (kind, tags, bucket), i in first.items():
                if kind and tags in speaking:
                    bb = begins.setdefault(tags, {})
                    if i < bb.get(bucket, n):
                        bb[bucket] = i
            actions: list[tuple[int, list[str]]] = []  # (line index, lines to sample in order)
            ends: dict[str, tuple[str, list[int]]] = {}  # tags -> (last bucket, its last lines)
            for tags, bb in begins.items():
                srv = speaking[tags]
                bl = sorted((i, b) for b, i in bb.items())
                cur = srv.bucket
                for i, b in bl:
                    if b != cur:
                        actions.append((i, self._bucket_lines(srv, tags, cur, last, lines)))
                        cur = b
                ends[tags] = (cur, sorted(last[(k, tags, cur)] for k in "DP" if (k, tags, cur) in last))
            actions.sort(key=_G0)
            for _, raws in actions:
                for raw in raws:
                    self._sample(src, raw)
            base = self._seq
            for tags, (cur, tail) in ends.items():
                srv = speaking[tags]
                if cur != srv.bucket:
                    srv.pending.clear()
                    srv.bucket = cur
                for idx in tail:
                    srv.pending[kcol[idx]] = Pending(base + idx + 1, lines[idx])
            self._seq = base + n
            src.pending_count = 1
        return True

    @staticmethod
    def _bucket_lines(srv: ServerState, tags: str, bucket: str | None, last: dict, lines: list[str]) -> list[str]:
        """The samples of ``bucket`` for one server, in arrival order: per kind the last line of the
        list in that bucket, else (for the bucket the list started in) the server's pending line."""
        carried = bucket == srv.bucket
        old = sorted((p for k, p in srv.pending.items() if carried and (k, tags, bucket) not in last), key=lambda p: p.seq)
        new = sorted(i for i in (last.get((k, tags, bucket)) for k in "DP") if i is not None)
        return [p.raw for p in old] + [lines[i] for i in new]

    def _commit_all(self, src: SourceState) -> None:
        for srv in src.servers.values():
            if srv.pending:
                self._commit_server(src, srv)
        src.pending_count = 0

    def sync(self) -> None:
        """Fold pending lines into the gauges (in arrival order) without sampling them: called by
        the collector before every scrape so gauges show the newest line.

        A source that received nothing for ``IDLE_SAMPLE_SECONDS`` of wall time has its pending
        lines sampled: any later line of a live log lies in a later 10-s bucket anyway, so this is
        what its arrival would do, only sooner (``replay`` does the same at end of input)."""
        now = time.monotonic()
        with self.lock:
            for src in self.sources.values():
                if not src.pending_count:
                    continue
                if now - src.fed_at >= IDLE_SAMPLE_SECONDS:
                    self._commit_all(src)
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
