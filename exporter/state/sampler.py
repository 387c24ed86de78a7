"""The sampler: the hot path of busy logs, in front of the pipeline's line path (:mod:`exporter.state.pipeline`).

Most of a busy SGLang log is ``Decode batch`` / ``Prefill batch`` and uvicorn lines. Each batch
line is validated and counted (counters and line outcomes are exact for every line), but its full
event is built only for the *samples*: per server and kind, the last batch line of each 10-second
bucket of the **log clock** (``YYYY-MM-DD HH:MM:S``). The newest line of each kind waits as
"pending" until a line of the next bucket arrives, another event does (the pipeline's barrier),
the ingest side's tick finds the source quiet, or the input ends. Buckets come from the log's own
timestamps, so ``replay`` and ``serve`` sample the same lines whatever the read chunking.

The sampler decides and keeps; it applies nothing. The lines it takes are counted by the source's
state (``SourceState.count_batch``, ``count_run``); the samples it makes go, in log order, on the
source's ``due`` list (:class:`SourceSampling`), which the pipeline applies (the state, then the
observers) before it takes the next line. Every call into it is made under the pipeline's lock.

Gauges do not depend on sampling: a scrape reads the committed gauges overlaid with the pending
lines (:meth:`Sampler.view`, which writes nothing). When a line of another shape replaces a
pending line (a field printed only sometimes, such as ``#replay-token`` or ``accept len``), the
gauge fields the replaced line carried and the new one lacks are held with their place in the
log (:attr:`Pending.held`): each gauge shows the last line, in log order, that carried its field.

For the steady state, :mod:`exporter.state.scan` (a C extension, or its pure-Python twin) walks runs of
batch lines of the learned shapes and uvicorn lines and returns per-run aggregates (counts, token
sums, first and last line of each bucket), which :meth:`Sampler.run` turns into the same state.
All paths give the same state (tests/pipeline/test_hot_path.py, tests/pipeline/test_gauges_exact.py).

What a source's batch lines look like is learned per source (:class:`parsers.shapes.LineShapes`
in :class:`SourceSampling`), so two servers of different releases keep their own shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import itemgetter

from parsers import events as ev
from parsers import message_line, parse_line
from parsers.clock import bucket_of, rfc3339_epoch, sglang_ts
from parsers.header import Stage
from parsers.header.prefix import SGLANG_HEADER_RE, sglang_tags
from parsers.numbers import MAX_COUNT
from parsers.shapes import LineShapes

from .scan import ScanResult
from .store import BATCH_GAUGES, DEFAULT_MAX_DP_RANKS, DP_RANK_LEN, NEVER, ServerState, Silence, SourceState

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
    # (ts, dp, tp, pp) of a line in SGLang's default header: its header read once, when it came (Sampler.parsed)
    head: tuple[float, str, int | None, int | None] | None = None


Sample = Pending | str | tuple[str, str, float] | Silence  # what SourceSampling.due holds


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
    stage: Stage = field(default_factory=Stage)  # the header stage: its envelope, learned templates
    servers: dict[str, ServerSampling] = field(default_factory=dict)
    pending_count: int = 0  # nonzero while some server holds pending batch lines
    fed_at: float = 0.0  # time.monotonic() of the last line fed
    # the samples made and not applied yet, in log order: pending lines, lines of a run,
    # (dp rank, gauge key, value) fields a sample holds, and a Silence after the samples it follows
    # (the pipeline applies them: Pipeline._play)
    due: list[Sample] = field(default_factory=list)

    def server(self, dp: str) -> ServerSampling:
        sv = self.servers.get(dp)
        if sv is None:
            sv = self.servers[dp] = ServerSampling(dp)
        return sv

    def scan_spec(self) -> tuple | None:
        """What the bulk scanner reads a run of this source's lines with: its current decode and
        prefill shapes, and the header templates of its envelope when it is not SGLang's default
        header (``exporter/state/scan.py``); None until both shapes are learned."""
        sp = self.shapes.scan_spec()
        if sp is None:
            return None
        envs = self.stage.scanner()
        return (*sp, envs) if envs else sp


def _is_vllm_access(line: str) -> bool:
    """``(APIServer pid=1) INFO:     127.0.0.1:40052 - "POST ..." 200 OK``: a uvicorn access line
    (no timestamp, nothing to parse), most of a busy vLLM log."""
    j = line.find(") INFO:     ", 0, 120)
    if j < 0:
        return False
    c = line[j + 12 : j + 13]
    return (c.isdigit() or c == "[") and ' - "' in line


class Sampler:
    """The pending lines and learned shapes of every source, and what a line makes of them."""

    def __init__(self) -> None:
        self.sampling: dict[str, SourceSampling] = {}
        self._seq = 0

    def of(self, name: str) -> SourceSampling:
        ss = self.sampling.get(name)
        if ss is None:
            ss = self.sampling[name] = SourceSampling()
        return ss

    def forget(self, source: str) -> None:
        """Drop what the sampler keeps of a source whose state is gone."""
        self.sampling.pop(source, None)

    # ------------------------------------------------------------------------------------
    def take(self, src: SourceState, ss: SourceSampling, line: str) -> str | ev.Line:
        """One line of ``src``: its outcome when the sampler took it (counted; a batch line is now
        pending, and the samples it closed are due), else the line parsed, for the pipeline."""
        if src.engine == ev.SGLANG and line[:1] == "[":
            out = self._sglang(src, ss, line)
            if out is not None:
                return out
        elif src.engine == ev.VLLM and _is_vllm_access(line):
            src.count(ev.IGNORED)
            return ev.IGNORED
        if src.engine != ev.VLLM:
            h = ss.stage.peel(line, src.engine, src.year)
            msg = h.msg
            if msg[:1] in "DP" and h.engine != ev.VLLM and (h.ts is not None or h.tod is None) and msg.startswith(_BATCH_HEADS):
                # a batch line in any other format (a logging config's header, JSON, logfmt, a
                # collector's prefix): its message checked by the learned shape, counted and sampled
                # like a default one without building its event (the samples are parsed when used)
                r = ss.shapes.check_batch(msg)
                if r is not None and type(r) is not ev.Unrecognized:
                    src.detect(ev.SGLANG)
                    ts = h.ts
                    bucket = h.bucket or (bucket_of(ts) if ts is not None else None)
                    return self._pend(
                        src, ss, line, msg[0], ts, bucket, h.dp_rank, h.tp_rank, h.pp_rank, r[0], r[1], ss.shapes.checked, None
                    )
            parsed = message_line(h, src.engine) if "\n" not in msg else parse_line(line, src.engine, src.year)
        else:
            parsed = parse_line(line, src.engine, src.year)
        if parsed.tod is not None:
            parsed.ts = src.on_date(parsed.tod)
        e = parsed.event
        if type(e) is ev.BatchStats and (e.kind == "decode" or e.kind == "prefill") and src.engine != ev.VLLM:
            # a batch line whose header kept only its time of day (a paste): sampled from its event
            return self._batch_parsed(src, ss, line, parsed)
        return parsed

    def _sglang(self, src: SourceState, ss: SourceSampling, line: str) -> str | None:
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
                        # int() results: their range is the whole check (parsers.numbers.is_count)
                        if not ((new is None or 0 <= new <= MAX_COUNT) and (cached is None or 0 <= cached <= MAX_COUNT)):
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
                    src.count(ev.UNRECOGNIZED)
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
            if ts > src.quiet_until:
                self.hush(src, ss)
            src.count(ev.IGNORED, 1, None, ts)
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
        return self._pend(src, ss, line, c, ts, ymdhm + sec[0], dp, tp, pp, new, cached, attrs, None, (ts, dp, tp, pp))

    def _batch_parsed(self, src: SourceState, ss: SourceSampling, line: str, parsed: ev.Line) -> str:
        """A batch line the generic parser read (a header other than SGLang's default): counted and
        made its server's pending line like the default one, with its Line kept (not parsed again).
        Its bucket is its time's (``parsers.clock.bucket_of``: the text a default header gives); a
        line without time stays in its server's current bucket."""
        e = parsed.event
        src.detect(parsed.engine)
        ts = parsed.ts
        bucket = bucket_of(ts) if ts is not None else None
        c = "D" if e.kind == "decode" else "P"
        return self._pend(
            src, ss, line, c, ts, bucket, parsed.dp_rank, parsed.tp_rank, parsed.pp_rank, e.new_tokens, e.cached_tokens, None, parsed
        )

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
        head: tuple[float, str, int | None, int | None] | None = None,
    ) -> str:
        if ts is not None and ts > src.quiet_until:
            self.hush(src, ss)
        srv = src.count_batch(c == "D", ts, dp, tp, pp, new, cached)
        if srv is None:  # a DP rank beyond the limit, a TP rank that does not speak: counted only
            return ev.PARSED
        sv = ss.servers.get(dp) or ss.server(dp)
        if bucket is not None and bucket != sv.bucket:
            if sv.pending:
                self._close(ss, sv)  # the last bucket's lines become samples
            sv.bucket = bucket
        self._seq += 1
        pend = sv.pending.get(c)
        if pend is None:
            sv.pending[c] = Pending(self._seq, line, parsed, attrs, None, head)
            ss.pending_count = 1
        else:
            new_p = Pending(self._seq, line, parsed, attrs, None, head)
            if pend.attrs is None or attrs is None or not pend.attrs <= attrs:
                new_p.held = self._displaced(src, ss, pend, new_p)
            else:
                new_p.held = pend.held
            sv.pending[c] = new_p
        return ev.PARSED

    # ------------------------------------------------------------------------------------
    @staticmethod
    def parsed(src: SourceState, ss: SourceSampling, x: Pending | str) -> ev.Line:
        """A sample's line parsed (a pending line at most once; a line of a run), by the source's shapes; a line
        whose header was read when it came is not read again."""
        if type(x) is str:
            return parse_line(x, src.engine, src.year, ss.shapes, ss.stage)
        p = x.parsed
        if p is None:
            h = x.head
            if h is not None:
                p = ss.shapes.batch_read(x.raw, *h)
            if p is None:
                p = parse_line(x.raw, src.engine, src.year, ss.shapes, ss.stage)
            x.parsed = p
        return p

    @classmethod
    def _carried(cls, src: SourceState, ss: SourceSampling, p: Pending) -> dict[str, float]:
        """The gauge fields line ``p`` carries (parsing it if not done yet)."""
        e = cls.parsed(src, ss, p).event
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

    def _close(self, ss: SourceSampling, sv: ServerSampling) -> None:
        """The server's pending lines become samples, due in arrival order; the fields they hold go
        to the gauges in their place in that order (their lines were counted when they arrived)."""
        due = ss.due
        for _, p in self._in_order(sv.pending.values()):
            due.append((sv.dp, _GAUGE_ATTRS[p[0]], p[1]) if type(p) is tuple else p)
        sv.pending.clear()

    def commit(self, ss: SourceSampling) -> None:
        """Every pending line of the source becomes a due sample: the pipeline's barrier (an event
        comes, and the samples are older), a quiet source, the end of the input."""
        for sv in ss.servers.values():
            if sv.pending:
                self._close(ss, sv)
        ss.pending_count = 0

    def hush(self, src: SourceState, ss: SourceSampling, basis: str = "log") -> None:
        """The source's batch lines stopped longer than its quiet_seconds ago (docs/rules.md#silence): its
        pending lines are due (every one is the last of its bucket: no later batch line can fall in it), then
        a :class:`Silence` as of its newest batch line, which the pipeline applies after them. ``log``: a line
        showed it (called before that line is counted), so the source looks no more until its next batch
        line; ``wall``: serve's tick, and a line that later shows the same gap still gives the log's basis."""
        self.commit(ss)
        ss.due.append(Silence(src.batch_ts, basis))  # type: ignore[arg-type]
        if basis == "log":
            src.quiet_until = NEVER

    @staticmethod
    def _may_hush(src: SourceState, r: ScanResult, top_ts: float | None) -> bool:
        """Whether a line of the run may show a silence (conservatively, from its 10-s buckets: the line path,
        line by line, then decides exactly). The gap between two batch lines is under the later bucket's end
        minus the earlier bucket's start, which busy logs keep to 20 s; lines in log order. ``top_ts``: the
        time of the run's newest line (its header's, or its envelope's: ``Sampler.run``)."""
        q = src.quiet_seconds
        if q == NEVER or top_ts is None:
            return False
        lo = src.batch_ts if src.quiet_until != NEVER else None  # the newest batch line's time (a lower bound)
        for b in sorted({k[2] for k in r.first}):
            t = sglang_ts(b[:-1], b[-1] + "0", None)
            if lo is not None and t + 10.0 - lo > q:
                return True
            if lo is None or t > lo:
                lo = t
        return lo is not None and top_ts - lo > q

    # ------------------------------------------------------------------------------------
    def run(self, src: SourceState, ss: SourceSampling, line: Callable[[int], str], lo: int, r: ScanResult, peeled: bool = False) -> bool:
        """Take the run from ``lo`` to the scanner's stop from its aggregates: counted, its samples
        due, its last lines pending; the same state as taking its lines one by one. ``line(i)`` is
        the line at index (or offset) ``i``; ``peeled``: the scanner read the lines with the header
        templates of the source's stage (:func:`_peeled_run`). Returns False, having changed
        nothing, when the run must be fed line by line to keep its order: two ranks of one DP group
        in it, or ranks beyond --max-dp-ranks."""
        decoded: dict[str, tuple[str, int | None, int | None]] = {}
        if peeled:
            got = _peeled_run(ss.stage, r, line)
            if got is None:
                return False
            r, decoded, top_ts = got
        else:
            top_ts = sglang_ts(*r.top) if r.top is not None else None
        hi, counts, first, last = r.stop, r.counts, r.first, r.last
        if self._may_hush(src, r, top_ts):
            return False  # line by line: the silence falls between two of its lines
        ranks: dict[str, tuple[str, tuple[int, int] | None]] = {}
        dps: dict[str, tuple[int, int] | None] = {}
        for _, tags in counts:
            if tags not in ranks:
                dp, tp, pp = decoded[tags] if peeled else sglang_tags(tags) if tags else ("0", None, None)
                rank = None if tp is None and pp is None else (pp or 0, tp or 0)
                if dp in dps and dps[dp] != rank:
                    return False
                dps[dp] = rank
                ranks[tags] = (dp, rank)
        unknown = sum(1 for dp in dps if dp not in src.servers)
        if unknown and (
            len(src.servers) + unknown > (src.max_dp_ranks or DEFAULT_MAX_DP_RANKS) or any(len(dp) > DP_RANK_LEN for dp in dps)
        ):
            return False  # line by line: the lines of ranks beyond the limit (or the label's bound) are counted and dropped
        n_batch = sum(counts.values())
        newest = None
        if n_batch:  # the newest batch line's time (the silence rule's clock)
            raw = line(max(last.values()))
            if peeled:
                newest = ss.stage.read(raw, ev.SGLANG, src.year).ts
            else:
                h = SGLANG_HEADER_RE.match(raw)
                newest = sglang_ts(h[1], h[2], h[3]) if h is not None else None
        src.count_run(n_batch, r.info, top_ts, newest)
        if n_batch:
            speaking: dict[str, tuple[ServerState, ServerSampling]] = {}
            for tags, (dp, rank) in ranks.items():
                srv = src.servers.get(dp) or src.server(dp)
                if rank is None or srv.speaks(rank):
                    speaking[tags] = (srv, ss.server(dp))
            for (kind, tags), k in counts.items():
                s2 = speaking.get(tags)
                if s2 is not None:
                    s2[0].count_batches(kind == "D", k, r.new_sums.get(tags), r.cached_sums.get(tags))
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
            due = ss.due
            for _, srv, samples in actions:
                for x in samples:
                    due.append((srv.dp_rank, _GAUGE_ATTRS[x[0]], x[1]) if type(x) is tuple else x)
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
    def view(self, src: SourceState, srv: ServerState) -> dict[str, float]:
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
            e = (p.parsed or parse_line(p.raw, src.engine, src.year, ss.shapes, ss.stage)).event
            if type(e) is ev.BatchStats:
                for attr, name in BATCH_GAUGES:
                    v = getattr(e, attr)
                    if v is not None:
                        g[name] = float(v)
        return g


