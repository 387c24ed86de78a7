"""Messages a writer cut (or a terminal wrapped) onto header-less lines, joined back on proof.

A paste of a log, or a writer that flushed half a line, puts the rest of a message on lines
without a header; between them other writers' lines may stand (progress bars, warnings, NCCL,
``print()``). A line is joined with another only on proof that the first is cut and that the
other is its rest (docs/formats/README.md#lines-as-users-paste-them). :class:`Wraps` decides and
keeps; it applies nothing: what it joins is handed to the pipeline (:class:`Join`: the event, its
text, the lines it was read from), which applies it like any line; the lines it ends holding are
counted by the source's state.

The rules, numbered as the tests cite them (tests/pipeline/test_wrapped.py):

1. A line is held only when it is provably incomplete (``parsers/cuts.py``):
   a. it carries no event and its message is a known message cut short: a proper prefix of one
      the engine's parser reads (``cut_short``; with a header or without, before the engine is
      known either engine's);
   b. it parsed, and its text is provably cut (``whole_part``): it ends at a separator, a
      configuration dump's brackets or quotes are open, the scheduler summary has no
      ``context_len`` yet.
   A message that parses and is not provably cut is never held, so nothing is ever glued to it.
   Lines whose event is never extended (``WRAP_NEVER``: batch and stats lines, retractions,
   preemptions, pool exhaustion, readiness, the server's life, the version banner, a KV pool)
   are not held, nor a structured record, nor a line whose message is not its last text.
2. A line held under 1b is applied at once, with what it says for sure: its text up to its last
   separator (a scrape sees it; a value the cut may have shortened is never applied). When that
   says nothing, the line is held like 1a.
3. A line continues the held one only when it has no header of its own, carries no event alone,
   and no other writer's shape explains it (``parsers/foreign.py``), and then:
   a. under 1a, the joined text (glued as it is, else with the one space a word wrap dropped)
      parses, or is still a proper prefix of a known message (the line is then one of its
      pieces);
   b. under 1b, it continues the text where it was cut (``continues``: after a separator a field,
      inside a token its rest) and the joined text parses to the same kind of event (after a cut
      inside a token: saying more than before).
4. A line with a header, or one that carries an event alone, ends the hold: the held line is
   counted as it was (1a: ``unrecognized``, a known message that could not be read; 1b: counted
   when applied) and the line takes the usual path.
5. Any other line (another writer's) is not a piece: it takes the usual path, and the line stays
   held (at most ``MAX_SKIPPED`` such lines), so such lines between a cut message and its rest
   change nothing.
6. A join that parses is applied like any line, its lines counted ``parsed``; while its text is
   still provably cut it stays held under 1b (rule 2 again), up to ``MAX_PIECES`` pieces.
7. The end of input, a source quiet for ``IDLE_SECONDS`` of wall time, or a bound: the held
   line and its pieces are counted as they were.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from parsers import events as ev
from parsers import has_header, parse_line
from parsers.cuts import continues, cut_short, whole_part
from parsers.foreign import foreign, is_warning
from parsers.header import read_header
from parsers.headers import VLLM_LEVELS

from .store import RUNTIME_EVENTS, SourceState

IDLE_SECONDS = 10.0  # a source quiet this long (wall time) is done with what it held
MAX_PIECES = 256  # pieces of one message (a configuration dump a terminal wrapped at 200 columns: ~100)
MAX_SKIPPED = 64  # other writers' lines while a message is held (rule 5)
MIN_CUT, MAX_CUT = 12, 96  # a message cut before its marker ended: 'Mamba Cache ' to a labelled pool's start
# rule 1: events never extended (runtime lines: most of a log; a second KV line is the SWA pool)
WRAP_NEVER = (*RUNTIME_EVENTS, ev.PoolExhausted, ev.ServerReady, ev.KVCacheAllocated, ev.Lifecycle, ev.ServerStarting)


@dataclass(slots=True)
class Wrapped:
    """A held line (rule 1) and the pieces joined to it so far."""

    text: str  # the held line and its pieces, joined
    head: int  # where the message starts in ``text`` (the header before it)
    engine: str | None
    ts: float | None
    fed_at: float  # time.monotonic() of its last line
    parsed: ev.Line | None = None  # 1b: the event of the whole text so far
    cut_in_token: bool = False  # 1b: the text ends inside a token (not at a separator)
    pending: list[str] = field(default_factory=list)  # outcomes of the held lines not counted yet, the first first
    span: int = 1  # the lines from the held one to the last taken (pieces and other writers' lines between)
    pieces: int = 0
    skipped: int = 0
    after_warning: bool = False  # the last skipped line was a Python warning (its source line follows)


class Join(NamedTuple):
    """Held pieces joined into one event: the pipeline applies ``line`` (read from ``text``) and
    counts ``n`` lines parsed; the message spans ``span`` lines, the last of them this one (what
    proves its facts starts at the first: exporter/state/provenance.py)."""

    line: ev.Line
    text: str
    n: int
    span: int = 1


_LEVELS = tuple(f"{level} " for level in VLLM_LEVELS.split("|"))  # a vLLM header without its process


def _starts_with_header(line: str) -> bool:
    """The common headers, told by a few string tests: SGLang's ``[2026-...``, vLLM's
    ``(Name pid=N) `` or ``LEVEL ``. False means: ask the parsers."""
    c = line[:1]
    if c == "[":
        return "0" <= line[1:2] <= "9"
    if c == "(":
        return " pid=" in line[:64]
    return line.startswith(_LEVELS)


def _says_more(new: object, old: object) -> bool:
    """A joined event says more than the text before the join: more keys (a dump, the summary)."""
    a = getattr(new, "args", None)
    if a is None:
        a = getattr(new, "values", None)
    b = getattr(old, "args", None)
    if b is None:
        b = getattr(old, "values", None)
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) > len(b) and b.keys() <= a.keys()
    return new != old


class Wraps:
    """The held line of each source, and what the next line makes of it."""

    def __init__(self) -> None:
        self.held: dict[str, Wrapped] = {}  # source -> its held line

    # ------------------------------------------------------------------------------------
    # rule 1: holding

    def hold(self, src: SourceState, line: str, parsed: ev.Line) -> bool:
        """A line without event (rule 1a): held when its message is a known message cut short;
        True when held (it is counted when the hold ends)."""
        if parsed.outcome == ev.IGNORED and (len(line) > MAX_CUT + 80 or "INFO:" in line[:80]):
            return False  # the usual ignored line (no marker yet is a short message): not read again
        raw = line.rstrip("\r\n")
        h = read_header(raw, src.engine, src.year)
        msg = h.msg
        if not raw.endswith(msg) or (parsed.outcome == ev.IGNORED and not MIN_CUT <= len(msg) <= MAX_CUT):
            return False
        eng = parsed.engine or src.engine
        words = parsed.outcome == ev.IGNORED  # no marker yet: cut inside the message's own words
        if not cut_short(msg, eng, words):
            return False
        if eng is None:
            eng = ev.SGLANG if cut_short(msg, ev.SGLANG, words) else ev.VLLM
        self.drop(src)  # (a line held before, which this one did not continue)
        self.held[src.name] = Wrapped(raw, len(raw) - len(msg), eng, parsed.ts, time.monotonic(), pending=[ev.UNRECOGNIZED])
        return True

    def hold_parsed(self, src: SourceState, line: str, parsed: ev.Line) -> ev.Line | None:
        """A line that parsed (rule 1b): the line to apply now. ``parsed`` itself when it is not
        provably cut (not held); else it is held and what it says for sure is returned (rule 2),
        None when that is nothing (held, applied and counted when joined or dropped)."""
        if isinstance(parsed.event, WRAP_NEVER):
            return parsed
        raw = line.rstrip("\r\n")
        msg = read_header(raw, src.engine, src.year).msg
        if not raw.endswith(msg):
            return parsed  # a structured record's message: never cut by a terminal
        k = whole_part(msg, parsed.event)
        if k is None:
            return parsed
        self.drop(src)
        w = Wrapped(raw, len(raw) - len(msg), parsed.engine or src.engine, parsed.ts, time.monotonic())
        self.held[src.name] = w
        got = self._settle(src, w, raw, parsed, ev.UNRECOGNIZED)
        if got is None:
            return None
        return got.line if isinstance(got, Join) else None

    # ------------------------------------------------------------------------------------
    # rules 3-6: the next line

    def piece(self, src: SourceState, line: str) -> Join | str | None:
        """``line`` after the held line of ``src``: a :class:`Join` when the joined text parses
        (rule 6); an outcome when ``line`` was taken as a piece (counted with the held line);
        None when it is not a piece (rules 4 and 5: it takes the usual path)."""
        w = self.held[src.name]
        p = line.rstrip("\r\n")
        w.span += 1  # (taken as a piece or passed over: rule 4 ends the hold before it)
        if not p.strip() or foreign(p, w.after_warning):  # rule 5: another writer's line
            w.after_warning = is_warning(p)
            return self._skip(src, w)
        w.after_warning = False
        if p[:6] == w.text[:6] or _starts_with_header(p) or has_header(p, src.engine, src.year):
            self.drop(src)  # rule 4: a line of its own
            return None
        alone = parse_line(p, src.engine, src.year)
        if alone.event is not None:
            self.drop(src)  # rule 4
            return None
        for glue in ("", " "):
            text = w.text + glue + p
            if w.parsed is None:  # rule 3a
                joined = parse_line(text, src.engine, src.year)
                if joined.event is not None:
                    if joined.tod is not None:
                        joined.ts = src.on_date(joined.tod)
                    return self._settle(src, w, text, joined, alone.outcome)
                if cut_short(text[w.head :], w.engine):
                    w.text = text
                    w.pending.append(alone.outcome)
                    w.pieces += 1
                    w.fed_at = time.monotonic()
                    if w.pieces >= MAX_PIECES:
                        self.drop(src)
                    return alone.outcome
            elif continues(w.text, glue + p):  # rule 3b
                joined = parse_line(text, src.engine, src.year)
                old = w.parsed.event
                if joined.event is not None and type(joined.event) is type(old) and (not w.cut_in_token or _says_more(joined.event, old)):
                    if joined.tod is not None:
                        joined.ts = src.on_date(joined.tod)
                    return self._settle(src, w, text, joined, alone.outcome)
        return self._skip(src, w)  # rule 5

    def _settle(self, src: SourceState, w: Wrapped, text: str, full: ev.Line, outcome: str) -> Join | str | None:
        """The held text now reads ``full`` (the first line alone, or joined with a piece whose
        outcome alone was ``outcome``): a :class:`Join` of what it says for sure, held on while it
        is provably cut (rules 2 and 6)."""
        msg = text[w.head :]
        k = whole_part(msg, full.event)
        n = len(w.pending) + 1
        if k is None:  # whole: the hold ends
            del self.held[src.name]
            return Join(full, text, n, w.span)
        w.text, w.parsed, w.fed_at = text, full, time.monotonic()
        w.cut_in_token = k < len(msg)
        w.pieces += 1
        safe, safe_text = full, text
        if w.cut_in_token:
            safe_text = text[: w.head + k]
            safe = parse_line(safe_text, src.engine, src.year)
            if safe.tod is not None:
                safe.ts = src.on_date(safe.tod)
        if safe.event is None or type(safe.event) is not type(full.event):
            w.pending.append(outcome)  # nothing sure yet: counted when joined or dropped
            if w.pieces >= MAX_PIECES:
                self.drop(src)
            return outcome
        w.pending = []
        if w.pieces >= MAX_PIECES:
            del self.held[src.name]
        return Join(safe, safe_text, n, w.span)

    def _skip(self, src: SourceState, w: Wrapped) -> None:
        """Rule 5: not a piece; the held line stays held, up to ``MAX_SKIPPED`` such lines."""
        w.skipped += 1
        if w.skipped > MAX_SKIPPED:
            self.drop(src)
        return None

    # ------------------------------------------------------------------------------------
    # rule 7: the end of a hold

    def drop(self, src: SourceState) -> None:
        """Count a held line (and the pieces held with it) as they were on their own."""
        w = self.held.pop(src.name, None)
        if w is None or not w.pending:
            return
        first, *rest = w.pending
        src.count(first, 1, w.engine, w.ts)
        for outcome in rest:
            src.count(outcome, 1)

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


__all__ = ["IDLE_SECONDS", "WRAP_NEVER", "Join", "Wrapped", "Wraps"]
