"""Per-server state: what the log has said so far, per log source and per DP rank.

The state is the only mutable part of the exporter. Parsers produce events; ``SourceState.apply``
folds them in; the collector reads the state at scrape time. Rules (``exporter.diagnosis.rules``) read the
same state; their memory is theirs (``exporter.diagnosis.memory``): the state objects only hold it
(``rule_memory``), never read it, and a restart drops the source's.

``SourceState`` is the one writer of what every reader counts on, whoever feeds it (the pipeline's
line path, its sampler, the bulk scanner's aggregates, a wrapped message joined):

* **counting**: every line's outcome (``count``, ``count_batch``, ``count_run``, ``apply`` with
  the lines an event was read from), so each line is counted once, in one place;
* **the release and the architecture** the lines of this boot prove (``release``, ``arch``: from
  each applied event and its raw line, ``capacity.version.sglang_features`` and vLLM's
  "Resolved architecture");
* **the log clock**: ``last_ts``, advanced by every line that carries a time, and the date a
  header that kept only its time of day is read on (``on_date``);
* **the generation** of what the log said: bumped by whatever may change the server's facts (an
  event other than a sample, the engine told, a restart, a snapshot restored, the first batch line
  that shows a release feature; ``changed``), so ``exporter.state.facts`` caches by it and a reader without the rules
  never reads stale facts.

Semantics worth knowing:
* A runtime gauge holds the value of the most recent line that carried its field, prefill or decode.
* Startup lines are printed once per TP rank: for each DP group only one (PP, TP) rank (the lowest seen)
  speaks, so nothing is multiplied (counters from other TP ranks are ignored too, which matters
  for retractions and for batch lines under ``--enable-metrics-for-all-schedulers``).
* A startup line after runtime lines means the server restarted in the same log: the source's
  capacity facts and configuration are reset and ``restarts`` is counted. Counters never go back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from parsers import clock
from parsers import events as ev
from parsers.clock import day_start

from ..capacity.version import VersionRange, parse_version, sglang_features
from ..catalogues import contract
from ..catalogues.configvalues import CONFIG_KEYS
from . import revisions
from .provenance import BOOT_MESSAGES, DRAFT_POOL, MAMBA_MODE_NONE, REQUESTED_CHUNK, SUMMED_POOLS, Basis, Ledger, Proof, Rank, locate, prove
from .revisions import Revision

# runtime gauges: BatchStats field -> state key (the metric of that key: exporter/catalogues/contract.py)
BATCH_GAUGES: tuple[tuple[str, str], ...] = tuple((m.event_field, m.key) for m in contract.RUNTIME)

# distinct dp_rank values kept per source (--max-dp-ranks): real deployments have at most a few
# dozen DP ranks per server (one per GPU of a node group); 256 leaves room for any of them
DEFAULT_MAX_DP_RANKS = 256

RUNTIME_EVENTS = (ev.BatchStats, ev.Retraction, ev.Preemption, ev.SpecDecoding)
# vLLM's architecture: any class name after "Resolved architecture: " (the VL / Omni wrappers such as
# NemotronH_Nano_VL_V2 end in neither suffix); a model class named in another line ("... for XForCausalLM"),
# read from the raw text of the events that carry it (SourceState._learn)
_VLLM_ARCH_RE = re.compile(r"Resolved architecture: (\w+)|for (\w+For(?:ConditionalGeneration|CausalLM))\b")
_ARCH_EVENTS = (ev.HybridLayout, ev.ServerConfig, ev.ServerStarting)
# events that only a booting server prints: seeing one after runtime lines means a restart
BOOT_EVENTS = (
    ev.ServerStarting,
    ev.WeightsLoaded,
    ev.MambaCacheAllocated,
    ev.KVCacheAllocated,
    ev.SchedulerSummary,
    ev.MambaCap,
    ev.ReplaySSMBuffers,
    ev.SWAPool,
    ev.KVCapacity,
    ev.KVMemory,
    ev.ContextFit,
    ev.HybridLayout,
    ev.KVCacheGroups,
    ev.GDNPrefillKernel,
)
BOOT_CONFIG_KINDS = ("server_args", "non_default_args", "engine_config")


def _is_boot(e: object) -> bool:
    """Whether only a booting server prints this event."""
    return isinstance(e, BOOT_EVENTS) or (isinstance(e, ev.ServerConfig) and e.kind in BOOT_CONFIG_KINDS)


# the server's life, as its own lines tell it (hybrid_cache_server_state; docs/rules.md#quiet-and-death).
# starting: boot lines, not ready yet; serving: the last sample had requests running or waiting; idle:
# ready, or the last sample had none (vLLM prints no stats line after an idle one); stalled: the last
# vLLM stats line had requests but no progress (no throughput; vLLM prints nothing more until one
# moves); stopped: a shutdown was logged; dead: the engine died (EngineDeadError, a fatal error).
SERVER_STATES = ("starting", "serving", "idle", "stalled", "stopped", "dead")
ENDED = ("stopped", "dead")
# deaths that are the consequence of a stop when a shutdown was logged first: vLLM's EngineDeadError (the API
# server sees its engine core stopped) and "Process X (PID: N) died with exit code N" (a process killed on the
# way out), SGLang's "SIGQUIT received ... one child failed" (a child killed on the way out); a death of its own (a fatal error, "Scheduler hit an exception") is one even during a shutdown
DP_RANK_LEN = contract.LABEL["dp_rank"].max_len
CONSEQUENCES = ("engine_dead", "child_failed", "process_died")


# an SGLang source is silent when no batch line came for longer than the engine's cadence allows (docs/rules.md#silence):
# the state's basis says what set it (hybrid_cache_server_state_basis): a line of the server; the log's own time
# (a later line, of any kind, more than quiet_seconds after the last batch line); or, in serve only, the wall clock
# (the caught-up log wrote nothing for quiet_seconds: the one documented exception to log time)
STATE_BASES = ("logged", "derived", "wall_clock")
# the default bound (RulesConfig.quiet_seconds): SGLang prints a prefill line for every prefill batch and a decode
# line every --decode-log-interval decode steps (40 by default; 40 steps of a slow 0.5 s are 20 s), and nothing
# while idle: a minute without a batch line is three such intervals
QUIET_SECONDS = 60.0
SILENT = {"log": "silent", "wall": "silent_wall"}  # Silence.basis -> SourceState.life_cause of the idle state
NEVER = math.inf


@dataclass(frozen=True, slots=True)
class Silence:
    """Not a line: the source's batch lines stopped. ``since`` is the log time of its last batch line; ``basis``
    ``log`` (a later line showed the gap) or ``wall`` (serve: its caught-up log wrote nothing for quiet_seconds).
    The sampler queues it among the samples, in log order (after the lines it follows), and the pipeline hands it
    to :meth:`SourceState.silence` and then to the observers (the rules end the findings a sample would end)."""

    since: float
    basis: str


def _gauge_setter(gauges: tuple[tuple[str, str], ...]) -> Callable[[ServerState, ev.BatchStats], None]:
    """``ServerState.set_gauges``: the runtime gauges from a batch/stats line, every field the line
    carried (a field it did not carry leaves its gauge as it was).

    Written out from ``gauges`` once, as ``dataclasses`` writes an ``__init__``: one attribute
    read per field instead of a loop of ``getattr`` by name, which took half of what applying a
    sample cost. The source is::

        def set_gauges(self, e):
            g = self.gauges
            v = e.running
            if v is not None:
                g['running_requests'] = float(v)
            ...  # one such block per (field, key) of BATCH_GAUGES, in that order
    """
    src = ["def set_gauges(self, e):", "    g = self.gauges"]
    for attr, key in gauges:
        src += [f"    v = e.{attr}", "    if v is not None:", f"        g[{key!r}] = float(v)"]
    ns: dict[str, object] = {"__name__": __name__}  # the function is this module's (as a dataclass's __init__)
    exec("\n".join(src), ns)  # our own text, from the field and key names of the contract
    f = ns["set_gauges"]
    f.__doc__ = "Runtime gauges from a batch/stats line: every field the line carried (see _gauge_setter)."
    return f  # type: ignore[return-value]


@dataclass
class ServerState:
    """What one DP rank of one server has logged."""

    dp_rank: str
    # the (PP, TP) rank whose lines count for this DP group: the lowest seen
    speaker: tuple[int, int] | None = None
    gauges: dict[str, float] = field(default_factory=dict)  # runtime, survive restarts
    capacity: dict[str, float] = field(default_factory=dict)  # startup facts, reset on restart
    mamba_state_bytes: dict[str, float] = field(default_factory=dict)
    replayssm_buffer_bytes: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    cumulative_preemptions: int | None = None  # vLLM V0 running total, for deltas
    findings: dict[str, int] = field(default_factory=dict)  # rule id -> 0/1
    recommendations: list[tuple[str, str, str]] = field(default_factory=list)  # (rule, flag, value)
    recommended_ratio: float | None = None
    rule_memory: Any = None  # the diagnosis' memory of this server (exporter/diagnosis/memory.py): held, not read, here
    facts: Any = None  # the server's facts of the current generation (exporter/state/facts.py: facts_of keeps them)
    kv_lines: int = 0  # unlabelled KV pools the speaker printed this boot (the ledger has them: kept for snapshots)
    kv_upper_bound: bool = False  # its pool is a 'VA upper bound' not settled yet (post-capture sizing follows)
    # what proves each fact above (exporter/state/provenance.py): capacity keys, 'mamba_state_bytes/<state>',
    # 'replayssm_buffer_bytes/<buffer>'; forgotten with the facts
    proofs: dict[str, Proof] = field(default_factory=dict)
    # the values of the facts one boot states at several stages, each with its line (exporter/state/revisions.py), and
    # the line of 0.34's cap warning (the memory the advice gives back: ``withheld_bytes``)
    revisions: dict[str, list[Revision]] = field(default_factory=dict)

    def inc(self, name: str, by: float = 1.0) -> None:
        """Add ``by`` to a counter; a counter never decreases (a negative or NaN step adds nothing:
        the parsers already refuse counts outside ``parsers.numbers.MAX_COUNT``)."""
        if by >= 0:
            self.counters[name] = self.counters.get(name, 0.0) + by

    def count_batches(self, decode: bool, n: float = 1.0, new: float | None = None, cached: float | None = None) -> None:
        """``n`` SGLang batch lines of one kind; prefill lines add their new / cached prompt tokens.
        The one place batch counters are kept, whether lines arrive one by one or in chunks."""
        cnt = self.counters
        if decode:
            cnt["decode_batches"] = cnt.get("decode_batches", 0.0) + n
            return
        cnt["prefill_batches"] = cnt.get("prefill_batches", 0.0) + n
        if new is not None:
            cnt["prefill_tokens_new"] = cnt.get("prefill_tokens_new", 0.0) + new
        if cached is not None:
            cnt["prefill_tokens_cached"] = cnt.get("prefill_tokens_cached", 0.0) + cached

    def speaks(self, rank: tuple[int, int]) -> bool:
        """Whether a line from (PP, TP) ``rank`` counts: the lowest rank seen speaks for the group."""
        if self.speaker is None or rank < self.speaker:
            self.speaker = rank
            return True
        return rank == self.speaker

    set_gauges = _gauge_setter(BATCH_GAUGES)

    def reset_capacity(self) -> None:
        self.capacity.clear()
        self.mamba_state_bytes.clear()
        self.replayssm_buffer_bytes.clear()
        self.cumulative_preemptions = None
        self.kv_lines = 0
        self.kv_upper_bound = False
        self.proofs.clear()
        self.revisions.clear()


@dataclass
class SourceState:
    """One log source (a file, stdin, a replayed file)."""

    name: str
    engine: str | None = None
    servers: dict[str, ServerState] = field(default_factory=dict)
    config: dict[str, object] = field(default_factory=dict)  # merged config dumps (this boot)
    version: str | None = None
    lines: dict[str, int] = field(default_factory=lambda: {ev.PARSED: 0, ev.IGNORED: 0, ev.UNRECOGNIZED: 0})
    restarts: int = 0
    runtime_seen: bool = False  # runtime lines since the last boot
    last_ts: float | None = None
    year: int = field(default_factory=clock.default_year)  # --log.year, else the clock's until the file tells
    unified_memory: dict[str, float] = field(default_factory=dict)
    rule_memory: Any = None  # the diagnosis' memory of this boot (exporter/diagnosis/memory.py): held, not read; a restart drops it
    # the release range the lines of this boot prove, the architecture vLLM names, and whether a batch line showed
    # SGLang's mamba usage / #pending-token yet (the first one that does narrows the release)
    release: VersionRange = field(default_factory=VersionRange)
    arch: str | None = None
    seen_mamba: bool = False
    seen_pending: bool = False
    max_dp_ranks: int = 0  # distinct dp_rank values kept (0 = DEFAULT_MAX_DP_RANKS); see admits()
    dp_dropped: int = 0  # lines of dp ranks beyond the limit: counted here, not stored
    life: str | None = None  # one of SERVER_STATES; None until a line tells (see set_life)
    life_since: float | None = None  # log time the source entered ``life``
    life_cause: str | None = None  # the bounded cause of a stop or a death (ev.Lifecycle.cause)
    deaths: int = 0  # transitions into 'dead' (hybrid_cache_server_deaths_total)
    # silence (docs/rules.md#silence): the log time of the newest SGLang batch line, how long a serving source may
    # go without one (the rules' quiet_seconds; NEVER: off), and the log time past which a line shows the silence
    # (batch_ts + quiet_seconds; NEVER once that was looked at for this batch_ts): the hot path's one comparison
    batch_ts: float | None = None
    quiet_seconds: float = NEVER
    quiet_until: float = NEVER
    generation: int = 0  # of what the log said: bumped by whatever may change the facts (see changed)
    # provenance (exporter/state/provenance.py): what each rank said this boot, the proofs of the
    # configuration ('config/<key>', 'version'), where the lines came from ((first line, file name))
    ledger: Ledger = field(default_factory=Ledger)
    proofs: dict[str, Proof] = field(default_factory=dict)
    files: list[tuple[int, str]] = field(default_factory=list)
    stats_dp: str | None = None  # the DP rank of the last vLLM stats line (its SpecDecoding line follows it)
    # while a fact is applied: the rank and message key of its line, its first line and line count,
    # and the proofs its handler declared (explain_fact)
    heard: tuple[Rank, object] | None = None
    at: tuple[int, int] = (0, 1)
    noted: dict[str, tuple] = field(default_factory=dict)

    def set_life(self, state: str, ts: float | None, cause: str | None = None) -> bool:
        """Move to ``state`` (one of SERVER_STATES); True when it changed. An ended server stays
        ended until its next boot: a death is not undone by the shutdown lines that follow it, and
        the ``EngineDeadError`` a requested shutdown prints (the engine core is stopped first) is not
        a death; a fatal error of the engine is, even during a shutdown."""
        cur = self.life
        if cur == state:
            return False
        if cur == "dead" and state != "starting":
            return False
        if cur == "stopped" and state not in ("starting", "dead"):
            return False
        if cur == "stopped" and state == "dead" and cause in CONSEQUENCES:
            return False
        self.life = state
        self.life_since = ts if ts is not None else self.last_ts
        self.life_cause = cause
        if state == "dead":
            self.deaths += 1
        return True

    def silence(self, x: Silence) -> bool:
        """A serving source whose batch lines stopped goes ``idle`` as of its last batch line (its cause
        ``silent`` or ``silent_wall``); True when it did (the rules then end its findings). A source that went
        idle by the wall clock and whose log then shows the same gap takes the log's basis: serve ends where
        replay of the same lines ends. Any other state is left as it is (a shutdown, a death, a new boot, or
        an idle the log said)."""
        if self.life == "serving":
            self.set_life("idle", x.since, SILENT[x.basis])
            return True
        if x.basis == "log" and self.life == "idle" and self.life_cause == "silent_wall" and self.life_since == x.since:
            self.life_cause = "silent"
        return False

    @property
    def basis(self) -> str:
        """What set the current state (STATE_BASES): a line, or a silence seen by the log's time or the wall clock."""
        cause = self.life_cause
        return "derived" if cause == "silent" else "wall_clock" if cause == "silent_wall" else "logged"

    def batch_at(self, ts: float | None) -> None:
        """An SGLang batch line at ``ts`` was counted: the silence is measured from the newest one."""
        if ts is not None:
            b = self.batch_ts
            if b is None or ts > b:
                self.batch_ts = ts
                self.quiet_until = ts + self.quiet_seconds

    def admits(self, dp_rank: str) -> bool:
        """Whether lines of ``dp_rank`` are stored: the rank is known, or fewer than the limit are.
        The label values come from log text (``DP<n>`` tags, vLLM engine indices), so without a
        bound a log could create any number of series; lines beyond it are counted in
        ``dp_dropped`` (``hybrid_cache_exporter_dp_rank_limit_lines_total``) and dropped."""
        if dp_rank in self.servers or (len(self.servers) < (self.max_dp_ranks or DEFAULT_MAX_DP_RANKS) and len(dp_rank) <= DP_RANK_LEN):
            return True
        self.dp_dropped += 1  # (a DP tag longer than the label allows is no rank either: contract.LABELS)
        return False

    def server(self, dp_rank: str) -> ServerState:
        s = self.servers.get(dp_rank)
        if s is None:
            s = self.servers[dp_rank] = ServerState(dp_rank)
        return s

    # ------------------------------------------------------------------------------------
    # the writer: counting, the log clock, the generation

    def changed(self) -> None:
        """What the log says about the server may have changed: a new generation (exporter.state.facts
        derives the facts again when they are next read)."""
        self.generation += 1

    def detect(self, engine: str | None) -> None:
        """The engine a line tells, kept when none is known yet (a new generation: facts depend on it)."""
        if engine and self.engine is None:
            self.engine = engine
            self.generation += 1

    def on_date(self, tod: float) -> float | None:
        """The time of a header that kept its time of day but lost its date, on the date the log
        clock is at (the next day when it is more than 12 hours earlier: midnight passed); None
        while no line of the source gave a date."""
        last = self.last_ts
        if last is None:
            return None
        ts = day_start(last) + tod  # midnight in the zone log times are read in (parsers.clock)
        return ts + 86400 if ts < last - 43200 else ts

    def count(self, outcome: str, n: int = 1, engine: str | None = None, ts: float | None = None) -> None:
        """Count ``n`` lines that carry no event; their time still counts, and a known message that
        did not parse (unrecognized) tells the engine. A header alone does not: another engine's line
        may wear one like it (lmdeploy prints '[2026-03-02 08:01:44 DP0] ...')."""
        self.lines[outcome] += n
        if engine and self.engine is None and outcome != ev.IGNORED:
            self.detect(engine)
        if ts is not None and (self.last_ts is None or ts > self.last_ts):
            self.last_ts = ts

    def count_batch(self, decode: bool, ts: float | None, dp: str, tp: int | None, pp: int | None, new, cached) -> ServerState | None:
        """Count one valid SGLang batch line whose event is not built (the sampler's hot path): the
        line, the log clock, its server's batch counters. Returns the server, or None when the line
        is not stored (a DP rank beyond --max-dp-ranks, a TP rank that does not speak)."""
        self.lines[ev.PARSED] += 1
        if ts is not None:
            if self.last_ts is None or ts > self.last_ts:
                self.last_ts = ts
            b = self.batch_ts
            if b is None or ts > b:
                self.batch_ts = ts
                self.quiet_until = ts + self.quiet_seconds
        self.runtime_seen = True
        srv = self.servers.get(dp)
        if srv is None:
            if not self.admits(dp):  # beyond --max-dp-ranks: counted, not stored
                return None
            srv = self.server(dp)
        if (tp is not None or pp is not None) and not srv.speaks((pp or 0, tp or 0)):
            return None
        srv.count_batches(decode, 1.0, new, cached)
        return srv

    def count_run(self, batch: int, ignored: int, ts: float, batch_ts: float | None = None) -> None:
        """Count a run of lines the bulk scanner walked: ``batch`` batch lines (their servers' batch
        counters are counted by ``ServerState.count_batches``) and ``ignored`` uvicorn lines; ``ts``
        the newest time in the run, ``batch_ts`` its newest batch line's."""
        lines = self.lines
        lines[ev.PARSED] += batch
        lines[ev.IGNORED] += ignored
        if self.last_ts is None or ts > self.last_ts:
            self.last_ts = ts
        if batch:
            self.runtime_seen = True
            self.batch_at(batch_ts)

    def sample(self, line: ev.Line, raw: str = "") -> ServerState | None:
        """Fold a sample into the state: a batch line the sampler counted when it arrived
        (``count_batch``), whose gauges and life are applied now (``raw``: its text). Returns the
        server, or None (as :meth:`apply`)."""
        e = line.event
        ts = line.ts
        if ts is not None and (self.last_ts is None or ts > self.last_ts):
            self.last_ts = ts
        srv = self.servers.get(line.dp_rank)
        if srv is None:
            if not self.admits(line.dp_rank):
                return None
            srv = self.server(line.dp_rank)
        tp, pp = line.tp_rank, line.pp_rank
        if tp is not None or pp is not None:
            rank = (pp or 0, tp or 0)
            if rank != srv.speaker and not srv.speaks(rank):
                return None
        self.runtime_seen = True
        life = self.life
        if (life != "serving" or not (e.running or e.queued) or e.gen_throughput == 0.0) and life not in ENDED and e.kind != "prefix_cache":
            _life_of_sample(self, e, ts)
        srv.set_gauges(e)
        self._batch_release(e, raw)
        return srv

    def _batch_release(self, e: ev.BatchStats, raw: str) -> None:
        """The first SGLang batch line that shows the mamba usage, or #pending-token: what it proves of the
        release (a new generation of the facts). Later ones prove nothing more."""
        if not ((e.mamba_usage is not None and not self.seen_mamba) or (e.pending_tokens is not None and not self.seen_pending)):
            return
        if self.engine != ev.SGLANG:
            return
        self.seen_pending = self.seen_pending or e.pending_tokens is not None
        self.seen_mamba = True
        sglang_features(self.release, e, raw)
        self.changed()

    def _learn(self, e: object, raw: str) -> None:
        """What an event other than a sample proves of the release (SGLang's forms: ``sglang_features``) or names
        of the architecture (vLLM's "Resolved architecture"), from its raw line."""
        if self.engine == ev.SGLANG:
            sglang_features(self.release, e, raw)
        elif self.engine is not None and isinstance(e, _ARCH_EVENTS):
            am = _VLLM_ARCH_RE.search(raw)
            if am:
                self.arch = am.group(1) or am.group(2)

    def hold_gauge(self, dp: str, key: str, value: float) -> None:
        """A gauge field a sample held for its place in the log (exporter.state.sampler's ``Pending.held``)."""
        self.servers[dp].gauges[key] = value

    def apply(self, line: ev.Line, n: int = 1, span: int = 0, raw: str = "") -> ServerState | None:
        """Count the ``n`` lines ``line`` was read from (a wrapped message joined is several) and
        fold its event into the state. Returns the server (DP rank) it was applied to (what the
        observers get), or None when the line was a duplicate from a non-speaking TP rank (parsed,
        but not applied) or its DP rank is beyond the limit. ``span``: the lines the message
        spans, the last of them just counted (a join of a message that parsed on its own counts
        only its new piece), when more than ``n``; what proves a fact starts at the first. ``raw``: the
        text it was read from (what the release and the architecture are read from: :meth:`_learn`)."""
        lines = self.lines
        lines[line.outcome] += n
        e = line.event
        if line.engine and self.engine is None:
            self.detect(line.engine)
        ts = line.ts
        if ts is not None:
            last = self.last_ts
            if last is None or ts > last:
                self.last_ts = ts
            elif ts < last - 180 * 86400 and self.engine == ev.VLLM:
                # vLLM timestamps have no year: Dec -> Jan rollover
                self.year += 1
                self.last_ts = max(last, ts + 365 * 86400)
        # batch lines (most applied lines: the pipeline's samples) skip the boot-type checks
        batch = type(e) is ev.BatchStats
        dp = line.dp_rank
        if batch:
            if e.kind == "stats":  # vLLM: its SpecDecoding line follows it, of its engine
                self.stats_dp = dp if e.engine_index is not None else None
        elif type(e) is ev.SpecDecoding and dp == "0" and self.stats_dp is not None:
            dp = self.stats_dp  # printed right after its engine's stats line, without the engine's index
        srv = self.servers.get(dp)
        if srv is None:
            if not self.admits(dp):
                return None
            srv = self.server(dp)
        tp, pp = line.tp_rank, line.pp_rank
        if not batch:
            self.heard = None
            if _is_boot(e):
                if self.runtime_seen or self.life in ENDED:
                    self.restart()
                if self.life is None:
                    self.set_life("starting", ts)
            if type(e) in BOOT_MESSAGES or type(e) is ev.SWAPool:
                # a line without TP/PP tags is rank 0's: SGLang tags every rank when there are several
                self._hear(e, (dp, tp or 0, pp or 0), lines, max(n, span), ts)
        if tp is not None or pp is not None:
            rank = (pp or 0, tp or 0)
            if rank != srv.speaker and not srv.speaks(rank):  # the speaker's own lines: no call
                return None
        if batch or isinstance(e, RUNTIME_EVENTS):
            self.runtime_seen = True
            # the usual sample (serving, busy, making progress) changes no state: three reads
            life = self.life
            if (
                batch
                and (life != "serving" or not (e.running or e.queued) or e.gen_throughput == 0.0)
                and life not in ENDED
                and e.kind != "prefix_cache"
            ):
                _life_of_sample(self, e, ts)
        handler = _HANDLERS.get(type(e))
        if batch or isinstance(e, RUNTIME_EVENTS):
            if handler is not None:
                handler(self, srv, e)
            if batch:
                self._batch_release(e, raw)
            return srv
        self._learn(e, raw)
        self.generation += 1  # capacity, configuration, the release may have changed: the facts again
        if handler is not None and handler not in _NO_FACTS:
            k = max(n, span)
            self.at = (lines[ev.PARSED] + lines[ev.IGNORED] + lines[ev.UNRECOGNIZED] - k + 1, k)
            self._fold(handler, srv, e, (dp, tp, pp))
        elif handler is not None:
            handler(self, srv, e)
        return srv

    def _hear(self, e: object, rank: Rank, lines: dict[str, int], k: int, ts: float | None) -> None:
        """Rule 3 of exporter/state/provenance.py: the same message of the same rank with another value is the next boot."""
        at = lines[ev.PARSED] + lines[ev.IGNORED] + lines[ev.UNRECOGNIZED] - k + 1
        spec = _speculative(self.config)
        key, nxt = self.ledger.hear(rank, e, at, spec)
        if nxt:
            self.restart()
            self.set_life("starting", ts)
            key, _ = self.ledger.hear(rank, e, at, spec)
        self.heard = (rank, key)

    def _fold(self, handler, srv: ServerState, e: object, rank: Rank) -> None:
        """Apply a fact's handler and prove what it changed (exporter/state/provenance.py, rules 1 and 2):
        by the line being applied, unless the handler declared otherwise (:meth:`explain_fact`)."""
        cap, states, bufs, cfg, version = srv.capacity, srv.mamba_state_bytes, srv.replayssm_buffer_bytes, self.config, self.version
        before = (dict(cap), dict(states), dict(bufs), dict(cfg))
        self.noted = {}
        heard = self.heard
        handler(self, srv, e)
        self.heard = None
        first, k = self.at
        message = heard[1] if heard is not None and heard[1] is not None else type(e).__name__
        proof = Proof(Basis.LOGGED, first, self.restarts + 1, rank, lines=k, message=message)
        prove(srv.proofs, "", cap, before[0], proof, self.noted)
        prove(srv.proofs, "mamba_state_bytes/", states, before[1], proof, self.noted)
        prove(srv.proofs, "replayssm_buffer_bytes/", bufs, before[2], proof, self.noted)
        prove(self.proofs, "config/", cfg, before[3], proof, self.noted)
        if self.version != version:
            self.proofs["version"] = proof

    def explain_fact(
        self, name: str, basis: Basis, rule: str = "", line: int | None = None, also: tuple[int, ...] = (), revises: int | None = None
    ) -> None:
        """A handler declares what proves the fact ``name`` it sets (``capacity key``,
        ``config/<key>``...), when it is not simply the line being applied: a derived value and its
        rule, or another line of the boot (``line``); ``revises``: the line of the earlier value of the
        boot it settles (exporter/state/revisions.py)."""
        self.noted[name] = (basis, rule, line, also, revises)

    def mark_file(self, name: str) -> None:
        """The lines read from now on come from the file ``name`` (``replay``'s generations of a log)."""
        self.files.append((sum(self.lines.values()) + 1, name))

    def where(self, line: int | None) -> tuple[str, int | None]:
        """(file, line in that file) of the source's line ``line``."""
        return locate(self.files, self.name, line)

    def restart(self) -> None:
        """A new server boot in the same log: forget what the old one said about capacity."""
        self.restarts += 1
        self.generation += 1
        self.life = None
        self.batch_ts, self.quiet_until = None, NEVER  # the new boot's silence is measured from its own batch lines
        self.runtime_seen = False
        self.config.clear()
        self.version = None
        self.unified_memory.clear()
        self.rule_memory = None
        self.release, self.arch, self.seen_mamba, self.seen_pending = VersionRange(), None, False, False
        self.ledger.clear()
        self.proofs.clear()
        for s in self.servers.values():
            s.reset_capacity()
            s.speaker = None


