"""Typed memory of the diagnosis: what the rules remember between samples (hysteresis, evidence, episodes,
usage distributions, binding time, peaks, the boots of a server), and what the recommendations keep (the last
ones and their refresh stamp).

The diagnosis owns it; the state objects only hold it for the server and the source it is about
(``ServerState.rule_memory``, ``SourceState.rule_memory``: the state stage never reads them, and a restart
drops the source's). :func:`memory_of` makes and attaches it on first use (the rules and the
recommendations, under the pipeline's lock), :func:`peek_memory` reads it without attaching (a page, a report).

Fields, not string keys: a reader sees what exists and its type.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Protocol

from ..catalogues.rulebook import BINDING, RULE_IDS, SUSTAINED_RULES, WINDOWED_RULES


class SustainConfig(Protocol):
    """The windows of :class:`Hysteresis` (``RulesConfig`` has them)."""

    max_gap_seconds: float
    tolerate: int
    for_seconds: float
    min_samples: int
    clear_seconds: float
    clear_min_samples: int


# --------------------------------------------------------------------------------------------
# hysteresis


class Hysteresis:
    """Sustain window + hysteresis over samples (see module doc). Pure: no clock, no I/O.

    Most samples change nothing: the condition agrees with the state while no window is pending.
    ``steady`` is the condition value of such a sample (None while a window is pending), so a
    caller can skip :meth:`update` for it with one comparison; ``update`` itself checks it first."""

    __slots__ = (
        "active",
        "steady",
        "pend_start",
        "pend_n",
        "opp",
        "last_ts",
        "fired_at",
        "cleared_at",
        "pend_first",
        "pend_recent",
        "made_by",
    )

    def __init__(self) -> None:
        self.active = False
        self.steady: bool | None = False  # the condition that changes nothing: ``active`` while nothing is pending
        self.pend_start: float | None = None  # log time the pending (fire or clear) window began
        self.pend_n = 0
        self.opp = 0  # consecutive samples against the pending direction
        # log time of the last counted sample; steady ones are not counted: with nothing pending, a
        # gap after them has nothing to restart
        self.last_ts: float | None = None
        self.fired_at: float | None = None
        self.cleared_at: float | None = None
        self.pend_first: tuple[float, str] | None = None
        self.pend_recent: deque = deque(maxlen=3)
        # the lines of the window that made the last transition: its first and its latest ones (at most 4), the
        # transition's own line last; what the finding quotes as its evidence
        self.made_by: list[tuple[float, str]] = []

    def update(self, cond: bool, ts: float, cfg: SustainConfig, line: str = "", fast: bool = False) -> str | None:
        """Feed one sample; returns 'fire' / 'clear' on a transition, else None."""
        if cond == self.steady:
            return None
        tr = self._count(cond, ts, cfg, line, fast)
        self.steady = self.active if self.pend_start is None else None
        return tr

    def _count(self, cond: bool, ts: float, cfg: SustainConfig, line: str, fast: bool) -> str | None:
        last = self.last_ts
        if last is not None and ts - last > cfg.max_gap_seconds:
            self._reset()
        self.last_ts = ts
        want = not self.active  # the direction we are waiting for: True = condition to fire
        if cond != want:
            if self.pend_start is not None:
                self.opp += 1
                if self.opp > cfg.tolerate:
                    self._reset()
            return None
        self.opp = 0
        if self.pend_start is None:
            self.pend_start, self.pend_n = ts, 0
            self.pend_first = (ts, line)
            self.pend_recent.clear()
        self.pend_n += 1
        self.pend_recent.append((ts, line))
        if want:
            need_s, need_n = (0.0, 1) if fast else (cfg.for_seconds, cfg.min_samples)
        else:
            need_s, need_n = cfg.clear_seconds, cfg.clear_min_samples
        if ts - self.pend_start >= need_s and self.pend_n >= need_n:
            self.active = want
            if want:
                self.fired_at = ts
            else:
                self.cleared_at = ts
            self._reset()
            self.made_by = self._made_by(ts, line)
            return "fire" if want else "clear"
        return None

    def end(self, ts: float) -> bool:
        """The source went quiet or ended (docs/rules.md#quiet-and-death): an active finding clears at
        once and a pending window is dropped, since no further sample will come to count toward
        either. Returns whether it was active."""
        was = self.active
        self.active = False
        self.steady = False
        if was:
            self.cleared_at = ts
        self._reset()
        self.last_ts = None
        return was

    def evidence(self) -> list[tuple[float, str]]:
        out = [self.pend_first] if self.pend_first else []
        out += [x for x in self.pend_recent if x is not self.pend_first and x != self.pend_first]
        return out

    def _made_by(self, ts: float, line: str) -> list[tuple[float, str]]:
        """The window's lines that carry text, the transition's own (``ts``, ``line``) last, bounded to the first
        and the latest three."""
        out = [x for x in self.evidence() if x[1]]
        if not out or out[-1][0] != ts or out[-1][1] != line:
            out.append((ts, line))
        return out[:1] + out[-3:] if len(out) > 4 else out

    def _reset(self) -> None:
        self.pend_start = None
        self.pend_n = 0
        self.opp = 0


# --------------------------------------------------------------------------------------------
# usage statistics for the report (bounded: fixed bins)


class UsageStats:
    """Sample and log-time weighted histograms of a 0..1 usage, in 0.01 bins (SGLang prints two
    decimals, so percentiles from the bins are exact for it)."""

    __slots__ = ("counts", "seconds", "n", "min", "max", "last_ts", "last_bin", "_hints")

    BINS = 101

    def __init__(self) -> None:
        self.counts = [0] * self.BINS
        self.seconds = [0.0] * self.BINS
        self.n = 0
        self.min: float | None = None
        self.max: float | None = None
        self.last_ts: float | None = None
        self.last_bin: int | None = None
        self._hints: dict[float, int] = {}  # q -> the bin quantile(q) last returned

    def add(self, v: float, ts: float | None, max_gap: float) -> None:
        """One sample (every batch line goes through here, so it does only this)."""
        b = int(v * 100.0 + 0.5)  # float literals: no int-to-float conversion per sample
        if b > 100:
            b = 100
        elif b < 0:
            b = 0
        if ts is not None:
            lt = self.last_ts
            if lt is not None:
                dt = ts - lt
                if 0.0 < dt <= max_gap:
                    self.seconds[self.last_bin] += dt
            self.last_ts = ts
        self.last_bin = b
        self.counts[b] += 1
        n = self.n
        self.n = n + 1
        if not n:
            self.min = self.max = v
        elif v < self.min:
            self.min = v
        elif v > self.max:
            self.max = v

    def quantile(self, q: float) -> float | None:
        """The lowest non-empty bin whose running count reaches ``q * n`` (``max`` if none does).

        The recommendations ask for the same quantiles every 30 s of log time while a finding is live,
        and they move slowly: the bin of the last answer is tried first (it is still the answer when
        the count below it is under ``q * n`` and the count up to it is not: one C-level sum), else
        the running sums are built and bisected."""
        n = self.n
        if not n:
            return None
        target = q * n
        if not target <= n:  # also NaN (n is the sum of the counts)
            return self.max
        counts = self.counts
        i = self._hints.get(q)
        if i is not None:
            below = sum(counts[:i])
            if below < target <= below + counts[i]:
                return i / 100.0
        i = bisect_left(list(accumulate(counts)), target)
        while not counts[i]:  # only when target <= 0: the first non-empty bin
            i += 1
        self._hints[q] = i
        return i / 100.0

    def summary(self) -> dict:
        return {
            "samples": self.n,
            "seconds": round(sum(self.seconds), 3),
            "min": self.min,
            "p50": self.quantile(0.5),
            "p90": self.quantile(0.9),
            "p95": self.quantile(0.95),
            "max": self.max,
        }

    def histogram(self, width: float = 0.1) -> list[tuple[float, float, int, float]]:
        """[(lo, hi, samples, seconds)] in ``width`` buckets (the last one includes 1.00)."""
        step = int(round(width * 100))
        out = []
        for lo in range(0, 100, step):
            hi = min(lo + step, 100)
            idx = range(lo, hi + 1 if hi == 100 else hi)
            out.append((lo / 100, hi / 100, sum(self.counts[i] for i in idx), sum(self.seconds[i] for i in idx)))
        return out


class LengthStats:
    """A distribution of token counts (a request's length) in bins a quarter of an octave wide: the bin of ``n``
    is ``4 * n.bit_length()`` plus the two bits below its leading one, so a bin spans about 19 % and 64 bins
    reach 2**16 * 4 tokens... up to 2**31. Bounded (fixed bins) like :class:`UsageStats`; one ``add`` per sample."""

    __slots__ = ("counts", "n", "max")

    BINS = 128

    def __init__(self) -> None:
        self.counts = [0] * self.BINS
        self.n = 0
        self.max = 0

    def add(self, v: float) -> None:
        k = int(v)
        if k <= 0:
            return
        b = k.bit_length()
        b = 4 * b + ((k >> (b - 3)) & 3 if b >= 3 else 0)
        self.counts[b if b < 128 else 127] += 1
        self.n += 1
        if k > self.max:
            self.max = k

    @staticmethod
    def low(b: int) -> int:
        """The smallest token count of bin ``b``."""
        length, sub = divmod(b, 4)
        if length < 3:
            return 1 << (length - 1) if length else 0
        return (1 << (length - 1)) + sub * (1 << (length - 3))

    def quantile(self, q: float) -> int | None:
        """The low edge of the bin holding the ``q`` quantile (None: no sample)."""
        if not self.n:
            return None
        target, run = q * self.n, 0
        for b, c in enumerate(self.counts):
            run += c
            if c and run >= target:
                return self.low(b)
        return self.max


# --------------------------------------------------------------------------------------------
# the rules


class Recent(deque):
    """The last ``maxlen`` ``(ts, n)`` events in arrival order. ``count_within`` walks back from
    the newest and stops at the first one older than the window while they arrived in time order
    (the usual case: one server's log), and counts them all once one arrived out of order."""

    def __init__(self, maxlen: int) -> None:
        super().__init__(maxlen=maxlen)
        self.ordered = True

    def append(self, item: tuple[float, int]) -> None:
        if self and item[0] < self[-1][0]:
            self.ordered = False
        super().append(item)

    def count_within(self, ts: float, window: float) -> int:
        """How many events lie in ``[ts - window, ts]``."""
        if not self.ordered:
            return sum(1 for t, _ in self if 0 <= ts - t <= window)
        n = 0
        for t, _ in reversed(self):
            d = ts - t
            if d > window:
                break
            if d >= 0:
                n += 1
        return n


@dataclass
class Evidence:
    """Raw lines behind a finding: the ones that fired it, recent ones while it holds, the ones that cleared it."""

    fire: list[tuple[float, str]] = field(default_factory=list)
    recent: deque = field(default_factory=lambda: deque(maxlen=3))
    clear: list[tuple[float, str]] = field(default_factory=list)


@dataclass
class ServerMemory:
    """One server's diagnosis memory (one boot). The rules fill the per-rule tables on first use."""

    hyst: dict[str, Hysteresis] = field(default_factory=dict)
    evidence: dict[str, Evidence] = field(default_factory=dict)
    episodes: dict[str, deque] = field(default_factory=dict)  # rule -> [fired_at, cleared_at or None]
    usage: dict[str, UsageStats] = field(default_factory=dict)  # kv / mamba / swa
    binding_seconds: dict[str, float] = field(default_factory=dict)  # rulebook.BINDING: mamba / kv / requests / none
    binding_last: tuple[float, str, bool] | None = None  # (ts, category, requests waiting) of the last sample
    queued_seconds: float = 0.0  # log time with requests waiting (measured like the binding time)
    retractions: Recent | None = None  # (ts, n): retraction lines / vLLM preemption intervals
    peaks: dict[str, float] = field(default_factory=dict)  # running / queued
    # request lengths (exporter/diagnosis/workload.py): KV tokens per running request (decode / stats samples), prompt tokens
    # per new request (prefill samples)
    lengths: dict[str, LengthStats] = field(default_factory=dict)
    exhausted_at: float | None = None
    restarts_seen: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    last_line: tuple[float, str] | None = None  # (ts, raw line) of the last sample: what a silence names
    conditions: tuple[bool | None, ...] = ()  # of the last sample, in rulebook.SUSTAINED_RULES order (Rules.conditions)
    # the conditions of a sample that changes no sustained rule's hysteresis (their ``Hysteresis.steady``)
    steady: tuple[bool | None, ...] = (False, False, False)
    boot_lines: dict[str, tuple[float | None, str]] = field(default_factory=dict)  # config / mamba / summary
    capped_detail: str | None = None
    # the boots of this server in this log (a restart closes one): the before of a before/after (exporter/presentation/boots.py)
    boots: list = field(default_factory=list)  # BootRecord, oldest first, at most BOOTS_MAX
    boot_config: dict = field(default_factory=dict)  # the configuration the current boot logged (restart clears the source's)
    boot_first_ts: float | None = None  # the current boot's first line
    boot_mark: dict = field(default_factory=dict)  # the cumulative figures when the current boot began
    # kept by the layers above the rules
    sample_facts: Any = None  # the facts the rules' samples read (facts_of's, fetched once per generation)
    sample_gen: int = -1  # the source's generation they are of (SourceState.generation)
    recommendations: list = field(default_factory=list)  # recommend.Recommendation
    reco_ts: float = float("-inf")  # log time of the last refresh
    reco_inputs: tuple | None = None  # what the last refresh read (recommend.inputs)
    # recommend.inputs -> (recommendations, recommended ratio) of the last few distinct inputs
    reco_kept: dict[tuple, tuple[tuple, float | None]] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return bool(self.hyst)

    def add_sample(
        self,
        kv: float | None,
        mamba: float | None,
        swa: float | None,
        held: float | None,
        prompt: float | None,
        ts: float | None,
        max_gap: float,
    ) -> None:
        """One sample's figures into their distributions (None: the sample does not show it): the pools' usage,
        the KV tokens a running request holds, the prompt tokens of a new one."""
        usage = self.usage
        if kv is not None:
            usage["kv"].add(kv, ts, max_gap)
        if mamba is not None:
            usage["mamba"].add(mamba, ts, max_gap)
        if swa is not None:
            usage["swa"].add(swa, ts, max_gap)
        if held is not None:
            self.lengths["running"].add(held)
        if prompt is not None:
            self.lengths["prompt"].add(prompt)

    def fill(self, findings: dict[str, int], episodes_max: int) -> None:
        """Make the per-rule tables of the rule catalogue (exporter/catalogues/rulebook.py): a hysteresis per
        sustained and windowed rule, evidence and episodes per rule, the binding time per pool. A
        finding the server already has (restored from a snapshot, exporter/state/snapshot.py) is where its
        hysteresis starts: on, it waits for the condition to clear (a fresh one would wait to fire
        and keep a stale 1 until it fired and cleared again)."""
        self.hyst = {r: Hysteresis() for r in (*SUSTAINED_RULES, *WINDOWED_RULES)}
        for r, h in self.hyst.items():
            if findings.get(r):
                h.active = h.steady = True
        self.steady = tuple(self.hyst[r].steady for r in SUSTAINED_RULES)
        self.evidence = {r: Evidence() for r in RULE_IDS}
        self.episodes = {r: deque(maxlen=episodes_max) for r in RULE_IDS}
        self.usage = {"kv": UsageStats(), "mamba": UsageStats(), "swa": UsageStats()}
        self.lengths = {"running": LengthStats(), "prompt": LengthStats()}
        self.binding_seconds = dict.fromkeys(BINDING, 0.0)
        self.retractions = Recent(256)


BOOTS_MAX = 8  # boots a server remembers (a crash-looping server restarts often)


@dataclass(frozen=True)
class BootRecord:
    """What one boot of a server said and did: its configuration, its facts (pools, cap), and its share of the
    binding time, the queueing and the usage samples. The rules keep one when the server restarts."""

    first_ts: float | None
    last_ts: float | None
    config: dict
    facts: Any  # facts.ServerFacts of the boot's last generation (None: no sample read them)
    binding_seconds: dict[str, float]
    queued_seconds: float
    usage_counts: dict[str, tuple[int, ...]]  # kv / mamba: this boot's samples per 0.01 bin
    fired: tuple[str, ...]  # the findings that fired during the boot


def boot_figures(m: ServerMemory) -> tuple[dict[str, float], float, dict[str, tuple[int, ...]]]:
    """The cumulative binding time, queued time and usage counts of ``m`` (what a boot's share is the difference of)."""
    return (
        dict(m.binding_seconds),
        m.queued_seconds,
        {p: tuple(u.counts) for p, u in m.usage.items() if p in ("kv", "mamba")},
    )


def boot_share(m: ServerMemory) -> tuple[dict[str, float], float, dict[str, tuple[int, ...]]]:
    """The current boot's binding time, queued time and usage counts (the cumulative ones minus the boot's mark)."""
    binding, queued, counts = boot_figures(m)
    mark = m.boot_mark
    if mark:
        b0, q0, c0 = mark["figures"]
        binding = {k: v - b0.get(k, 0.0) for k, v in binding.items()}
        queued -= q0
        counts = {p: tuple(a - b for a, b in zip(c, c0.get(p, (0,) * len(c)), strict=True)) for p, c in counts.items()}
    return binding, queued, counts


def fired_since(m: ServerMemory, first: float | None, carried: bool = True) -> tuple[str, ...]:
    """The rules that fired from log time ``first`` on, or are live; ``carried``: also those live at ``first``
    that cleared later (for a boot that ended: live in it)."""
    return tuple(
        r
        for r, eps in m.episodes.items()
        if any(a is not None and (first is None or a >= first or b is None or (carried and b > first)) for a, b in eps)
    )


def close_boot(m: ServerMemory, config: dict, facts: Any) -> BootRecord:
    """The current boot of ``m`` ends (the server restarted): keep its record (``facts``: the server's facts of
    that boot's last generation, ``ServerState.facts``) and start the next boot's share."""
    binding, queued, counts = boot_share(m)
    first = m.boot_first_ts if m.boot_first_ts is not None else m.first_ts
    rec = BootRecord(first, m.last_ts, dict(config), facts, binding, queued, counts, fired_since(m, first))
    m.boots.append(rec)
    del m.boots[:-BOOTS_MAX]
    m.boot_mark = {"figures": boot_figures(m)}
    m.boot_first_ts = None
    return rec


@dataclass
class SourceMemory:
    """One source's diagnosis memory of this boot (a restart drops it: ``SourceState.restart``)."""

    known_servers: int = -1  # the servers the rules have handed their findings (Rules._new_server_or_boot)


def memory_of(srv: Any) -> ServerMemory:
    """The diagnosis' memory of ``srv`` (a ``ServerState``), made and attached on first use: for the rules and the
    recommendations, which run under the pipeline's lock."""
    m = srv.rule_memory
    if m is None:
        m = srv.rule_memory = ServerMemory()
    return m


def peek_memory(srv: Any) -> ServerMemory:
    """The diagnosis' memory of ``srv`` for a reader that must not write (a page, a report): a blank one, not
    attached, for a server the rules have not seen yet."""
    m = srv.rule_memory
    return m if m is not None else ServerMemory()


def source_memory(src: Any) -> SourceMemory:
    """The diagnosis' memory of ``src``'s boot (a ``SourceState``), made and attached on first use."""
    m = src.rule_memory
    if m is None:
        m = src.rule_memory = SourceMemory()
    return m
