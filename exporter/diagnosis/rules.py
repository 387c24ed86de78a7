"""Diagnosis rules: which pool limits concurrency, evaluated on the log's own time.

Every rule is a per-(source, dp_rank) verdict exported as ``hybrid_cache_finding{rule} 0|1``.
The rules run as a :class:`~exporter.state.pipeline.Pipeline` observer, i.e. on every applied event,
and only ever look at the event's log timestamp (``Line.ts``), never the wall clock: ``replay``
of a file and ``serve`` tailing the same lines reach the same verdicts at the same lines.

Runtime rules (``mamba_bound``, ``kv_bound``, ``request_cap_bound``, ``retraction_storm``) are
sustained conditions with hysteresis (:class:`Hysteresis`): a rule fires only after its condition
held for ``for_seconds`` of log time across at least ``min_samples`` batch/stats lines, and clears
only after it was false for ``clear_seconds`` across ``clear_min_samples`` lines. Up to
``tolerate`` consecutive opposite samples do not restart a pending window, so a single noisy
batch line can neither fire nor clear a finding. A gap of more than ``max_gap_seconds`` between
samples restarts the pending window (an idle server says nothing about the past minute).

Startup rules (``mamba_capped``) are facts of the boot: they fire on the lines that prove them and
clear when the log shows a restart. ``mamba_exhausted`` is an event rule: it fires on SGLang's
"Not enough space for mamba cache" and holds for ``event_hold_seconds`` of log time.

Thresholds are in :class:`RulesConfig` (YAML via ``--rules-config``); docs/rules.md documents them.
Evidence (timestamped raw lines), usage histograms and binding-time shares are kept, bounded, in the
diagnosis' memory (:mod:`exporter.diagnosis.memory`) for ``hybrid-cache-exporter report``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

from parsers import clock
from parsers import events as ev

from ..catalogues.rulebook import BINDING, MAMBA_CAPPED, MAMBA_EXHAUSTED, RETRACTION_STORM, RULE_IDS, SUSTAINED_RULES, WINDOWED_RULES
from ..state.facts import facts_of
from ..state.store import ENDED, QUIET_SECONDS, ServerState, Silence, SourceState
from .memory import ServerMemory, close_boot, memory_of, source_memory

# end at once when the server goes idle, stops or dies: no sample will come to clear them (docs/rules.md)
ENDING_RULES = (*SUSTAINED_RULES, *WINDOWED_RULES)
Conditions = tuple[bool | None, bool | None, bool | None]  # of one sample, in SUSTAINED_RULES order; None: cannot tell
_BIND_MAMBA, _BIND_KV, _BIND_REQUESTS, _BIND_NONE = BINDING  # the pools of the sustained rules, in their order

EVIDENCE_LINE_MAX = 400  # characters of a raw line kept as evidence
EPISODES_MAX = 50  # fire/clear episodes kept per rule


# --------------------------------------------------------------------------------------------
# configuration


@dataclass
class RulesConfig:
    """Thresholds and windows of the rules (defaults documented in docs/rules.md)."""

    # mamba_bound
    mamba_high: float = 0.90  # mamba usage at/above this is "full"
    kv_gap: float = 0.30  # KV usage at most mamba usage minus this is "far lower" ...
    kv_low: float = 0.50  # ... or KV usage below this
    # kv_bound
    kv_high: float = 0.90  # KV usage at/above this is "full"
    mamba_room: float = 0.70  # the mamba pool has room below this usage
    retraction_window_seconds: float = 60.0  # a retraction/preemption this recent counts as KV pressure
    # request_cap_bound
    headroom: float = 0.85  # both pools below this usage have headroom
    # sustain / hysteresis (log time)
    for_seconds: float = 60.0
    min_samples: int = 3
    clear_seconds: float = 120.0
    clear_min_samples: int = 3
    tolerate: int = 1  # consecutive opposite samples tolerated inside a pending window
    max_gap_seconds: float = 300.0
    # retraction_storm
    storm_window_seconds: float = 120.0
    storm_min_events: int = 3  # retraction lines (SGLang) / intervals with preemptions (vLLM) in the window
    # mamba_exhausted
    event_hold_seconds: float = 600.0
    # silence (docs/rules.md#silence): a serving SGLang source with no batch line for longer than this (log
    # time, or serve's wall clock once its log is read to the end) is idle; 0 turns it off
    quiet_seconds: float = QUIET_SECONDS
    # engine release when the log does not tell (SGLang prints no version line), e.g. "0.5.19"
    engine_version: str | None = None

    @classmethod
    def from_mapping(cls, data: dict | None) -> RulesConfig:
        """Build from a YAML/dict mapping; unknown keys are an error (typos must not pass)."""
        data = dict(data or {})
        if "rules" in data and isinstance(data["rules"], dict) and len(data) == 1:
            data = dict(data["rules"])
        names = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(f"unknown rules-config keys: {', '.join(unknown)} (known: {', '.join(sorted(names))})")
        kw = {}
        for k, v in data.items():
            if k == "engine_version":
                kw[k] = None if v is None else str(v)
            elif names[k].type in ("int", int):
                kw[k] = int(v)
            else:
                kw[k] = float(v)
        return cls(**kw)


def load_config(path: str | None) -> RulesConfig:
    """Read a ``--rules-config`` YAML file (None -> defaults)."""
    if not path:
        return RulesConfig()
    import yaml

    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    if data is not None and not isinstance(data, dict):
        raise ValueError(f"{path}: rules config must be a mapping")
    return RulesConfig.from_mapping(data)


# --------------------------------------------------------------------------------------------
# versions: exporter/capacity/version.py (the release an SGLang log proves: version.sglang_features)


# --------------------------------------------------------------------------------------------
# the rules


def _clip(line: str) -> str:
    line = line.rstrip("\r\n")
    return line if len(line) <= EVIDENCE_LINE_MAX else line[: EVIDENCE_LINE_MAX - 1] + "…"


class FindingObserver(Protocol):
    """What watches the rules (the recommendations): told of every transition of a finding, and of every
    sample and every other line while a finding is live. The rules know nothing else about who listens (the
    composition root, ``exporter/app.py``, wires them), so the flow is one way: rules -> observers."""

    def transition(self, src: SourceState, srv: ServerState, rule: str, on: bool, cfg: RulesConfig) -> None: ...

    def sample(self, src: SourceState, srv: ServerState, ts: float, cfg: RulesConfig) -> None: ...

    def event(self, src: SourceState, srv: ServerState, e: object, cfg: RulesConfig) -> None: ...


class Rules:
    """The observer: ``Rules(config)(src, srv, parsed_line, raw_line)``."""

    def __init__(self, config: RulesConfig | None = None) -> None:
        self.config = config or RulesConfig()
        self.observers: list[FindingObserver] = []

    # ---- memory helpers
    def memory(self, srv: ServerState) -> ServerMemory:
        """``srv``'s diagnosis memory, its per-rule tables filled on first use."""
        m = srv.rule_memory
        if m is None or not m.hyst:
            m = memory_of(srv)
            m.fill(srv.findings, EPISODES_MAX)
        return m

    def _set(self, src: SourceState, srv: ServerState, rule: str, on: bool, ts: float | None, evidence: list[tuple[float, str]]) -> None:
        m = self.memory(srv)
        was = srv.findings.get(rule, 0)
        srv.findings[rule] = 1 if on else 0
        if bool(was) == on:
            return
        eps = m.episodes[rule]
        evd = m.evidence[rule]
        if on:
            eps.append([ts, None])
            evd.fire = [(t, _clip(x)) for t, x in evidence if x][:4]
            evd.recent.clear()
            evd.clear = []
        else:
            if eps and eps[-1][1] is None:
                eps[-1][1] = ts
            evd.clear = [(t, _clip(x)) for t, x in evidence if x][:2]
        for o in self.observers:
            o.transition(src, srv, rule, on, self.config)

    # ---- observer entry point
    def __call__(self, src: SourceState, srv: ServerState, line: ev.Line, raw: str) -> None:
        if src.engine is None:
            return
        smem = src.rule_memory
        m = srv.rule_memory
        ts = line.ts
        if ts is None:
            ts = src.last_ts
        if smem is None or m is None or smem.known_servers != len(src.servers) or m.restarts_seen != src.restarts or not m.hyst:
            self._new_server_or_boot(src, srv, ts, raw)
            m = srv.rule_memory
        e = line.event
        if type(e) is ev.BatchStats:
            # the sample path (most calls)
            if ts is not None:
                if m.first_ts is None:
                    m.first_ts = ts
                m.last_ts = ts
            self._batch(src, srv, m, e, ts, raw)
        elif type(e) is Silence:
            self._silence(src, srv, m, e)
        else:
            self._event(src, srv, m, e, ts, raw)
            if self.observers and any(srv.findings.values()):
                # a line that is not a sample, while a finding is live: what the facts say may have changed (an
                # SGLang boot prints its mamba cap before its KV pool and the memory left)
                for o in self.observers:
                    o.event(src, srv, e, self.config)

        # event hold for mamba_exhausted; one restored from a snapshot is held from the first line after it
        if ts is not None and srv.findings.get(MAMBA_EXHAUSTED):
            ex_at = m.exhausted_at
            if ex_at is None:
                m.exhausted_at = ts
            elif ts - ex_at >= self.config.event_hold_seconds:
                self._set(src, srv, MAMBA_EXHAUSTED, False, ts, [(ts, raw)])

    def _new_server_or_boot(self, src: SourceState, srv: ServerState, ts: float | None, raw: str) -> None:
        """What needs checking only when the source changed, not per sample: every rule of every
        server is exported from the first line on (a new server gets them), and a restart forgets
        the startup facts of the old boot."""
        smem = source_memory(src)
        if smem.known_servers != len(src.servers):
            # a server first seen after this boot's restart was handled belongs to it (no new restart)
            handled = any(
                s.rule_memory is not None and s.rule_memory.hyst and s.rule_memory.restarts_seen == src.restarts
                for s in src.servers.values()
            )
            for s in src.servers.values():
                for r in RULE_IDS:
                    s.findings.setdefault(r, 0)
                if s.rule_memory is None or not s.rule_memory.hyst:
                    self.memory(s).restarts_seen = src.restarts if handled else 0
            smem.known_servers = len(src.servers)
        m = self.memory(srv)
        if m.restarts_seen != src.restarts:
            m.restarts_seen = src.restarts
            for s in src.servers.values():
                sm = self.memory(s)
                if sm.last_ts is not None:  # the old boot said something: keep its record (exporter/presentation/boots.py)
                    close_boot(sm, sm.boot_config, s.facts)
                    sm.boot_first_ts, sm.boot_config = ts, {}
                sm.restarts_seen = src.restarts
                if s.findings.get(MAMBA_CAPPED):
                    self._set(src, s, MAMBA_CAPPED, False, ts, [(ts or 0.0, raw)])
                sm.capped_detail = None

    def _event(self, src: SourceState, srv: ServerState, m: ServerMemory, e: object, ts: float | None, raw: str) -> None:
        """Any line but a sample (the state started a new generation of the facts for it): the event rules."""
        if ts is not None:
            if m.first_ts is None:
                m.first_ts = ts
            m.last_ts = ts

        if isinstance(e, ev.Retraction):
            if not e.test and ts is not None:
                m.retractions.append((ts, e.retracted))
                self._storm(src, srv, m, ts, raw)
        elif isinstance(e, ev.Preemption):
            if ts is not None:
                m.retractions.append((ts, 1))
                self._storm(src, srv, m, ts, raw)
        elif isinstance(e, ev.PoolExhausted):
            if e.pool == "mamba" and ts is not None:
                m.exhausted_at = ts
                if not srv.findings.get(MAMBA_EXHAUSTED):
                    self._set(src, srv, MAMBA_EXHAUSTED, True, ts, [(ts, raw)])
                else:
                    m.evidence[MAMBA_EXHAUSTED].recent.append((ts, _clip(raw)))
        elif isinstance(e, (ev.MambaCap, ev.SchedulerSummary, ev.MambaCacheAllocated, ev.MambaBlocksExceeded, ev.ServerConfig)):
            if type(e) is ev.ServerConfig:  # the boot's configuration, kept past a restart (which clears the source's)
                for s in src.servers.values():
                    self.memory(s).boot_config = dict(src.config)
            self._capped(src, srv, m, e, ts, raw)
        elif isinstance(e, ev.Lifecycle) and src.life in ENDED and ts is not None:
            for s in src.servers.values():  # a stop or a death ends what every rank was doing
                self._end(src, s, ts, raw)

    def _silence(self, src: SourceState, srv: ServerState, m: ServerMemory, e: Silence) -> None:
        """The source went idle by silence (docs/rules.md#silence): what an idle sample ends, ends as of the last
        batch line; the evidence is this server's last sample and the bound it outlived. The log time after it is
        no pool's binding time (it is not counted until the next sample)."""
        q = self.config.quiet_seconds
        note = f"(no batch line for more than {q:g} s after the one of {clock.wall_text(e.since)}: quiet_seconds, docs/rules.md#silence)"
        evidence = ([m.last_line] if m.last_line else []) + [(e.since + q, note)]
        for rule in ENDING_RULES:
            if m.hyst[rule].end(e.since) or srv.findings.get(rule):
                self._set(src, srv, rule, False, e.since, evidence)
        m.steady = tuple(m.hyst[r].steady for r in SUSTAINED_RULES)
        m.binding_last = None

    def _end(self, src: SourceState, srv: ServerState, ts: float, raw: str) -> None:
        """The server went idle, stopped or died: its ENDING_RULES clear now, ``raw`` their evidence."""
        m = self.memory(srv)
        for rule in ENDING_RULES:
            if m.hyst[rule].end(ts) or srv.findings.get(rule):
                self._set(src, srv, rule, False, ts, [(ts, raw)])
        m.steady = tuple(m.hyst[r].steady for r in SUSTAINED_RULES)

    # ---- runtime samples
    def conditions(self, src: SourceState, srv: ServerState, e: ev.BatchStats, ts: float | None) -> Conditions:
        """Instantaneous conditions of the sustained rules for one batch/stats line (a tuple: one is made per sample)."""
        cfg = self.config
        kv = e.kv_usage
        mamba = e.mamba_usage
        queued = e.queued
        running = e.running
        if running is not None and e.kind == "prefill" and e.new_seqs:
            running += e.new_seqs  # the prefill line prints the running batch before the new ones join
        m = srv.rule_memory
        facts = m.sample_facts
        if m.sample_gen != src.generation:  # a new generation of what the log said (SourceState.changed)
            facts = m.sample_facts = facts_of(src, srv, cfg)
            m.sample_gen = src.generation
        mcap, eff = facts.mamba_cap, facts.max_running
        waiting = queued is not None and queued > 0
        # every rule is a conjunction (docs/rules.md); the parts that are usually false (a full pool,
        # waiting requests) are tested first, so that a healthy sample stops early

        # mamba_bound: the mamba pool full while requests wait or the batch is pinned at the mamba cap,
        # or pinned while requests wait; and KV far lower
        if kv is None or (mamba is None and mcap is None):
            mamba_bound = None if kv is None or src.engine == ev.VLLM else False
        else:
            pinned = mcap is not None and running is not None and running >= mcap
            full = mamba is not None and mamba >= cfg.mamba_high
            mamba_bound = ((full and (waiting or pinned)) or (pinned and waiting)) and (
                kv <= (mamba if mamba is not None else 0.0) - cfg.kv_gap or kv < cfg.kv_low
            )

        # kv_bound: KV full while requests wait, or a recent retraction / preemption while requests
        # wait or KV is full; and the mamba pool has room. Retractions are looked up only under such
        # pressure (request_cap_bound asks for them only while requests wait)
        kv_full = kv is not None and kv >= cfg.kv_high
        recent_retraction = (waiting or kv_full) and _retracted(e, m, ts, cfg.retraction_window_seconds)
        if kv is None:
            kv_bound = None
        else:
            kv_bound = ((kv_full and waiting) or recent_retraction) and (mamba is None or mamba < cfg.mamba_room)

        # request_cap_bound: requests wait at the effective cap, which is not the mamba pool's, with no
        # recent retraction and headroom in both pools
        if running is None or eff is None:
            request_cap_bound = None
        else:
            request_cap_bound = (
                waiting
                and running >= eff
                and not recent_retraction
                and not (mcap is not None and eff >= mcap)
                and (kv is None or kv < cfg.headroom)
                and (mamba is None or mamba < cfg.headroom)
            )
        return mamba_bound, kv_bound, request_cap_bound

    def _batch(self, src: SourceState, srv: ServerState, m: ServerMemory, e: ev.BatchStats, ts: float | None, raw: str) -> None:
        """One sample: usage distributions, peaks, conditions, binding-time share, sustained rules, storm, and
        the observers while a finding is live. It runs for every sample, so the usual case is short: conditions
        equal to ``m.steady`` (the ones that change no hysteresis) feed no hysteresis at all."""
        cfg = self.config
        gap = cfg.max_gap_seconds
        pk = m.peaks
        v = e.running
        if v is not None and v > pk.get("running", -1):
            pk["running"] = v
        # request lengths: the KV tokens a running request holds, the prompt of a new one (exporter/diagnosis/workload.py)
        held = prompt = None
        if v:
            t = e.kv_used_tokens
            if t is not None:
                held = t / v
            elif e.kind == "stats" and e.kv_usage is not None:  # vLLM: the share of the logged pool
                f = m.sample_facts if m.sample_gen == src.generation else None  # (those of the last sample)
                if f is not None and f.capacity.kv_tokens:
                    held = e.kv_usage * f.capacity.kv_tokens / v
        n = e.new_seqs
        if n and e.new_tokens is not None:
            prompt = (e.new_tokens + (e.cached_tokens or 0)) / n
        m.add_sample(e.kv_usage, e.mamba_usage, e.swa_usage, held, prompt, ts, gap)
        v = e.queued
        if v is not None and v > pk.get("queued", -1):
            pk["queued"] = v
        if e.preemptions and ts is not None:
            m.retractions.append((ts, e.preemptions))
        conds = m.conditions = self.conditions(src, srv, e, ts)
        if ts is None:
            return
        m.last_line = (ts, raw)  # what a silence after it names (Rules._silence)
        # binding-time share and queued time (log time until the next sample, capped at max_gap)
        c_mamba, c_kv, c_req = conds
        last = m.binding_last
        if last is not None:
            dt = ts - last[0]
            if 0.0 < dt <= gap:  # a float literal: comparing an int with a float takes the slow path
                m.binding_seconds[last[1]] += dt
                if last[2]:
                    m.queued_seconds += dt
        q = e.queued
        m.binding_last = (
            ts,
            _BIND_MAMBA if c_mamba else _BIND_KV if c_kv else _BIND_REQUESTS if c_req else _BIND_NONE,
            q is not None and q > 0,
        )
        findings = srv.findings
        if src.life == "idle":
            # nothing running nor waiting: no pool binds, and vLLM prints no stats line after this one
            if None in m.steady or any(findings.get(r) for r in ENDING_RULES):
                self._end(src, srv, ts, raw)
            return
        if conds != m.steady:
            # a condition counts toward or against a window (or starts one): feed the rules, note the new steady ones
            hyst = m.hyst
            for rule, c in zip(SUSTAINED_RULES, conds, strict=True):
                if c is None:
                    continue
                h = hyst[rule]
                if c != h.steady:
                    tr = h.update(c, ts, cfg, raw)
                    if tr is not None:
                        self._set(src, srv, rule, tr == "fire", ts, h.made_by)
                        continue
                if c and findings.get(rule):
                    _keep_recent(m, rule, ts, raw)
            m.steady = tuple(hyst[r].steady for r in SUSTAINED_RULES)
        elif c_mamba or c_kv or c_req:
            # the usual sample of a live finding: nothing to count, the line is recent evidence
            for rule, c in zip(SUSTAINED_RULES, conds, strict=True):
                if c and findings.get(rule):
                    _keep_recent(m, rule, ts, raw)
        if e.preemptions or findings.get(RETRACTION_STORM):
            self._storm(src, srv, m, ts, raw)
        if self.observers and any(findings.values()):
            for o in self.observers:
                o.sample(src, srv, ts, cfg)

    def _storm(self, src: SourceState, srv: ServerState, m: dict, ts: float, raw: str) -> None:
        cfg = self.config
        n = m.retractions.count_within(ts, cfg.storm_window_seconds)
        h = m.hyst[RETRACTION_STORM]
        tr = h.update(n >= cfg.storm_min_events, ts, cfg, raw, fast=True)
        if tr == "fire":
            self._set(src, srv, RETRACTION_STORM, True, ts, h.made_by)
        elif tr == "clear":
            self._set(src, srv, RETRACTION_STORM, False, ts, h.made_by)
        elif n >= cfg.storm_min_events and srv.findings.get(RETRACTION_STORM) and ("etract" in raw or "Preempt" in raw):
            m.evidence[RETRACTION_STORM].recent.append((ts, _clip(raw)))

    # ---- startup: mamba_capped
    def _capped(self, src: SourceState, srv: ServerState, m: dict, e: object, ts: float | None, raw: str) -> None:
        boot = m.boot_lines
        if isinstance(e, ev.MambaCacheAllocated):
            boot["mamba"] = (ts, _clip(raw))
        elif isinstance(e, ev.SchedulerSummary):
            boot["summary"] = (ts, _clip(raw))
        elif isinstance(e, ev.ServerConfig) and e.kind in ("server_args", "non_default_args"):
            for s in src.servers.values():
                self.memory(s).boot_lines["config"] = (ts, _clip(raw))
        t = ts or 0.0
        if isinstance(e, ev.MambaCap):
            detail = f"max_running_requests capped to {e.cap} by the mamba state cache"
            if e.slots and e.slots_per_request:
                detail += f" ({e.slots} slots // {e.slots_per_request} per request)"
            m.capped_detail = detail + " (logged)"
            self._set(src, srv, MAMBA_CAPPED, True, ts, [(t, raw)])
            return
        if isinstance(e, ev.MambaBlocksExceeded):
            m.capped_detail = f"max_num_seqs ({e.max_num_seqs}) exceeds available Mamba cache blocks ({e.blocks})"
            self._set(src, srv, MAMBA_CAPPED, True, ts, [(t, raw)])
            return
        if srv.findings.get(MAMBA_CAPPED) or src.engine != ev.SGLANG:
            return
        # arithmetic on releases that do not print the cap warning
        for s in src.servers.values():
            if s.findings.get(MAMBA_CAPPED):
                continue
            c = s.capacity
            slots, eff = c.get("mamba_capacity_slots"), c.get("max_running_requests")
            if not slots or not eff or "max_running_requests" not in src.config:
                continue
            f = facts_of(src, s, self.config)
            spr, how = f.slots_per_request, f.slots_per_request_source
            if not spr:
                continue
            req, req_how = f.requested_max_running, f.requested_source
            if req is None:
                continue
            cap = int(slots) // spr
            if cap == int(eff) and eff < req:
                sm = self.memory(s)
                sm.capped_detail = (
                    f"max_running_requests={int(eff)} = max_mamba_cache_size {int(slots)} // {spr} slots per request "
                    f"[{how}] < requested {int(req)} [{req_how}] (derived)"
                )
                bl = sm.boot_lines
                lines = [bl[k] for k in ("config", "mamba", "summary") if k in bl]
                self._set(src, s, MAMBA_CAPPED, True, ts, lines or [(t, raw)])


def _retracted(e: ev.BatchStats, m: ServerMemory, ts: float | None, window: float) -> bool:
    """Whether the line reports preemptions, or a retraction / preemption lies within ``window`` of log time before it."""
    if e.preemptions:
        return True
    retr = m.retractions
    return ts is not None and len(retr) > 0 and 0.0 <= ts - retr[-1][0] <= window


def _keep_recent(m: ServerMemory, rule: str, ts: float, raw: str) -> None:
    """Keep a sample line as recent evidence of a live finding (clipped only when long: most lines are not)."""
    m.evidence[rule].recent.append((ts, raw if len(raw) <= EVIDENCE_LINE_MAX else _clip(raw)))


__all__ = ["ENDING_RULES", "FindingObserver", "Rules", "RulesConfig", "load_config"]