# ----------------------------------------------------------------------------------------
# handlers: one per event type


def _batch(src: SourceState, srv: ServerState, e: ev.BatchStats) -> None:
    srv.set_gauges(e)
    if e.kind == "decode" or e.kind == "prefill":
        srv.count_batches(e.kind == "decode", 1.0, e.new_tokens, e.cached_tokens)
    elif e.kind == "stats":
        srv.inc("stats_lines")
    if e.preemptions is not None:  # absent, not 0, until a line carries it
        srv.inc("preempted_requests", e.preemptions)


def _life_of_sample(src: SourceState, e: ev.BatchStats, ts: float | None) -> None:
    """serving / idle / stalled from one sample (the newest line; the servers of a source share it)."""
    # a prefill line prints the running batch before its new requests join it
    busy = bool(e.running) or bool(e.queued) or (e.kind == "prefill" and bool(e.new_seqs))
    if not busy:
        state = "idle"
    elif e.kind == "stats" and e.gen_throughput == 0.0 and e.input_throughput == 0.0:
        state = "stalled"
    else:
        state = "serving"
    if src.life != state:
        src.set_life(state, ts)


def life_of_line(src: SourceState, e: object, ts: float | None) -> None:
    """The life events that are not samples: the ready line, a shutdown, a death."""
    if isinstance(e, ev.Lifecycle):
        src.set_life("dead" if e.state == "dead" else "stopped", ts, e.cause)
    elif isinstance(e, ev.ServerReady) and src.life in (None, "starting"):
        src.set_life("idle", ts)


