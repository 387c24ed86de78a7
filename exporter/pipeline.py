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
scrape time (:meth:`Pipeline.sync`). When a line of another shape replaces a pending line (a
field printed only sometimes, such as ``#replay-token`` or ``accept len``), the gauge fields the
replaced line carried and the new one lacks are held with their place in the log and folded into
the gauges in that order (:attr:`Pending.held`): each gauge shows the last line, in log order,
that carried its field, while the rules still see one sample per kind and bucket.
Buckets come from the log's own timestamps, so ``replay`` and ``serve`` sample the same lines
whatever the read chunking, and reach the same verdicts.

``feed_lines`` (a list, from the tailers) and ``feed_text`` (a block of lines, from ``replay``)
go further for the steady state: :mod:`exporter.scan` (a C extension, or its pure-Python twin)
walks runs of batch lines of the learned shapes and uvicorn lines and returns per-run aggregates
(counts, token sums, first and last line of each bucket), which :meth:`Pipeline._apply_scan` turns
into the same state; the line that ends a run goes through :meth:`Pipeline.feed`. All paths give
the same state (tests/test_hot_path.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from operator import itemgetter

from parsers import events as ev
from parsers import has_header, parse_line
from parsers.numbers import is_count
from parsers.prefix import SGLANG_HEADER_RE, sglang_tags, sglang_ts
from parsers.sglang import LINE_TEMPLATES, check_batch

from .scan import ScanResult, Spec, line_at, scan, scan_text
from .scan import spec as scan_spec
from .state import BATCH_GAUGES, DEFAULT_MAX_DP_RANKS, ServerState, SourceState

# observers called after each applied event: (source_state, server_state, parsed line, raw line)
Observer = Callable[[SourceState, ServerState, ev.Line, str], None]

# a sample bucket is 10 s of log clock: the header's 'YYYY-MM-DD HH:MM' plus the tens of seconds
CHUNK_MIN = 32  # lists shorter than this are fed line by line (the scanner's set-up costs more)
RUN_MIN, BACKOFF_MAX = 16, 1024  # see Pipeline._scan_loop
IDLE_SAMPLE_SECONDS = 10.0  # a source quiet this long (wall time) has its pending lines sampled
_G0 = itemgetter(0)


# BatchStats attributes that feed a runtime gauge (state.BATCH_GAUGES), and their metric names
_GAUGE_ATTRS: dict[str, str] = dict(BATCH_GAUGES)
Held = dict[str, tuple[int, float]]  # gauge attribute -> (seq of the line that carried it, value)


@dataclass(slots=True)
class Pending:
    """The newest batch line of one kind for one server in its current bucket, not yet sampled.

    ``held``: gauge fields that earlier lines of this kind in the bucket carried but this line
    does not (a line of another shape replaced them), with the sequence number of the line that
    carried each: they are not samples for the rules, but a gauge must show the last line that
    carried its field, so they are folded into the gauges in log order with the samples."""

    seq: int
    raw: str
    parsed: ev.Line | None = None  # parsed lazily (scrape or commit), at most once
    attrs: frozenset[str] | None = None  # the BatchStats attributes the line carries, if known unparsed
    held: Held | None = None


# a terminal's hard wrap: the first line is as wide as the terminal (pastes of 76-250 columns
# are usual), the continuation lines have no header, none wider than the first
WRAP_MIN_WIDTH, WRAP_MAX_LINES = 40, 12


@dataclass(slots=True)
class Wrapped:
    """A line that may continue on the next, header-less lines (a message wrapped by a terminal):
    held, not yet counted, until the joined text parses or a line that is not its continuation
    arrives."""

    lines: list[str]
    outcome: str  # the first line's outcome on its own
    ts: float | None
    engine: str | None


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


def _is_vllm_access(line: str) -> bool:
    """``(APIServer pid=1) INFO:     127.0.0.1:40052 - "POST ..." 200 OK``: a uvicorn access line
    (no timestamp, nothing to parse), most of a busy vLLM log."""
    j = line.find(") INFO:     ", 0, 120)
    if j < 0:
        return False
    c = line[j + 12 : j + 13]
    return (c.isdigit() or c == "[") and ' - "' in line


def _split(block: str) -> list[str]:
    """The lines of a block whose lines end in ``\\n`` (the last one may lack it)."""
    if not block:
        return []
    return block[:-1].split("\n") if block.endswith("\n") else block.split("\n")


class Pipeline:
    """Holds every source's state and feeds lines into it."""

    def __init__(self, engine: str | None = None, observers: Iterable[Observer] = (), max_dp_ranks: int = DEFAULT_MAX_DP_RANKS) -> None:
        self.engine = engine  # forced engine for every source, or None = auto-detect per source
        self.max_dp_ranks = max_dp_ranks  # per source (--max-dp-ranks, SourceState.admits)
        self.sources: dict[str, SourceState] = {}
        self.lock = threading.RLock()
        self.observers: list[Observer] = list(observers)
        self._seq = 0
        self._wrapped: dict[str, Wrapped] = {}  # source -> its held line (see Wrapped)

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
        src.fed_at = time.monotonic()
        if self._wrapped and source in self._wrapped:
            out = self._continue_wrapped(src, line)
            if out is not None:
                return out
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
            if parsed.event is None:
                if len(line) >= WRAP_MIN_WIDTH and (parsed.outcome == ev.UNRECOGNIZED or parsed.engine is not None or src.engine is None):
                    # a known message cut short, a line with a header that says nothing (a message
                    # cut before its marker) or, before the engine is known, any line: it may
                    # continue on the next lines
                    self._wrapped[source] = Wrapped([line.rstrip("\r\n")], parsed.outcome, parsed.ts, parsed.engine)
                    return parsed.outcome
                self._count_unapplied(src, parsed.outcome, parsed.engine, parsed.ts)
                return parsed.outcome
            src.lines[parsed.outcome] += 1
            if src.pending_count:
                self._commit_all(src)  # keep log order: older batch samples first
            self._apply(src, parsed, line)
        return parsed.outcome

    @staticmethod
    def _count_unapplied(src: SourceState, outcome: str, engine: str | None, ts: float | None, n: int = 1) -> None:
        """Count lines that carry no event; what their header said still counts (engine, time)."""
        src.lines[outcome] += n
        if engine and src.engine is None:
            src.engine = engine
        if ts is not None and (src.last_ts is None or ts > src.last_ts):
            src.last_ts = ts

    def _continue_wrapped(self, src: SourceState, line: str) -> str | None:
        """``line`` after a held line (:class:`Wrapped`): a header-less line no wider than the first,
        which carries nothing on its own, is its continuation; once the joined text parses, the
        message is applied (with the first line's header) and its lines count as parsed. Returns
        the outcome, or None when ``line`` is not a continuation (the held line was counted as it
        was, and ``line`` takes the usual path)."""
        w = self._wrapped[src.name]
        piece = line.rstrip("\r\n")
        first = w.lines[0]
        # the usual case, in one comparison: the next line starts like the held one (the same
        # header start: '[2026-', '(APISe', 'INFO 0'), so it is a new line, not a continuation
        if (
            len(piece) <= len(first)
            and piece[:6] != first[:6]
            and not _starts_with_header(piece)
            and not has_header(piece, src.engine, src.year)
        ):
            alone = parse_line(piece, src.engine, src.year)
            if alone.event is None:
                w.lines.append(piece)
                joined = parse_line("".join(w.lines), src.engine, src.year)
                if joined.event is not None:
                    del self._wrapped[src.name]
                    with self.lock:
                        src.lines[ev.PARSED] += len(w.lines)
                        if src.pending_count:
                            self._commit_all(src)
                        self._apply(src, joined, "".join(w.lines))
                    return ev.PARSED
                if len(piece) >= len(first) - 1 and len(w.lines) < WRAP_MAX_LINES:
                    return ev.IGNORED  # a full-width piece: more may follow
                self._drop_wrapped(src)
                return ev.IGNORED
        self._drop_wrapped(src)
        return None

    def _drop_wrapped(self, src: SourceState) -> None:
        """Count a held line (and the pieces that followed it) as what they were on their own."""
        w = self._wrapped.pop(src.name, None)
        if w is not None:
            with self.lock:
                self._count_unapplied(src, w.outcome, w.engine, w.ts)
                if len(w.lines) > 1:
                    src.lines[ev.IGNORED] += len(w.lines) - 1

    def feed_lines(self, source: str, lines: Iterable[str]) -> None:
        """Feed many lines in order; same result as ``feed`` on each, faster on busy SGLang logs."""
        if not isinstance(lines, list):
            lines = list(lines)
        src = self.sources.get(source) or self.source(source)
        src.fed_at = time.monotonic()
        feed = self.feed
        i = 0
        while src.engine is None and i < len(lines):  # auto-detect: the first lines tell the engine
            feed(source, lines[i])
            i += 1
        if src.engine == ev.SGLANG and len(lines) - i >= CHUNK_MIN:
            self._feed_scanned(src, lines[i:] if i else lines)
            return
        for line in lines[i:] if i else lines:
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
                attrs = t[3]
                g = m.groups()
                ymdhm, sec, ms, tags = g[0], g[1], g[2], g[3]
                new = cached = None
                if c == "P":
                    try:
                        new = int(g[t[1]]) if t[1] is not None else None
                        cached = int(g[t[2]]) if t[2] is not None else None
                        if not (is_count(new) and is_count(cached)):
                            m = None  # check_batch below makes it unrecognized
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
                attrs = None  # a shape not learned (yet): its fields are known once parsed
            return self._batch_line(src, line, c, ymdhm, sec, ms, tags, new, cached, attrs)
        if c == "I" and line.startswith("INFO:", i + 2) and "\r" not in line and "\x1b" not in line:
            h = SGLANG_HEADER_RE.match(line)
            if h is None:
                return None
            ymdhm, sec, _, _ = h.groups()
            ts = sglang_ts(ymdhm, sec, None)
            with self.lock:
                src.lines[ev.IGNORED] += 1
                if src.last_ts is None or ts > src.last_ts:
                    src.last_ts = ts
            return ev.IGNORED
        return None

    def _batch_line(
        self,
        src: SourceState,
        line: str,
        c: str,
        ymdhm: str,
        sec: str,
        ms: str | None,
        tags: str,
        new,
        cached,
        attrs: frozenset[str] | None,
    ) -> str:
        """Count one valid batch line and make it its server's pending line of kind ``c``."""
        ts = sglang_ts(ymdhm, sec, ms)
        dp, tp, pp = sglang_tags(tags) if tags else ("0", None, None)
        with self.lock:
            src.lines[ev.PARSED] += 1
            if src.last_ts is None or ts > src.last_ts:
                src.last_ts = ts
            src.runtime_seen = True
            srv = src.servers.get(dp)
            if srv is None:
                if not src.admits(dp):  # beyond --max-dp-ranks: counted, not stored
                    return ev.PARSED
                srv = src.server(dp)
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
                srv.pending[c] = Pending(self._seq, line, None, attrs)
                src.pending_count = 1
            else:
                new_p = Pending(self._seq, line, None, attrs)
                if pend.attrs is None or attrs is None or not pend.attrs <= attrs:
                    new_p.held = self._displaced(src, pend, new_p)
                else:
                    new_p.held = pend.held
                srv.pending[c] = new_p
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

    @classmethod
    def _carried(cls, src: SourceState, p: Pending) -> dict[str, float]:
        """The gauge fields line ``p`` carries (parsing it if not done yet)."""
        e = cls._parsed(src, p).event
        if type(e) is not ev.BatchStats:
            return {}
        return {a: float(v) for a in _GAUGE_ATTRS if (v := getattr(e, a)) is not None}

    @classmethod
    def _displaced(cls, src: SourceState, old: Pending, new: Pending) -> Held | None:
        """What ``new``, replacing ``old`` as the pending line of its kind, must hold: the gauge
        fields ``old`` (or a line before it) carried that ``new`` does not. Lines of one learned
        shape carry the same fields, so this parses only where the shapes differ."""
        if new.attrs is not None:
            mine = new.attrs
        else:
            mine = frozenset(cls._carried(src, new))
        held = {a: sv for a, sv in old.held.items() if a not in mine} if old.held else {}
        for a, v in cls._carried(src, old).items():
            if a not in mine:
                held[a] = (old.seq, v)
        return held or None

    @staticmethod
    def _in_order(pending: Iterable[Pending]) -> list[tuple[int, Pending | tuple[str, float]]]:
        """Pending lines and the fields they hold, in log order (by sequence number)."""
        items: list[tuple[int, Pending | tuple[str, float]]] = []
        for p in pending:
            items.append((p.seq, p))
            if p.held:
                items.extend((seq, (a, v)) for a, (seq, v) in p.held.items())
        items.sort(key=_G0)
        return items

    def _commit_server(self, src: SourceState, srv: ServerState) -> None:
        """Send the server's pending lines (one per kind, in arrival order) through the state (their
        counters were counted when they arrived) and the rules; the fields they hold go to the
        gauges in their place in that order. Gauges of newer lines are folded in at scrape time
        by :meth:`sync`."""
        for _, p in self._in_order(srv.pending.values()):
            if type(p) is tuple:
                srv.gauges[_GAUGE_ATTRS[p[0]]] = p[1]
                continue
            parsed = self._parsed(src, p)
            if parsed.event is not None:
                self._apply(src, parsed, p.raw, counted=True)
        srv.pending.clear()

    def _sample(self, src: SourceState, raw: str) -> None:
        parsed = parse_line(raw, src.engine, src.year)
        if parsed.event is not None:
            self._apply(src, parsed, raw, counted=True)

    def feed_text(self, source: str, text: str) -> None:
        """Feed a block of complete lines, each ending in ``\\n``: same result as ``feed_lines`` on
        its lines; on an SGLang source the scanner walks the block without splitting it."""
        src = self.sources.get(source) or self.source(source)
        src.fed_at = time.monotonic()
        feed, name = self.feed, src.name
        n = len(text)

        def one(at: int) -> int:
            """Feed the line at offset ``at`` down the line path; the offset of the next line."""
            line = line_at(text, at)
            feed(name, line)
            return at + len(line) + 1

        i = 0
        while src.engine is None and i < n:  # auto-detect: the first lines tell the engine
            i = one(i)
        if src.engine != ev.SGLANG or n - i < CHUNK_MIN * 128:
            self.feed_lines(source, _split(text[i:] if i else text))
            return
        self._scan_loop(src, i, n, partial(scan_text, text), one, partial(line_at, text), lambda a, b: _split(text[a:b]))

    def _feed_scanned(self, src: SourceState, lines: list[str]) -> None:
        """A list through the bulk scanner (positions are list indices)."""
        feed, name = self.feed, src.name

        def one(i: int) -> int:
            feed(name, lines[i])
            return i + 1

        self._scan_loop(src, 0, len(lines), partial(scan, lines), one, lines.__getitem__, lambda a, b: lines[a:b])

    def _scan_loop(
        self,
        src: SourceState,
        i: int,
        n: int,
        scan_from: Callable[[int, Spec], ScanResult],
        one: Callable[[int], int],
        line: Callable[[int], str],
        between: Callable[[int, int], list[str]],
    ) -> None:
        """Feed positions ``i`` to ``n`` of a list (indices) or a block (offsets) through the bulk
        scanner: runs of steady-state lines are applied from the scanner's aggregates
        (:meth:`_apply_scan`), the line that ends a run goes down the line path (``one`` feeds the
        line at a position and returns the next position).

        Where runs stay short (a log that mixes other lines in between the batch lines), the
        scanner's per-run cost exceeds what it saves: after a run of fewer than ``RUN_MIN`` lines
        the next lines take the line path, ``RUN_MIN`` at first and twice as many after every
        further short run (at most ``BACKOFF_MAX``). Both paths give the same state."""
        feed, name = self.feed, src.name
        backoff = 0
        wrapped = self._wrapped
        while i < n:
            sp = scan_spec()
            if sp is None or (wrapped and name in wrapped):  # shapes not learned yet; a held line
                i = one(i)
                continue
            r = scan_from(i, sp)
            stop = r[0]
            if stop > i and not self._apply_scan(src, line, i, r):
                for ln in between(i, stop):
                    feed(name, ln)
            if stop >= n:
                return
            i = one(stop)
            if r[1] + sum(r[3].values()) < RUN_MIN:  # lines in the run: uvicorn + batch
                backoff = min(max(2 * backoff, RUN_MIN), BACKOFF_MAX)
                for _ in range(backoff):
                    if i >= n:
                        return
                    i = one(i)
            else:
                backoff = 0

    def _apply_scan(self, src: SourceState, line: Callable[[int], str], lo: int, r: ScanResult) -> bool:
        """Apply the run from ``lo`` to the scanner's stop from its aggregates; same state as
        feeding its lines one by one. ``line(i)`` is the line at index (or offset) ``i``. Returns
        False, having changed nothing, when the run must be fed line by line to keep its order:
        two ranks of one DP group in it."""
        hi, n_info, top, counts, new_sums, cached_sums, first, last = r
        ranks: dict[str, tuple[str, tuple[int, int] | None]] = {}
        dps: dict[str, tuple[int, int] | None] = {}
        for _, tags in counts:
            if tags not in ranks:
                dp, tp, pp = sglang_tags(tags) if tags else ("0", None, None)
                rank = None if tp is None and pp is None else (pp or 0, tp or 0)
                if dp in dps and dps[dp] != rank:
                    return False
                dps[dp] = rank
                ranks[tags] = (dp, rank)
        ts = sglang_ts(*top)
        n_batch = sum(counts.values())
        with self.lock:
            unknown = sum(1 for dp in dps if dp not in src.servers)
            if unknown and len(src.servers) + unknown > (src.max_dp_ranks or DEFAULT_MAX_DP_RANKS):
                return False  # line by line: the lines of ranks beyond the limit are counted and dropped
            src.lines[ev.PARSED] += n_batch
            src.lines[ev.IGNORED] += n_info
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
                srv = speaking.get(tags)
                if srv is not None:
                    srv.count_batches(kind == "D", k, new_sums.get(tags), cached_sums.get(tags))
            # each server's buckets in order of their first line; at a bucket change the lines of
            # the bucket before become samples, exactly as line by line
            begins: dict[str, dict[str, int]] = {}  # tags -> bucket -> its first batch line
            for (_, tags, bucket), i in first.items():
                if tags in speaking:
                    bb = begins.setdefault(tags, {})
                    if i < bb.get(bucket, hi):
                        bb[bucket] = i
            # the fields each kind's lines in the run carry (all of one learned shape)
            attrs = {k: LINE_TEMPLATES[k][3] for k in "DP"}
            # (line index, server, samples in order: lines, or (attribute, value) a gauge holds)
            actions: list[tuple[int, ServerState, list[str | tuple[str, float]]]] = []
            ends: dict[str, tuple[str, list[tuple[int, str]]]] = {}  # tags -> (last bucket, its last lines)
            for tags, bb in begins.items():
                srv = speaking[tags]
                cur = srv.bucket
                for i, b in sorted((i, b) for b, i in bb.items()):
                    if b != cur:
                        actions.append((i, srv, self._bucket_lines(src, srv, tags, cur, last, line, attrs)))
                        cur = b
                ends[tags] = (cur, sorted((last[(k, tags, cur)], k) for k in "DP" if (k, tags, cur) in last))
            actions.sort(key=_G0)
            for _, srv, samples in actions:
                for x in samples:
                    if type(x) is tuple:
                        srv.gauges[_GAUGE_ATTRS[x[0]]] = x[1]
                    else:
                        self._sample(src, x)
            base = self._seq - lo
            for tags, (cur, tail) in ends.items():
                srv = speaking[tags]
                if cur != srv.bucket:
                    srv.pending.clear()
                    srv.bucket = cur
                for idx, kind in tail:
                    new_p = Pending(base + idx + 1, line(idx), None, attrs[kind])
                    old = srv.pending.get(kind)
                    if old is not None:
                        new_p.held = old.held if old.attrs is not None and old.attrs <= new_p.attrs else self._displaced(src, old, new_p)
                    srv.pending[kind] = new_p
            self._seq = base + hi
            src.pending_count = 1
        return True

    def _bucket_lines(
        self,
        src: SourceState,
        srv: ServerState,
        tags: str,
        bucket: str | None,
        last: dict,
        line: Callable[[int], str],
        attrs: dict[str, frozenset[str]],
    ) -> list[str | tuple[str, float]]:
        """The samples of ``bucket`` for one server, in arrival order: per kind the last line of the
        list in that bucket, else (for the bucket the list started in) the server's pending line;
        and in their place in that order, the ``(attribute, value)`` gauge fields that replaced
        pending lines (and lines they replaced) carried and the run's shape does not."""
        i_d, i_p = last.get(("D", tags, bucket)), last.get(("P", tags, bucket))
        new = [i_d, i_p] if i_p is not None and i_d is not None and i_d < i_p else [i for i in (i_p, i_d) if i is not None]
        if bucket != srv.bucket or not srv.pending:  # the usual case: a bucket that began in this run
            return [line(i) for i in new]
        kept: list[Pending] = []
        for k, p in srv.pending.items():
            if (k, tags, bucket) not in last:
                kept.append(p)
            elif p.attrs is None or not p.attrs <= attrs[k]:  # replaced by a line of another shape
                held = self._displaced(src, p, Pending(0, "", None, attrs[k]))
                if held:
                    kept.append(Pending(p.seq, "", None, None, held))
            elif p.held:
                kept.append(Pending(p.seq, "", None, None, p.held))
        out: list[str | tuple[str, float]] = []
        for _, x in self._in_order(kept):
            if type(x) is tuple:
                out.append(x)
            elif x.raw:
                out.append(x.raw)
        return out + [line(i) for i in new]

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
                if self._wrapped and now - src.fed_at >= IDLE_SAMPLE_SECONDS:
                    self._drop_wrapped(src)  # no continuation came
                if not src.pending_count:
                    continue
                if now - src.fed_at >= IDLE_SAMPLE_SECONDS:
                    self._commit_all(src)
                    continue
                for srv in src.servers.values():
                    for _, p in self._in_order(srv.pending.values()):
                        if type(p) is tuple:
                            srv.gauges[_GAUGE_ATTRS[p[0]]] = p[1]
                            continue
                        o = self._parsed(src, p)
                        if type(o.event) is ev.BatchStats:
                            srv.set_gauges(o.event)

    def finish(self) -> None:
        """Sample every pending line (end of a ``report``: nothing more will come)."""
        with self.lock:
            for src in self.sources.values():
                self._drop_wrapped(src)
                self._commit_all(src)