def _peeled_run(stage: Stage, r: ScanResult, line: Callable[[int], str]) -> tuple[ScanResult, dict, float | None] | None:
    """A run the scanner read with the stage's header templates, in the terms of a default run: its
    groups keyed by one tags text per (dp, tp, pp) (two templates, or two spellings, of one rank
    are one server), its buckets the configured zone's when the times carry a zone, and the time of
    its newest line. Returns (the run, tags -> (dp, tp, pp), that time)."""
    try:
        return _peeled(stage, r, line)
    except (ValueError, OverflowError):
        return None  # a time the clock cannot read (month 38): the line path decides those lines


def _peeled(stage: Stage, r: ScanResult, line: Callable[[int], str]) -> tuple[ScanResult, dict, float | None]:
    where: dict[str, int] = {}
    for (_, tags, _), i in r.first.items():
        where.setdefault(tags, i)
    canon: dict[str, str] = {}
    decoded: dict[str, tuple[str, int | None, int | None]] = {}
    by_rank: dict[tuple, str] = {}
    for tags, i in where.items():
        rk = stage.scan_ranks(tags, line(i))
        c = canon[tags] = by_rank.setdefault(rk, tags)
        decoded[c] = rk
    zone = stage.scan_zone()
    buckets = stage.scan_buckets  # kept from run to run: a run's buckets are mostly the last run's

    def bucket(b: str) -> str:
        if not zone:
            return b
        v = buckets.get(b)
        if v is None:
            if len(buckets) > 1024:  # a run holds a few hundred buckets
                buckets.clear()
            z = zone if zone == "Z" or ":" in zone else zone[:3] + ":" + zone[3:]
            v = buckets[b] = bucket_of(rfc3339_epoch(f"{b[:10]}T{b[11:16]}:{b[16]}0{z}"))
        return v

    same_buckets = not zone
    if zone and r.first:
        # the zone written is the configured one's offset at both ends of the run (UTC logs read
        # in UTC): every bucket between is its own text (a run spans minutes, not a change of zone)
        lo, hi = min(b for _, _, b in r.first), max(b for _, _, b in r.first)
        same_buckets = bucket(lo) == lo and bucket(hi) == hi
    if same_buckets and all(c == t for t, c in canon.items()):
        return r, decoded, stage.top_ts(r.top) if r.top is not None else None  # the usual run: its groups as they are

    counts: dict[tuple[str, str], int] = {}
    for (k, t), n in r.counts.items():
        key = (k, canon[t])
        counts[key] = counts.get(key, 0) + n
    sums = []
    for d in (r.new_sums, r.cached_sums):
        out: dict[str, int] = {}
        for t, v in d.items():
            out[canon[t]] = out.get(canon[t], 0) + v
        sums.append(out)
    first: dict[tuple[str, str, str], int] = {}
    last: dict[tuple[str, str, str], int] = {}
    for (k, t, b), i in r.first.items():
        key = (k, canon[t], bucket(b))
        if key not in first or i < first[key]:
            first[key] = i
    for (k, t, b), i in r.last.items():
        key = (k, canon[t], bucket(b))
        if key not in last or i > last[key]:
            last[key] = i
    top_ts = stage.top_ts(r.top) if r.top is not None else None
    return r._replace(counts=counts, new_sums=sums[0], cached_sums=sums[1], first=first, last=last), decoded, top_ts


__all__ = ["Pending", "Sample", "Sampler", "SourceSampling"]