def _lifecycle(src: SourceState, srv: ServerState, e: ev.Lifecycle) -> None:
    life_of_line(src, e, src.last_ts)


def _ready(src: SourceState, srv: ServerState, e: ev.ServerReady) -> None:
    life_of_line(src, e, src.last_ts)


def _retraction(src: SourceState, srv: ServerState, e: ev.Retraction) -> None:
    if e.test:
        return
    srv.inc("preempted_requests", e.retracted)
    srv.inc("retraction_events")
    if e.mamba_num_gained is not None:
        srv.inc("retracted_mamba_slots", e.mamba_num_gained)
    if e.new_tokens_gained is not None:
        srv.inc("retracted_tokens", max(0, e.new_tokens_gained))


def _preemption(src: SourceState, srv: ServerState, e: ev.Preemption) -> None:
    # V0 logs only every 50th preemption, with the cumulative total: count the delta
    if e.cumulative is None:
        srv.inc("preempted_requests")
        return
    prev = srv.cumulative_preemptions
    delta = e.cumulative - prev if prev is not None and e.cumulative >= prev else e.cumulative
    srv.cumulative_preemptions = e.cumulative
    srv.inc("preempted_requests", delta)


def _spec(src: SourceState, srv: ServerState, e: ev.SpecDecoding) -> None:
    if e.mean_accept_length is not None:
        srv.gauges["spec_accept_length"] = e.mean_accept_length
    if e.accept_rate is not None:
        srv.gauges["spec_accept_ratio"] = e.accept_rate
    if e.accepted_tokens is not None:
        srv.inc("spec_accepted_tokens", e.accepted_tokens)
    if e.drafted_tokens is not None:
        srv.inc("spec_drafted_tokens", e.drafted_tokens)


