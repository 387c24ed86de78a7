"""The pipeline: lines -> parsers -> per-source state -> observers (the rules), in log order.

:class:`Pipeline` is what ``replay``, ``serve`` and ``report`` feed, one object made of three
parts that each decide and keep, and call nothing back:

* the state of every source (:class:`~exporter.state.store.SourceState`, the one writer of what is
  counted, the log clock and the generation of the facts);
* the sampler (:mod:`exporter.state.sampler`: the hot path of busy SGLang logs, the 10-s sample buckets,
  the pending lines, the learned line shapes), which counts the lines it takes in the state and
  hands back the samples it makes;
* the held wrapped lines (:mod:`exporter.state.wrapped`: a message a terminal wrapped, joined back).

The pipeline routes each line through them and applies what they hand back: an event is applied
to the state and given to the observers; before it, the samples the sampler holds for that source
go (the barrier: they are older), so the observers see one log order. All three commands reach
the same state from the same lines, and a scrape only reads it (:meth:`gauges_of`; the rules run
on the ingest side, never in a scrape).

Observers are passed in by whoever builds the pipeline (``exporter/app.py``) and run in that
order after every applied event. Thread-safety: tailer threads feed while the HTTP thread reads,
both under ``Pipeline.lock``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable
from functools import partial

from parsers import events as ev
from parsers import parse_line, read_header
from parsers.cuts import cut_short, ends_whole

from ..reading.lines import Fragment
from .sampler import Sampler, SourceSampling
from .scan import ScanResult, Spec, line_at, result, scan, scan_text
from .store import DEFAULT_MAX_DP_RANKS, NEVER, QUIET_SECONDS, ServerState, Silence, SourceState
from .wrapped import IDLE_SECONDS, WRAP_NEVER, Wraps

# observers called after each applied event: (source_state, server_state, parsed line, raw line)
Observer = Callable[[SourceState, ServerState, ev.Line, str], None]

CHUNK_MIN = 32  # lists shorter than this are fed line by line (the scanner's set-up costs more)
RUN_MIN, BACKOFF_MAX = 16, 1024  # see Pipeline._scan_loop
IDLE_SAMPLE_SECONDS = IDLE_SECONDS  # a source quiet this long (wall time) has its pending lines sampled


def _split(block: str) -> list[str]:
    """The lines of a block whose lines end in ``\\n`` (the last one may lack it)."""
    if not block:
        return []
    return block[:-1].split("\n") if block.endswith("\n") else block.split("\n")


class Pipeline:
    """Every source's state, and the path of a line into it (see the module doc)."""

    def __init__(
        self,
        engine: str | None = None,
        observers: Iterable[Observer] = (),
        max_dp_ranks: int = DEFAULT_MAX_DP_RANKS,
        quiet_seconds: float = QUIET_SECONDS,
    ) -> None:
        self.engine = engine  # forced engine for every source, or None = auto-detect per source
        self.max_dp_ranks = max_dp_ranks  # per source (--max-dp-ranks, SourceState.admits)
        # how long a serving SGLang source may go without a batch line (the rules' quiet_seconds; 0: no limit)
        self.quiet_seconds = quiet_seconds if quiet_seconds > 0 else NEVER
        self.observers: list[Observer] = list(observers)
        self.sources: dict[str, SourceState] = {}
        self.lock = threading.RLock()
        self.sampler = Sampler()
        self.wraps = Wraps()
        self.began = time.monotonic()

    def source(self, name: str) -> SourceState:
        """The state of source ``name``, created on first use (so it is listed before any line)."""
        with self.lock:
            s = self.sources.get(name)
            if s is None:
                s = self.sources[name] = SourceState(
                    name, engine=self.engine, max_dp_ranks=self.max_dp_ranks, quiet_seconds=self.quiet_seconds
                )
            return s

    def _sampling(self, name: str) -> SourceSampling:
        """The sampler's part of source ``name``, created under the lock (the ingest tick walks the
        sampler's sources from its own thread)."""
        with self.lock:
            return self.sampler.of(name)

    def forget(self, source: str) -> None:
        """Drop a source (its state, its series, what the sampler and the wraps hold of it)."""
        with self.lock:
            self.sources.pop(source, None)
            self.sampler.forget(source)
            self.wraps.forget(source)

    # ------------------------------------------------------------------------------------
    # the line path

    def feed(self, source: str, line: str) -> str:
        """Take one line: counted and sampled, or parsed and applied; returns its outcome."""
        src = self.sources.get(source) or self.source(source)
        ss = self.sampler.sampling.get(source) or self._sampling(source)
        ss.fed_at = time.monotonic()
        with self.lock:
            if type(line) is Fragment:
                return self._fragment(src, ss, line)
            if self.wraps.held and source in self.wraps.held:
                out = self._piece(src, ss, line)  # a wrapped message's next piece, or None
                if out is not None:
                    return out
            r = self.sampler.take(src, ss, line)
            if type(r) is str:  # taken by the sampler
                if ss.due:
                    self._play(src, ss)
                return r
            return self._take(src, ss, line, r)

    def _take(self, src: SourceState, ss: SourceSampling, line: str, parsed: ev.Line) -> str:
        """A parsed line: its event applied (or the line counted), or held when it is provably cut
        (:mod:`exporter.state.wrapped`, rule 1)."""
        self._silent_before(src, ss, parsed.ts)
        if parsed.event is None:
            if not self.wraps.hold(src, line, parsed):
                src.count(parsed.outcome, 1, parsed.engine, parsed.ts)
            return parsed.outcome
        if not isinstance(parsed.event, WRAP_NEVER):
            now = self.wraps.hold_parsed(src, line, parsed)  # what it says for sure (rule 2)
            if now is None:
                return parsed.outcome
            parsed = now
        self._apply(src, ss, parsed, line)
        return parsed.outcome

    def _silent_before(self, src: SourceState, ss: SourceSampling, ts: float | None) -> None:
        """A line at ``ts`` more than quiet_seconds after the source's newest batch line: the silence goes first,
        after the samples it follows (docs/rules.md#silence); the sampler looks itself at the lines it takes."""
        if ts is not None and ts > src.quiet_until:
            self.sampler.hush(src, ss)
            self._play(src, ss)

    def _fragment(self, src: SourceState, ss: SourceSampling, line: str) -> str:
        """A line without its newline (:class:`~exporter.reading.lines.Fragment`: the end of a finished input,
        or a writer's line a truncation ended): read like any line when its message is whole (an
        SGLang batch line of the source's learned shape, every field there; else
        :func:`parsers.cuts.ends_whole`), else counted unread: ``unrecognized`` when it begins a
        known message, ``ignored`` when not."""
        self.wraps.drop(src)  # (it ends what was held: nothing follows it)
        parsed = parse_line(line, src.engine, src.year)
        if parsed.tod is not None:
            parsed.ts = src.on_date(parsed.tod)
        msg = read_header(line, src.engine, src.year).msg
        e = parsed.event
        if e is not None and (ss.shapes.whole(msg) if type(e) is ev.BatchStats and e.kind in ("decode", "prefill") else ends_whole(msg, e)):
            r = self.sampler.take(src, ss, line)  # the usual path
            if type(r) is str:
                if ss.due:
                    self._play(src, ss)
                return r
            return self._take(src, ss, line, r)
        known = parsed.outcome != ev.IGNORED or cut_short(msg, parsed.engine or src.engine, True)
        outcome = ev.UNRECOGNIZED if known else ev.IGNORED
        self._silent_before(src, ss, parsed.ts)
        src.count(outcome, 1, parsed.engine if known else None, parsed.ts)
        return outcome

    def _piece(self, src: SourceState, ss: SourceSampling, line: str) -> str | None:
        """``line`` after a held line: taken as its piece (the outcome), or None (the usual path)."""
        r = self.wraps.piece(src, line)
        if r is None or type(r) is str:
            return r
        # what the pieces say together; they span the lines from the held one to this one (a first
        # line that parsed alone was counted already, and other writers' lines between too)
        self._apply(src, ss, r.line, r.text, r.n, r.span)
        return ev.PARSED

    def _apply(self, src: SourceState, ss: SourceSampling, parsed: ev.Line, raw: str, n: int = 1, span: int = 0) -> None:
        """Apply one event read from ``n`` lines (spanning ``span``, when more), after the samples
        the sampler holds (the barrier: they are older), and hand it to the observers."""
        if ss.pending_count:
            self.sampler.commit(ss)
            self._play(src, ss)
        srv = src.apply(parsed, n, span, raw)
        if srv is not None and self.observers:
            for obs in self.observers:
                obs(src, srv, parsed, raw)

    def _play(self, src: SourceState, ss: SourceSampling) -> None:
        """Apply the samples due, in their order: each folded into the state (its line was counted
        when it arrived) and handed to the observers; the gauge fields a sample holds set."""
        due, ss.due = ss.due, []
        parsed_of, observers = self.sampler.parsed, self.observers
        for x in due:
            if type(x) is tuple:
                src.hold_gauge(*x)
                continue
            if type(x) is Silence:
                self._silence(src, x)
                continue
            parsed = parsed_of(src, ss, x)
            if parsed.event is not None:
                raw = x if type(x) is str else x.raw
                srv = src.sample(parsed, raw)
                if srv is not None and observers:
                    for obs in observers:
                        obs(src, srv, parsed, raw)

    def _silence(self, src: SourceState, x: Silence) -> None:
        """A serving source whose batch lines stopped goes idle (:meth:`SourceState.silence`), and every server's
        observers are told, as of its last batch line (the rules end the findings the way an idle sample does).
        No line is counted: a silence is the absence of one."""
        if not src.silence(x) or not self.observers:
            return
        line = ev.Line(ev.PARSED, src.engine, x.since, event=x)
        for srv in list(src.servers.values()):
            line.dp_rank = srv.dp_rank
            for obs in self.observers:
                obs(src, srv, line, "")

    # ------------------------------------------------------------------------------------
    # many lines: the bulk scanner on the steady state

    def feed_lines(self, source: str, lines: Iterable[str]) -> None:
        """Feed many lines in order; same result as ``feed`` on each, faster on busy SGLang logs."""
        if not isinstance(lines, list):
            lines = list(lines)
        if lines and type(lines[-1]) is Fragment:  # a reader's flush: never through the bulk scanner
            self._feed_lines(source, lines[:-1])
            self.feed(source, lines[-1])
            return
        self._feed_lines(source, lines)

    def _feed_lines(self, source: str, lines: list[str]) -> None:
        src = self.sources.get(source) or self.source(source)
        ss = self.sampler.sampling.get(source) or self._sampling(source)
        ss.fed_at = time.monotonic()
        feed = self.feed
        i = 0
        while src.engine is None and i < len(lines):  # auto-detect: the first lines tell the engine
            feed(source, lines[i])
            i += 1
        if src.engine == ev.SGLANG and len(lines) - i >= CHUNK_MIN:
            rest = lines[i:] if i else lines

            def one(k: int) -> int:
                feed(source, rest[k])
                return k + 1

            self._scan_loop(src, ss, 0, len(rest), partial(scan, rest), one, rest.__getitem__, lambda a, b: rest[a:b])
            return
        for line in lines[i:] if i else lines:
            feed(source, line)

    def feed_text(self, source: str, text: str) -> None:
        """Feed a block of complete lines, each ending in ``\\n``: same result as ``feed_lines`` on
        its lines; on an SGLang source the scanner walks the block without splitting it."""
        src = self.sources.get(source) or self.source(source)
        ss = self.sampler.sampling.get(source) or self._sampling(source)
        ss.fed_at = time.monotonic()
        feed = self.feed
        n = len(text)

        def one(at: int) -> int:
            """Feed the line at offset ``at`` down the line path; the offset of the next line."""
            line = line_at(text, at)
            feed(source, line)
            return at + len(line) + 1

        i = 0
        while src.engine is None and i < n:  # auto-detect: the first lines tell the engine
            i = one(i)
        if src.engine != ev.SGLANG or n - i < CHUNK_MIN * 128:
            self.feed_lines(source, _split(text[i:] if i else text))
            return
        self._scan_loop(src, ss, i, n, partial(scan_text, text), one, partial(line_at, text), lambda a, b: _split(text[a:b]))

    def _scan_loop(
        self,
        src: SourceState,
        ss: SourceSampling,
        i: int,
        n: int,
        scan_from: Callable[[int, Spec], tuple],
        one: Callable[[int], int],
        line: Callable[[int], str],
        between: Callable[[int, int], list[str]],
    ) -> None:
        """Feed positions ``i`` to ``n`` of a list (indices) or a block (offsets) through the bulk
        scanner: runs of steady-state lines are taken from the scanner's aggregates
        (:meth:`Sampler.run`), the line that ends a run goes down the line path (``one`` feeds the
        line at a position and returns the next position).

        Where runs stay short (a log that mixes other lines in between the batch lines), the
        scanner's per-run cost exceeds what it saves: after a run of fewer than ``RUN_MIN`` lines
        the next lines take the line path, ``RUN_MIN`` at first and twice as many after every
        further short run (at most ``BACKOFF_MAX``). Both paths give the same state."""
        feed, name = self.feed, src.name
        backoff = 0
        held, run = self.wraps.held, self.sampler.run
        while i < n:
            sp = ss.scan_spec()
            if sp is None or (held and name in held):  # shapes not learned yet; a held line
                i = one(i)
                continue
            r: ScanResult = result(scan_from(i, sp))
            stop = r.stop
            if stop > i:
                with self.lock:
                    took = run(src, ss, line, i, r, len(sp) == 3)
                    if took and ss.due:
                        self._play(src, ss)
                if not took:
                    for ln in between(i, stop):
                        feed(name, ln)
            if stop >= n:
                return
            i = one(stop)
            if r.info + sum(r.counts.values()) < RUN_MIN:  # lines in the run: uvicorn + batch
                backoff = min(max(2 * backoff, RUN_MIN), BACKOFF_MAX)
                for _ in range(backoff):
                    if i >= n:
                        return
                    i = one(i)
            else:
                backoff = 0

    # ------------------------------------------------------------------------------------
    # the ingest side's clock, the end of input, the read side

    def tick(self, now: float | None = None, caught_up: Callable[[], Collection[str]] | None = None) -> None:
        """The ingest side's periodic call (``serve``: every second): a source that received nothing
        for ``IDLE_SAMPLE_SECONDS`` of wall time has its pending lines sampled, and a held line of
        one quiet for ``IDLE_SECONDS`` gets no continuation any more. Any later line of a live log
        lies in a later 10-s bucket anyway, so this is what its arrival would do, only sooner
        (``replay`` does the same at the end of its input, :meth:`finish`).

        With ``caught_up`` (serve: the sources every byte of whose files was read), a serving SGLang source
        that received nothing for its ``quiet_seconds`` of wall time goes idle as of its last batch line, its
        basis ``wall_clock``: the one decision not taken on log time (docs/rules.md#silence), which a later
        line showing the same gap confirms as the log's. ``caught_up`` is asked only when some source is that
        quiet, and outside the lock (it looks at every tailer: ~60 ms on a node of 10,000 files, while the
        tailers would wait); a source that received a line in the meantime is no longer quiet and stays."""
        now = time.monotonic() if now is None else now
        with self.lock:
            if self.wraps.held:
                self.wraps.quiet(self.sources, now)
            for name, ss in self.sampler.sampling.items():
                src = self.sources.get(name)
                if src is not None and ss.pending_count and now - ss.fed_at >= IDLE_SAMPLE_SECONDS:
                    self.sampler.commit(ss)
                    self._play(src, ss)
            if caught_up is None:
                return
            quiet = {name: self._quiet_since(src, now) for name, src in self.sources.items()}
            quiet = {name: since for name, since in quiet.items() if since is not None}
        if not quiet:
            return
        read = caught_up()
        with self.lock:
            for name, since in quiet.items():
                src = self.sources.get(name)
                if name in read and src is not None and self._quiet_since(src, now) == since:
                    ss = self.sampler.sampling.get(name) or self._sampling(name)
                    self.sampler.hush(src, ss, "wall")
                    self._play(src, ss)

    def _quiet_since(self, src: SourceState, now: float) -> float | None:
        """For a serving source that received nothing for its ``quiet_seconds`` of wall time: since when (its last
        line fed, or this pipeline's start for a state restored at start); else None."""
        if src.batch_ts is None or src.life != "serving":
            return None
        got = self.sampler.sampling.get(src.name)
        since = max(got.fed_at if got is not None else 0.0, self.began)
        return since if now - since >= src.quiet_seconds else None

    def finish(self) -> None:
        """End of input: held lines are counted as they were, and every pending line is sampled."""
        with self.lock:
            self.wraps.finish(self.sources)
            for name, ss in self.sampler.sampling.items():
                src = self.sources.get(name)
                if src is not None:
                    self.sampler.commit(ss)
                    self._play(src, ss)

    def format_changes(self) -> dict[str, int]:
        """Per source, the times its header stage decided the format again (``serve``'s self-metric)."""
        with self.lock:
            return {name: ss.stage.changes for name, ss in self.sampler.sampling.items()}

    def gauges_of(self, src: SourceState, srv: ServerState) -> dict[str, float]:
        """What a scrape shows for a server's runtime gauges: the committed ones overlaid with the
        sampler's pending lines (:meth:`Sampler.view`; writes nothing)."""
        return self.sampler.view(src, srv)


__all__ = ["IDLE_SAMPLE_SECONDS", "Observer", "Pipeline"]
