"""The sampler in front of the plain pipeline (:mod:`exporter.flow`): the hot path of busy logs.

Most of a busy SGLang log is ``Decode batch`` / ``Prefill batch`` and uvicorn lines. Each batch
line is validated and counted (counters and line outcomes are exact for every line), but its full
event is built only for the *samples*: per server and kind, the last batch line of each 10-second
bucket of the **log clock** (``YYYY-MM-DD HH:MM:S``). Samples go through the flow (state, rules)
in log order; the newest line of each kind waits as "pending" until a line of the next bucket
arrives, another event does (the flow's barrier), the ingest side's :meth:`Sampler.tick` finds the
source quiet, or the input ends (:meth:`Sampler.finish`). Buckets come from the log's own
timestamps, so ``replay`` and ``serve`` sample the same lines whatever the read chunking.

Gauges do not depend on sampling: a scrape reads the committed gauges overlaid with the pending
lines (:meth:`Sampler.gauges_of`, which writes nothing). When a line of another shape replaces a
pending line (a field printed only sometimes, such as ``#replay-token`` or ``accept len``), the
gauge fields the replaced line carried and the new one lacks are held with their place in the
log (:attr:`Pending.held`): each gauge shows the last line, in log order, that carried its field.

``feed_lines`` (a list, from the tailers) and ``feed_text`` (a block of lines, from ``replay``)
go further for the steady state: :mod:`exporter.scan` (a C extension, or its pure-Python twin)
walks runs of batch lines of the learned shapes and uvicorn lines and returns per-run aggregates
(counts, token sums, first and last line of each bucket), which :meth:`Sampler._apply_scan` turns
into the same state; the line that ends a run goes through :meth:`Sampler.feed`. All paths give
the same state (tests/pipeline/test_hot_path.py, tests/pipeline/test_gauges_exact.py).

What a source's batch lines look like is learned per source (:class:`parsers.shapes.LineShapes`
in :class:`SourceSampling`), so two servers of different releases keep their own shapes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter

from parsers import events as ev
from parsers import message_line, parse_line, read_header
from parsers.clock import bucket_of, sglang_ts
from parsers.numbers import is_count
from parsers.prefix import SGLANG_HEADER_RE, sglang_tags
from parsers.shapes import LineShapes

from .flow import IDLE_SECONDS, Flow, Observer
from .scan import ScanResult, Spec, line_at, scan, scan_text
from .state import BATCH_GAUGES, DEFAULT_MAX_DP_RANKS, ServerState, SourceState

CHUNK_MIN = 32  # lists shorter than this are fed line by line (the scanner's set-up costs more)
RUN_MIN, BACKOFF_MAX = 16, 1024  # see Sampler._scan_loop
IDLE_SAMPLE_SECONDS = IDLE_SECONDS  # a source quiet this long (wall time) has its pending lines sampled
_G0 = itemgetter(0)
_BATCH_HEADS = ("Decode batch", "Prefill batch")

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
    parsed: ev.Line | None = None  # parsed lazily (commit), at most once
    attrs: frozenset[str] | None = None  # the BatchStats attributes the line carries, if known unparsed
    held: Held | None = None


@dataclass(slots=True)
class ServerSampling:
    """The sampler's part of one server (DP rank): its pending lines and their bucket."""

    dp: str
    pending: dict[str, Pending] = field(default_factory=dict)  # kind 'D'/'P' -> its newest line
    bucket: str | None = None  # the 10-s log-clock bucket of the pending lines


@dataclass(slots=True)
class SourceSampling:
    """The sampler's part of one source: learned line shapes, servers, when it was last fed."""

    shapes: LineShapes = field(default_factory=LineShapes)
    servers: dict[str, ServerSampling] = field(default_factory=dict)
    pending_count: int = 0  # nonzero while some server holds pending batch lines
    fed_at: float = 0.0  # time.monotonic() of the last line fed

    def server(self, dp: str) -> ServerSampling:
        sv = self.servers.get(dp)
        if sv is None:
            sv = self.servers[dp] = ServerSampling(dp)
        return sv


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