def _exhausted(src: SourceState, srv: ServerState, e: ev.PoolExhausted) -> None:
    srv.inc("pool_exhausted_" + e.pool)


def _mamba(src: SourceState, srv: ServerState, e: ev.MambaCacheAllocated) -> None:
    if e.slots is not None:
        srv.capacity["mamba_capacity_slots"] = e.slots
    b = srv.mamba_state_bytes
    b["conv"] = e.conv_bytes
    b["ssm"] = e.ssm_bytes
    if e.intermediate_ssm_bytes is not None:
        b["intermediate_ssm"] = e.intermediate_ssm_bytes
    if e.intermediate_conv_bytes is not None:
        b["intermediate_conv"] = e.intermediate_conv_bytes


def _kv(src: SourceState, srv: ServerState, e: ev.KVCacheAllocated) -> None:
    """A KV pool line of the speaking rank: the rank's pools this boot, by role (the ledger's key:
    exporter/state/provenance.py, kv_role), make the facts. One rank's pools only: other ranks' lines of
    the same pools confirm them (they never reach here), a pool printed again is the next boot."""
    heard = src.heard
    if heard is None or heard[1] is None:
        return
    rank, key = heard
    c = srv.capacity
    if key == ("kv", "draft"):
        c["draft_kv_capacity_tokens"] = e.tokens
        c["draft_kv_capacity_bytes"] = e.total_bytes
        if not e.draft:  # its role read from its place among the rank's pools
            src.explain_fact("draft_kv_capacity_tokens", Basis.LOGGED, DRAFT_POOL)
            src.explain_fact("draft_kv_capacity_bytes", Basis.LOGGED, DRAFT_POOL)
        return
    pools = src.ledger.pools(rank)
    settled = pools.get(("kv", "settled"))
    main = settled or pools.get(("kv", "main"))
    parts = [] if main is None else [main]
    if main is not None and settled is None and ("kv", "swa") in pools:
        parts.append(pools[("kv", "swa")])
    parts += [v for k, v in pools.items() if k[1] == "label"]
    if not parts:
        return
    first, first_line = parts[0]
    c["kv_capacity_tokens"] = first.tokens  # type: ignore[attr-defined]
    src.explain_fact("kv_capacity_tokens", Basis.LOGGED, line=first_line)
    c["kv_capacity_bytes"] = sum(p.total_bytes for p, _ in parts)  # type: ignore[attr-defined]
    if len(parts) > 1:
        src.explain_fact("kv_capacity_bytes", Basis.DERIVED, SUMMED_POOLS, first_line, tuple(n for _, n in parts[1:]))
    else:
        src.explain_fact("kv_capacity_bytes", Basis.LOGGED, line=first_line)
    if key == ("kv", "swa"):
        c["swa_capacity_tokens"] = e.tokens
    srv.kv_lines = sum(1 for k in pools if k[1] != "label")
    srv.kv_upper_bound = main is not None and settled is None and bool(main[0].upper_bound)  # type: ignore[attr-defined]
    dtype = first.dtype  # type: ignore[attr-defined]
    if dtype:
        src.config.setdefault("kv_cache_dtype", dtype)


def _summary(src: SourceState, srv: ServerState, e: ev.SchedulerSummary) -> None:
    v = e.values
    c = srv.capacity
    for key, printed in (
        ("kv_capacity_tokens", "max_total_num_tokens"),
        ("max_running_requests", "max_running_requests"),
        ("context_length_tokens", "context_len"),
        ("chunked_prefill_size_tokens", "chunked_prefill_size"),
        ("available_memory_bytes", "available_gpu_mem"),
        ("available_memory_bytes", "available_cpu_mem"),
    ):
        x = v.get(printed)
        if x is not None and (printed != "chunked_prefill_size" or x > 0):
            c[key] = x
            src.explain_fact(key, Basis.LOGGED)  # the effective value: this line proves it, whatever said it before


def _cap(src: SourceState, srv: ServerState, e: ev.MambaCap) -> None:
    c = srv.capacity
    c["max_running_requests"] = e.cap
    c["mamba_capped_max_running_requests"] = e.cap
    if e.slots is not None:
        c.setdefault("mamba_capacity_slots", e.slots)
    if e.slots_per_request is not None:
        c["mamba_slots_per_request"] = e.slots_per_request
    if e.requested is not None:
        c["requested_max_running_requests"] = e.requested


def _reduced(src: SourceState, srv: ServerState, e: ev.RequestCapReduced) -> None:
    srv.capacity["max_running_requests"] = e.effective
    srv.capacity["requested_max_running_requests"] = e.requested