class Sampler:
    """Feeds lines into a :class:`~exporter.flow.Flow`, sampling the steady-state batch lines."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        flow.barrier = self._barrier
        self.sampling: dict[str, SourceSampling] = {}
        self._seq = 0

    # what readers of the state use, from the flow that holds it
    @property
    def sources(self) -> dict[str, SourceState]:
        return self.flow.sources

    @property
    def lock(self):
        return self.flow.lock

    @property
    def observers(self) -> list[Observer]:
        return self.flow.observers

    @property
    def engine(self) -> str | None:
        return self.flow.engine

    @property
    def max_dp_ranks(self) -> int:
        return self.flow.max_dp_ranks

    def source(self, name: str) -> SourceState:
        return self.flow.source(name)

    def _of(self, name: str) -> SourceSampling:
        ss = self.sampling.get(name)
        if ss is None:
            ss = self.sampling[name] = SourceSampling()
        return ss

    # ------------------------------------------------------------------------------------
    def feed(self, source: str, line: str) -> str:
        """Count and sample, or parse and apply, one line; return its outcome."""
        flow = self.flow
        src = flow.sources.get(source) or flow.source(source)
        ss = self.sampling.get(source) or self._of(source)
        ss.fed_at = time.monotonic()
        if flow._wrapped and flow.holds(source):
            out = flow.continuation(src, line)  # a wrapped message's next piece, or None
            if out is not None:
                return out
        if src.engine == ev.SGLANG and line[:1] == "[":
            out = self._feed_sglang_fast(src, ss, line)
            if out is not None:
                return out
        elif src.engine == ev.VLLM and _is_vllm_access(line):
            with flow.lock:
                src.lines[ev.IGNORED] += 1
            return ev.IGNORED
        if src.engine != ev.VLLM:
            h = read_header(line, src.engine, src.year)
            msg = h.msg
            if msg[:1] in "DP" and h.engine != ev.VLLM and (h.ts is not None or h.tod is None) and msg.startswith(_BATCH_HEADS):
                # a batch line in any other format (a logging config's header, JSON, logfmt, a
                # collector's prefix): its message checked by the learned shape, counted and sampled
                # like a default one without building its event (the samples are parsed when used)
                r = ss.shapes.check_batch(msg)
                if r is not None and type(r) is not ev.Unrecognized:
                    if src.engine is None:
                        src.engine = ev.SGLANG
                    ts = h.ts
                    bucket = bucket_of(ts) if ts is not None else None
                    return self._pend(src, ss, line, msg[0], ts, bucket, h.dp_rank, h.tp_rank, h.pp_rank, r[0], r[1], ss.shapes.checked, None)
            if "\n" not in msg:
                parsed = message_line(h, src.engine)
                if parsed.tod is not None:
                    parsed.ts = flow.on_date(src, parsed.tod)
            else:
                parsed = flow.parse(src, line)
        else:
            parsed = flow.parse(src, line)
        e = parsed.event
        if type(e) is ev.BatchStats and (e.kind == "decode" or e.kind == "prefill") and src.engine != ev.VLLM:
            # a batch line whose header kept only its time of day (a paste): sampled from its event,
            # dated by the flow
            return self._batch_parsed(src, ss, line, parsed)
        return flow.take(src, line, parsed)

    def feed_lines(self, source: str, lines: Iterable[str]) -> None:
        """Feed many lines in order; same result as ``feed`` on each, faster on busy SGLang logs."""
        if not isinstance(lines, list):
            lines = list(lines)
        src = self.flow.sources.get(source) or self.flow.source(source)
        ss = self._of(source)
        ss.fed_at = time.monotonic()
        feed = self.feed
        i = 0
        while src.engine is None and i < len(lines):  # auto-detect: the first lines tell the engine
            feed(source, lines[i])
            i += 1
        if src.engine == ev.SGLANG and len(lines) - i >= CHUNK_MIN:
            self._feed_scanned(src, ss, lines[i:] if i else lines)
            return
        for line in lines[i:] if i else lines:
            feed(source, line)

    def feed_text(self, source: str, text: str) -> None:
        """Feed a block of complete lines, each ending in ``\\n``: same result as ``feed_lines`` on
        its lines; on an SGLang source the scanner walks the block without splitting it."""
        src = self.flow.sources.get(source) or self.flow.source(source)
        ss = self._of(source)
        ss.fed_at = time.monotonic()
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
        self._scan_loop(src, ss, i, n, partial(scan_text, text), one, partial(line_at, text), lambda a, b: _split(text[a:b]))

    # ------------------------------------------------------------------------------------
    def _feed_sglang_fast(self, src: SourceState, ss: SourceSampling, line: str) -> str | None:
        """SGLang batch and uvicorn lines without building events; None = take the full path.

        A batch line of a shape seen before is validated and split by one ``fullmatch`` of its
        learned whole-line template; other shapes go through the header regex and the generic
        parser once, and are learned."""
        i = line.find("] ", 20)  # end of '[YYYY-MM-DD HH:MM:SS TAGS] '
        c = line[i + 2 : i + 3] if i > 0 else ""
        if c == "D" or c == "P":
            t = ss.shapes.current.get(c)
            m = t.line.fullmatch(line) if t is not None else None
            if m is not None:
                attrs = t.attrs
                g = m.groups()
                ymdhm, sec, ms, tags = g[0], g[1], g[2], g[3]
                new = cached = None
                if c == "P":
                    try:
                        new = int(g[t.line_new]) if t.line_new is not None else None
                        cached = int(g[t.line_cached]) if t.line_cached is not None else None
                        if not (is_count(new) and is_count(cached)):
                            m = None  # check_batch below makes it unrecognized
                    except ValueError:
                        m = None
            if m is None:
                h = SGLANG_HEADER_RE.match(line)
                if h is None or "\r" in line or "\x1b" in line:
                    return None
                r = ss.shapes.check_batch(line[h.end() :])
                if r is None:
                    return None
                if type(r) is ev.Unrecognized:
                    with self.flow.lock:
                        src.lines[ev.UNRECOGNIZED] += 1
                    return ev.UNRECOGNIZED
                ymdhm, sec, ms, tags = h.groups()
                new, cached = r
                attrs = None  # a shape not learned (yet): its fields are known once parsed
            return self._batch_line(src, ss, line, c, ymdhm, sec, ms, tags, new, cached, attrs)
        if c == "I" and line.startswith("INFO:", i + 2) and "\r" not in line and "\x1b" not in line:
            h = SGLANG_HEADER_RE.match(line)
            if h is None:
                return None
            ymdhm, sec, _, _ = h.groups()
            ts = sglang_ts(ymdhm, sec, None)
            with self.flow.lock:
                src.lines[ev.IGNORED] += 1
                if src.last_ts is None or ts > src.last_ts:
                    src.last_ts = ts
            return ev.IGNORED
        return None

    def _batch_line(
        self,
        src: SourceState,
        ss: SourceSampling,
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
        return self._pend(src, ss, line, c, ts, ymdhm + sec[0], dp, tp, pp, new, cached, attrs, None)

    def _batch_parsed(self, src: SourceState, ss: SourceSampling, line: str, parsed: ev.Line) -> str:
        """A batch line the generic parser read (a header other than SGLang's default): counted and
        made its server's pending line like the default one, with its Line kept (not parsed again).
        Its bucket is its time's (``parsers.clock.bucket_of``: the text a default header gives); a
        line without time stays in its server's current bucket."""
        e = parsed.event
        if src.engine is None:
            src.engine = parsed.engine
        ts = parsed.ts
        bucket = bucket_of(ts) if ts is not None else None
        c = "D" if e.kind == "decode" else "P"
        return self._pend(src, ss, line, c, ts, bucket, parsed.dp_rank, parsed.tp_rank, parsed.pp_rank, e.new_tokens, e.cached_tokens, None, parsed)

    def _pend(
        self,
        src: SourceState,
        ss: SourceSampling,
        line: str,
        c: str,
        ts: float | None,
        bucket: str | None,
        dp: str,
        tp: int | None,
        pp: int | None,
        new,
        cached,
        attrs: frozenset[str] | None,
        parsed: ev.Line | None,
    ) -> str:
        with self.flow.lock:
            src.lines[ev.PARSED] += 1
            if ts is not None and (src.last_ts is None or ts > src.last_ts):
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
            sv = ss.servers.get(dp) or ss.server(dp)
            if bucket is not None and bucket != sv.bucket:
                if sv.pending:
                    self._commit_server(src, ss, sv)  # the last bucket's lines become samples
                sv.bucket = bucket
            self._seq += 1
            pend = sv.pending.get(c)
            if pend is None:
                sv.pending[c] = Pending(self._seq, line, parsed, attrs)
                ss.pending_count = 1
            else:
                new_p = Pending(self._seq, line, parsed, attrs)
                if pend.attrs is None or attrs is None or not pend.attrs <= attrs:
                    new_p.held = self._displaced(src, ss, pend, new_p)
                else:
                    new_p.held = pend.held
                sv.pending[c] = new_p
        return ev.PARSED

    # ------------------------------------------------------------------------------------
    @staticmethod
    def _parsed(src: SourceState, ss: SourceSampling, p: Pending) -> ev.Line:
        if p.parsed is None:
            p.parsed = parse_line(p.raw, src.engine, src.year, ss.shapes)
        return p.parsed

    @classmethod
    def _carried(cls, src: SourceState, ss: SourceSampling, p: Pending) -> dict[str, float]:
        """The gauge fields line ``p`` carries (parsing it if not done yet)."""
        e = cls._parsed(src, ss, p).event
        if type(e) is not ev.BatchStats:
            return {}
        return {a: float(v) for a in _GAUGE_ATTRS if (v := getattr(e, a)) is not None}

    @classmethod
    def _displaced(cls, src: SourceState, ss: SourceSampling, old: Pending, new: Pending) -> Held | None:
        """What ``new``, replacing ``old`` as the pending line of its kind, must hold: the gauge
        fields ``old`` (or a line before it) carried that ``new`` does not. Lines of one learned
        shape carry the same fields, so this parses only where the shapes differ."""
        mine = new.attrs if new.attrs is not None else frozenset(cls._carried(src, ss, new))
        held = {a: sv for a, sv in old.held.items() if a not in mine} if old.held else {}
        for a, v in cls._carried(src, ss, old).items():
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

    def _commit_server(self, src: SourceState, ss: SourceSampling, sv: ServerSampling) -> None:
        """Send the server's pending lines (one per kind, in arrival order) through the flow (their
        counters were counted when they arrived); the fields they hold go to the gauges in their
        place in that order."""
        flow = self.flow
        for _, p in self._in_order(sv.pending.values()):
            if type(p) is tuple:
                src.servers[sv.dp].gauges[_GAUGE_ATTRS[p[0]]] = p[1]
                continue
            parsed = self._parsed(src, ss, p)
            if parsed.event is not None:
                flow.apply(src, parsed, p.raw, counted=True)
        sv.pending.clear()

    def _commit_all(self, src: SourceState, ss: SourceSampling) -> None:
        for sv in ss.servers.values():
            if sv.pending:
                self._commit_server(src, ss, sv)
        ss.pending_count = 0

    def _barrier(self, src: SourceState) -> None:
        """Called by the flow before it applies an event: older batch samples go first."""
        ss = self.sampling.get(src.name)
        if ss is not None and ss.pending_count:
            self._commit_all(src, ss)

    def _sample(self, src: SourceState, ss: SourceSampling, raw: str) -> None:
        parsed = parse_line(raw, src.engine, src.year, ss.shapes)
        if parsed.event is not None:
            self.flow.apply(src, parsed, raw, counted=True)

    # ------------------------------------------------------------------------------------
    def _feed_scanned(self, src: SourceState, ss: SourceSampling, lines: list[str]) -> None:
        """A list through the bulk scanner (positions are list indices)."""
        feed, name = self.feed, src.name

        def one(i: int) -> int:
            feed(name, lines[i])
            return i + 1

        self._scan_loop(src, ss, 0, len(lines), partial(scan, lines), one, lines.__getitem__, lambda a, b: lines[a:b])

    def _scan_loop(
        self,
        src: SourceState,
        ss: SourceSampling,
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
        wrapped, shapes = self.flow._wrapped, ss.shapes
        while i < n:
            sp = shapes.scan_spec()
            if sp is None or (wrapped and name in wrapped):  # shapes not learned yet; a held line
                i = one(i)
                continue
            r = scan_from(i, sp)
            stop = r[0]
            if stop > i and not self._apply_scan(src, ss, line, i, r):
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

    def _apply_scan(self, src: SourceState, ss: SourceSampling, line: Callable[[int], str], lo: int, r: ScanResult) -> bool:
        """Apply the run from ``lo`` to the scanner's stop from its aggregates; same state as
        feeding its lines one by one. ``line(i)`` is the line at index (or offset) ``i``. Returns
        False, having changed nothing, when the run must be fed line by line to keep its order:
        two ranks of one DP group in it, or ranks beyond --max-dp-ranks."""
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
        with self.flow.lock:
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
            speaking: dict[str, tuple[ServerState, ServerSampling]] = {}
            for tags, (dp, rank) in ranks.items():
                srv = src.servers.get(dp) or src.server(dp)
                if rank is None or srv.speaks(rank):
                    speaking[tags] = (srv, ss.server(dp))
            for (kind, tags), k in counts.items():
                s2 = speaking.get(tags)
                if s2 is not None:
                    s2[0].count_batches(kind == "D", k, new_sums.get(tags), cached_sums.get(tags))
            # each server's buckets in order of their first line; at a bucket change the lines of
            # the bucket before become samples, exactly as line by line
            begins: dict[str, dict[str, int]] = {}  # tags -> bucket -> its first batch line
            for (_, tags, bucket), i in first.items():
                if tags in speaking:
                    bb = begins.setdefault(tags, {})
                    if i < bb.get(bucket, hi):
                        bb[bucket] = i
            # the fields each kind's lines in the run carry (all of one learned shape)
            attrs = {k: ss.shapes.current[k].attrs for k in "DP"}
            # (line index, server, samples in order: lines, or (attribute, value) a gauge holds)
            actions: list[tuple[int, ServerState, list[str | tuple[str, float]]]] = []
            ends: dict[str, tuple[str, list[tuple[int, str]]]] = {}  # tags -> (last bucket, its last lines)
            for tags, bb in begins.items():
                srv, sv = speaking[tags]
                cur = sv.bucket
                for i, b in sorted((i, b) for b, i in bb.items()):
                    if b != cur:
                        actions.append((i, srv, self._bucket_lines(src, ss, sv, tags, cur, last, line, attrs)))
                        cur = b
                ends[tags] = (cur, sorted((last[(k, tags, cur)], k) for k in "DP" if (k, tags, cur) in last))
            actions.sort(key=_G0)
            for _, srv, samples in actions:
                for x in samples:
                    if type(x) is tuple:
                        srv.gauges[_GAUGE_ATTRS[x[0]]] = x[1]
                    else:
                        self._sample(src, ss, x)
            base = self._seq - lo
            for tags, (cur, tail) in ends.items():
                sv = speaking[tags][1]
                if cur != sv.bucket:
                    sv.pending.clear()
                    sv.bucket = cur
                for idx, kind in tail:
                    new_p = Pending(base + idx + 1, line(idx), None, attrs[kind])
                    old = sv.pending.get(kind)
                    if old is not None:
                        new_p.held = (
                            old.held if old.attrs is not None and old.attrs <= new_p.attrs else self._displaced(src, ss, old, new_p)
                        )
                    sv.pending[kind] = new_p
            self._seq = base + hi
            ss.pending_count = 1
        return True

    def _bucket_lines(
        self,
        src: SourceState,
        ss: SourceSampling,
        sv: ServerSampling,
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
        if bucket != sv.bucket or not sv.pending:  # the usual case: a bucket that began in this run
            return [line(i) for i in new]
        kept: list[Pending] = []
        for k, p in sv.pending.items():
            if (k, tags, bucket) not in last:
                kept.append(p)
            elif p.attrs is None or not p.attrs <= attrs[k]:  # replaced by a line of another shape
                held = self._displaced(src, ss, p, Pending(0, "", None, attrs[k]))
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

    # ------------------------------------------------------------------------------------
    def gauges_of(self, src: SourceState, srv: ServerState) -> dict[str, float]:
        """What a scrape shows for a server's runtime gauges: the committed ones, overlaid in log
        order with the pending lines and the fields they hold. Reads only: the pending lines are
        parsed for the view (a few lines per server and scrape) and nothing is stored."""
        g = dict(srv.gauges)
        ss = self.sampling.get(src.name)
        sv = ss.servers.get(srv.dp_rank) if ss is not None and ss.pending_count else None
        if sv is None or not sv.pending:
            return g
        for _, p in self._in_order(sv.pending.values()):
            if type(p) is tuple:
                g[_GAUGE_ATTRS[p[0]]] = p[1]
                continue
            e = (p.parsed or parse_line(p.raw, src.engine, src.year, ss.shapes)).event
            if type(e) is ev.BatchStats:
                for attr, name in BATCH_GAUGES:
                    v = getattr(e, attr)
                    if v is not None:
                        g[name] = float(v)
        return g

    def tick(self, now: float | None = None) -> None:
        """The ingest side's periodic call (``serve``: every second): a source that received nothing
        for ``IDLE_SAMPLE_SECONDS`` of wall time has its pending lines sampled. Any later line of
        a live log lies in a later 10-s bucket anyway, so this is what its arrival would do, only
        sooner (``replay`` does the same at the end of its input, :meth:`finish`)."""
        now = time.monotonic() if now is None else now
        self.flow.tick(now)
        with self.flow.lock:
            for name, ss in self.sampling.items():
                src = self.flow.sources.get(name)
                if src is not None and ss.pending_count and now - ss.fed_at >= IDLE_SAMPLE_SECONDS:
                    self._commit_all(src, ss)

    def finish(self) -> None:
        """Sample every pending line (end of the input: nothing more will come)."""
        with self.flow.lock:
            self.flow.finish()
            for name, ss in self.sampling.items():
                src = self.flow.sources.get(name)
                if src is not None:
                    self._commit_all(src, ss)

    def forget(self, source: str) -> None:
        """Drop what the sampler keeps of a source whose state is gone."""
        self.sampling.pop(source, None)


__all__ = ["IDLE_SAMPLE_SECONDS", "Pending", "Sampler", "SourceSampling"]