def _replay(src: SourceState, srv: ServerState, e: ev.ReplaySSMBuffers) -> None:
    srv.capacity["replayssm_record_length"] = e.record_length
    srv.replayssm_buffer_bytes.update(e.buffers)


def _unified(src: SourceState, srv: ServerState, e: ev.UnifiedMemory) -> None:
    if e.enabled:
        src.config["enable_unified_memory"] = True
    src.unified_memory.update(e.values)
    v = e.values
    if "max_mamba_cache_size" in v:
        srv.capacity["mamba_capacity_slots"] = v["max_mamba_cache_size"]
    if "max_total_num_tokens" in v:
        srv.capacity["kv_capacity_tokens"] = v["max_total_num_tokens"]
    if "max_num_reqs" in v:
        srv.capacity["max_running_requests"] = v["max_num_reqs"]


def _swa(src: SourceState, srv: ServerState, e: ev.SWAPool) -> None:
    if e.swa_tokens is not None:
        srv.capacity["swa_capacity_tokens"] = e.swa_tokens
    if e.full_tokens is not None:
        srv.capacity["kv_capacity_tokens"] = e.full_tokens


def _config(src: SourceState, srv: ServerState, e: ev.ServerConfig) -> None:
    if e.version:
        src.version = e.version
    for k, v in e.args.items():
        if k in CONFIG_KEYS or e.kind in ("kv_cache_dtype", "max_num_seqs_default", "max_model_len"):
            src.config[k] = v
    if e.kind == "max_num_seqs_default":
        src.config["_max_num_seqs_default"] = e.args.get("max_num_seqs")
    if e.kind == "server_args":
        # the requested value, until the scheduler summary says the effective one (a server that
        # dies before its summary still shows it); -1 / None: chunked prefill off or not resolved
        v = e.args.get("chunked_prefill_size")
        if type(v) is int and v > 0 and "chunked_prefill_size_tokens" not in srv.capacity:
            srv.capacity["chunked_prefill_size_tokens"] = v
            src.explain_fact("chunked_prefill_size_tokens", Basis.LOGGED, REQUESTED_CHUNK)


def _weights(src: SourceState, srv: ServerState, e: ev.WeightsLoaded) -> None:
    if e.weight_bytes is not None:
        srv.capacity["weights_bytes"] = e.weight_bytes
    if e.dtype:
        src.config.setdefault("dtype", e.dtype)


def _starting(src: SourceState, srv: ServerState, e: ev.ServerStarting) -> None:
    if e.version:
        src.version = e.version
    if e.model:
        src.config.setdefault("model", e.model)


def _revise(src: SourceState, srv: ServerState, key: str, stage: str, value: float, text: str | None = None) -> None:
    """Set a fact of :data:`revisions.REVISED` at ``stage``: the revision rule (exporter/state/revisions.py) says whether
    it is the value in force and whether it is exported yet; its proof is this line, which names the earlier
    value of the boot it settles."""
    hist = srv.revisions.setdefault(key, [])
    r = Revision(stage, float(value), src.last_ts, text, src.at[0])
    if revisions.revise(hist, r):
        if revisions.provisional(r, revisions.sizes_after_warmup(src.config, src.version)):
            srv.capacity.pop(key, None)
        else:
            srv.capacity[key] = r.value
            earlier = revisions.revised_by(hist, r)
            src.explain_fact(key, Basis.LOGGED, revisions.rule_of(r, earlier), revises=earlier.line if earlier else None)


def _kvcap(src: SourceState, srv: ServerState, e: ev.KVCapacity) -> None:
    c = srv.capacity
    if e.device:
        src.config["_device"] = e.device.lower()
    if e.tokens is not None:
        c["kv_capacity_tokens"] = e.tokens
    if e.max_concurrency is not None:
        c["max_concurrency"] = e.max_concurrency
    if e.max_model_len is not None:
        _revise(src, srv, "context_length_tokens", ev.FINAL, e.max_model_len)
    if e.gpu_blocks is not None:
        _revise(src, srv, "kv_blocks", ev.FINAL, e.gpu_blocks)
    if e.tokens is not None:
        # the KV-size line closes the sizing: a value still held as an estimate was the final one after all
        for key in revisions.REVISED:
            r = revisions.settled(srv.revisions.get(key, []))
            if r is not None and key not in c:
                c[key] = r.value
                src.explain_fact(key, Basis.LOGGED, revisions.SETTLED_BY_KV_SIZE, line=r.line)


def _kvmem(src: SourceState, srv: ServerState, e: ev.KVMemory) -> None:
    c = srv.capacity
    if e.stage in (ev.MEASURED, ev.FINAL):
        src.config["_extensible"] = True  # lines only the extensible KV cache prints (vLLM 0.34)
    if e.kv_bytes is not None:
        _revise(src, srv, "kv_capacity_bytes", e.stage, e.kv_bytes, e.text)
    if e.blocks is not None:
        _revise(src, srv, "kv_blocks", e.stage, e.blocks, e.text)
    if e.device_total_bytes is not None:
        c["_device_total_bytes"] = e.device_total_bytes
    if e.requested_bytes is not None:
        c["_requested_bytes"] = e.requested_bytes
    if e.memory_utilization is not None:
        c["_gpu_memory_utilization"] = e.memory_utilization
    if e.withheld_bytes is not None:
        c["_withheld_bytes"] = e.withheld_bytes
        srv.revisions["withheld_bytes"] = [Revision(e.stage, e.withheld_bytes, src.last_ts, e.text)]  # its line, for report


def _context_fit(src: SourceState, srv: ServerState, e: ev.ContextFit) -> None:
    if e.stage in (ev.ESTIMATE, ev.FINAL):
        src.config["_extensible"] = True  # 0.34's forms (the estimate says the length is fitted again after warmup)
    _revise(src, srv, "context_length_tokens", e.stage, e.max_model_len, e.text)


def _layout(src: SourceState, srv: ServerState, e: ev.HybridLayout) -> None:
    c = srv.capacity
    if e.block_size is not None:
        c["attention_block_size_tokens"] = e.block_size
        cfg = src.config
        v = parse_version(src.version)
        if "mamba_cache_mode" not in cfg and cfg.get("enable_prefix_caching") is False and v is not None and v >= (0, 15, 0, 0):
            # a hybrid with prefix caching off logs no 'Mamba cache mode is set' line: its mode is none (0.15+)
            cfg["mamba_cache_mode"] = "none"
            src.explain_fact("config/mamba_cache_mode", Basis.DERIVED, MAMBA_MODE_NONE)
    if e.padding_ratio is not None:
        c["mamba_page_padding_ratio"] = e.padding_ratio
    if e.mamba_cache_mode:
        src.config["mamba_cache_mode"] = e.mamba_cache_mode
    if e.mamba_ssm_dtype:
        src.config["mamba_ssm_cache_dtype"] = e.mamba_ssm_dtype
    if e.cpu_avx512_bf16:
        src.config["_cpu_avx512_bf16"] = True


def _kv_groups(src: SourceState, srv: ServerState, e: ev.KVCacheGroups) -> None:
    if e.block_sizes:
        srv.capacity["kv_cache_groups"] = len(e.block_sizes)


def _gdn_kernel(src: SourceState, srv: ServerState, e: ev.GDNPrefillKernel) -> None:
    src.config["_gdn_prefill_kernel"] = e.kernel


def _blocks_exceeded(src: SourceState, srv: ServerState, e: ev.MambaBlocksExceeded) -> None:
    srv.capacity["mamba_blocks"] = e.blocks
    if e.max_num_seqs is not None:
        srv.capacity["requested_max_running_requests"] = e.max_num_seqs
    srv.capacity["mamba_blocks_exceeded"] = 1.0


_HANDLERS = {
    ev.BatchStats: _batch,
    ev.Retraction: _retraction,
    ev.Preemption: _preemption,
    ev.SpecDecoding: _spec,
    ev.PoolExhausted: _exhausted,
    ev.MambaCacheAllocated: _mamba,
    ev.KVCacheAllocated: _kv,
    ev.SchedulerSummary: _summary,
    ev.MambaCap: _cap,
    ev.RequestCapReduced: _reduced,
    ev.ReplaySSMBuffers: _replay,
    ev.UnifiedMemory: _unified,
    ev.SWAPool: _swa,
    ev.ServerConfig: _config,
    ev.WeightsLoaded: _weights,
    ev.ServerStarting: _starting,
    ev.KVCapacity: _kvcap,
    ev.KVMemory: _kvmem,
    ev.ContextFit: _context_fit,
    ev.HybridLayout: _layout,
    ev.MambaBlocksExceeded: _blocks_exceeded,
    ev.KVCacheGroups: _kv_groups,
    ev.GDNPrefillKernel: _gdn_kernel,
    ev.Lifecycle: _lifecycle,
    ev.ServerReady: _ready,
}
_NO_FACTS = frozenset((_lifecycle, _ready, _exhausted))  # handlers that set no fact (nothing to prove)


def _speculative(cfg: dict[str, object]) -> bool:
    """Whether the configuration logged so far runs speculative decoding (SGLang server_args, vLLM's config)."""
    for k in ("speculative_algorithm", "speculative_config"):
        v = cfg.get(k)
        if v not in (None, "", "None", "none", {}):
            return True
    return False
