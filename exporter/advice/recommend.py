"""Recommendations: the flags that answer a server's findings, filtered by what its log says.

The recommendations observe the rules (:class:`Recommender`, wired by the composition root): when a finding
fires or clears, and every 30 s of log time while one is live, :func:`update` walks the flags that answer each
finding (``flags.playbook``) and asks each catalogue entry (``exporter/advice/flags.py``) for its candidate: the gates
(release — vLLM prints it, SGLang's is inferred —, the SSM / KV dtypes in use, the radix strategy, PD
disaggregation, speculative decoding, HiCache, DCP, unified memory) and the value, read from the server's
facts and demand. A flag's candidate is computed once per server, so one server never gets one flag with two
values. The result goes to

* ``srv.recommendations``: ``[(rule, flag, value, rank), ...]`` -> ``hybrid_cache_recommendation_info``: the
  ranked ones only (no caveat), each finding's in the order of :func:`order` (rank 1: start here)
* ``memory_of(srv).recommendations`` (exporter/diagnosis/memory.py): :class:`Recommendation` objects with the expected effect
  (``flags.effect_from_log``) and the reason, for ``report``
* ``srv.recommended_ratio``: the ``--mamba-full-memory-ratio`` that balances the observed usage of
  both pools (``capacity.balanced_mamba_full_memory_ratio`` at the p95 usages), SGLang only, while
  ``mamba_bound`` / ``kv_bound`` / ``mamba_capped`` is live.

A gate that needs a minimum release ("only >= 0.5.17") passes only when the log *proves* that
release; an unknown release gets the flags that exist everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from parsers import events as ev

from .. import capacity as cap
from ..catalogues.rulebook import KV_BOUND, MAMBA_BOUND, MAMBA_CAPPED
from ..diagnosis.memory import memory_of
from ..diagnosis.rules import Rules, RulesConfig
from ..diagnosis.workload import demand_of
from ..state.facts import facts_of
from ..state.store import ServerState, SourceState
from . import flags


@dataclass
class Recommendation:
    rule: str
    flag: str
    value: str
    effect: str  # expected effect (human text, not a label)
    why: str = ""  # why this flag applies to this server
    rank: int = 0  # its place in the finding's order (1: start here); 0: it carries a caveat, never exported
    caveats: tuple[str, ...] = ()  # why it must not be pasted as is (breaks a request that fits now, needs more, warned)
    gain: int | None = None  # requests the cap gains (the effect from the log); None: not computable
    risk: int = 0  # flags.RISKS
    assumes: tuple[str, ...] = ()  # what it rests on that the log does not prove

    def as_tuple(self) -> tuple[str, str, str, str]:
        """What ``hybrid_cache_recommendation_info`` carries: ``(rule, flag, value, rank)``."""
        return (self.rule, self.flag, self.value, str(self.rank))

    def as_dict(self) -> dict:
        return {
            "rule": self.rule,
            "flag": self.flag,
            "value": self.value,
            "effect": self.effect,
            "why": self.why,
            "rank": self.rank,
            "caveats": list(self.caveats),
            "gain": self.gain,
            "risk": flags.RISKS[self.risk],
            "assumes": list(self.assumes),
        }


def context(src: SourceState, srv: ServerState, findings, cfg: RulesConfig | None = None) -> flags.Context:
    """What the catalogue's candidates read for ``srv``, answering ``findings``."""
    cfg = cfg or RulesConfig()
    f = facts_of(src, srv, cfg)
    d = demand_of(srv)
    return flags.Context(src, srv, f, d, f.observed(d), tuple(findings), cfg)


def observed(src: SourceState, srv: ServerState, cfg: RulesConfig | None = None) -> cap.ObservedCapacity:
    """The capacity model's view of this server, from the log only (its facts + the observed demand)."""
    return facts_of(src, srv, cfg).observed(demand_of(srv))


def balanced_ratio(src: SourceState, srv: ServerState, cfg: RulesConfig | None = None) -> float | None:
    """The ``--mamba-full-memory-ratio`` that balances the observed p95 usage of both pools (SGLang)."""
    return flags.balanced_ratio(context(src, srv, (), cfg))


def for_rules(src: SourceState, srv: ServerState, rules, cfg: RulesConfig | None = None) -> list[Recommendation]:
    """Recommendations (with expected effects) for the given rule ids of ``srv``: every flag once per server,
    its one value listed under each of the given findings it answers, each finding's in :func:`order` (the
    ranked ones first, then those with a caveat)."""
    return _recommend(context(src, srv, rules, cfg))


def _recommend(x: flags.Context) -> list[Recommendation]:
    """:func:`for_rules` of a context (the findings it answers, the facts and the demand read once)."""
    srv = x.srv
    tokens = _tokens_per_request(srv)  # the same for every candidate: read once
    started = not srv.capacity.get("mamba_blocks_exceeded")
    made: dict[str, tuple[flags.Candidate | None, str, cap.Effect | None]] = {}
    recs: list[Recommendation] = []
    seen: set[tuple[str, str, str]] = set()
    for rule in x.findings:
        mine: list[Recommendation] = []
        for name in flags.playbook(x, rule):
            if name not in made:
                e = flags.BY_NAME[cap.norm_flag(name)]
                c = e.candidate(x) if e.candidate is not None else None
                text, eff = "", None
                if c is not None:
                    try:
                        eff = flags.effect_from_log(x.observed, c.flag or e.flag, c.value)
                    except (ValueError, ZeroDivisionError, TypeError):  # a log too incomplete for the model
                        eff = None
                    text = str(eff) if eff is not None else c.fallback
                made[name] = (c, text, eff)
            c, text, eff = made[name]
            if c is None or rule not in c.answers:
                continue
            flag = c.flag or name
            key = (rule, flag, c.value)
            if key not in seen:
                seen.add(key)
                entry = flags.BY_NAME[cap.norm_flag(name)]
                gain = concurrency_gain(eff, tokens, started=started)
                caveats = (*_breaks(x.observed, eff), *(eff.unproven if eff else ()), *_loses(eff, gain), *c.needs, *c.warns)
                mine.append(Recommendation(rule, flag, c.value, text, c.why, 0, caveats, gain, entry.risk, c.assumes))
        recs += order(mine)
    return recs


def order(recs: list[Recommendation]) -> list[Recommendation]:
    """One finding's recommendations in the documented order (docs/rules.md#the-order), ranked 1, 2, ...; those
    with a caveat last, unranked. The order, key by key:

    1. no caveat: a value that breaks a request the KV pool holds now, needs what the server lacks, or that the
       engine warns about is never the one to start with (and never pasted into an alert);
    2. the risk of the change (``flags.RISKS``): no numerics changed and no memory moved, then memory moved
       between the pools, then numerics or what the server serves, then a newer memory manager;
    3. what the log proves: a value that rests only on what the log says before one that assumes a default;
    4. the expected gain in concurrency (the request cap, from the log): a known gain first, the larger first;
    5. the playbook's order (the rule catalogue's actions).
    """

    def key(ir: tuple[int, Recommendation]) -> tuple:
        i, r = ir
        gain = 0 if r.gain is not None and r.gain > 0 else 1 if r.gain is None else 2
        return (bool(r.caveats), r.risk, bool(r.assumes), gain, -(r.gain or 0), i)

    out = [r for _, r in sorted(enumerate(recs), key=key)]
    n = 0
    for r in out:
        if not r.caveats:
            n += 1
            r.rank = n
    return out


def merged(recs: list[Recommendation], text=lambda flag, value: f"{flag} {value}") -> list[dict]:
    """A server's recommendations with each flag once (its one value answers several findings): its rank under
    each finding, ordered by its best rank (the ranked ones first, then those with a caveat). ``text`` writes a
    flag as a command line has it."""
    out: dict[tuple[str, str], dict] = {}
    for r in recs:
        key = (r.flag, r.value)
        d = out.get(key)
        if d is None:
            d = out[key] = {
                "flag": text(r.flag, r.value),
                "name": r.flag,
                "value": r.value,
                "effect": r.effect,
                "why": r.why,
                "rules": [],
                "ranks": {},
                "gain": r.gain,
                "risk": flags.RISKS[r.risk],
                "assumes": list(r.assumes),
                "caveats": list(r.caveats),
            }
        d["rules"].append(r.rule)
        if r.rank:
            d["ranks"][r.rule] = r.rank
    items = list(out.values())
    for d in items:
        d["rank"] = min(d["ranks"].values()) if d["ranks"] else 0
    items.sort(key=lambda d: (not d["rank"], d["rank"] or 0))
    return items


def _tokens_per_request(srv: ServerState) -> int | None:
    """The KV tokens a running request holds, at the median of the log's samples (exporter/diagnosis/workload.py)."""
    ls = memory_of(srv).lengths.get("running")
    return ls.quantile(0.5) if ls is not None and ls.n else None


def concurrency_gain(eff: cap.Effect | None, tokens: int | None, started: bool = True) -> int | None:
    """Requests the change adds to what the server can run: the request cap, or the requests of ``tokens`` KV
    tokens each the KV pool holds where that is lower (a KV-bound server gains with its KV pool, not its cap).
    ``started``: False where the engine refused to start (vLLM's "exceeds available Mamba cache blocks"): it runs none."""
    if eff is None or eff.cap_before is None or eff.cap_after is None:
        return None
    before, after = (eff.cap_before if started else 0), eff.cap_after
    if tokens and eff.kv_tokens_before is not None:
        kv_after = eff.kv_tokens_after if eff.kv_tokens_after is not None else eff.kv_tokens_before
        before = min(before, eff.kv_tokens_before // tokens) if started else 0
        after = min(after, kv_after // tokens)
    return after - before


def _loses(eff: cap.Effect | None, gain: int | None) -> tuple[str, ...]:
    if eff is None or gain is None or gain >= 0:
        return ()
    return (f"lowers the concurrency the log shows possible by {-gain:,} request(s): {eff.summary}",)


def _breaks(o: cap.ObservedCapacity, eff: cap.Effect | None) -> tuple[str, ...]:
    """The caveat of an effect that shrinks the KV pool below the longest request it holds now (the context
    length, or the whole pool where that is shorter), or does not fit at all."""
    if eff is None:
        return ()
    if any("does not fit" in n for n in eff.notes):
        return ("does not fit: no memory left for the KV pool",)
    before, after, ctx = eff.kv_tokens_before, eff.kv_tokens_after, o.context_len
    if before is None or after is None or after >= before:
        return ()
    longest = min(before, ctx) if ctx else before
    if after >= longest:
        return ()
    where = f"context length {ctx:,}" if ctx else "the context length is not logged"
    return (
        f"shrinks the KV pool {before:,} → {after:,} tokens: a request longer than {after:,} tokens no longer fits ({where}); "
        f"safe only together with {'--max-model-len' if o.engine == 'vllm' else '--context-length'} {after} or less, "
        "if the traffic allows",
    )


def update(src: SourceState, srv: ServerState, cfg: RulesConfig | None = None) -> list[Recommendation]:
    """Recompute recommendations for the live findings of ``srv`` (and the ratio, from the same context)."""
    x = context(src, srv, [r for r, on in srv.findings.items() if on], cfg)
    recs = _recommend(x)
    _show(srv, recs, _ratio(x))
    return recs


def _show(srv: ServerState, recs: list[Recommendation], ratio: float | None) -> None:
    """Make ``recs`` and ``ratio`` what ``srv`` exports (the ranked ones, as tuples) and what the report reads."""
    srv.recommendations = [r.as_tuple() for r in recs if r.rank]
    memory_of(srv).recommendations = recs
    srv.recommended_ratio = ratio


def inputs(src: SourceState, srv: ServerState, cfg: RulesConfig) -> tuple:
    """What :func:`update` reads, as far as it can change between two batch samples: the live
    findings and the demand (peaks, p95 / max usages); plus stamps for the rest (the facts change only
    with the source's generation: a line but a sample, a restart, the engine told) and the thresholds.

    Recommendations are a function of these, so a refresh with the inputs of the last one is
    skipped: most refreshes of a long-lived finding are (tests/pipeline/test_sample_cost.py checks that the
    state is the same as with every refresh computed, sample by sample)."""
    return (
        src.generation,
        tuple(vars(cfg).values()),
        tuple(srv.findings.items()),
        demand_of(srv),
    )


RECOMMEND_REFRESH_SECONDS = 30.0
# lines of a running server that change none of the facts the recommendations read (Recommender.event)
RUNTIME_EVENTS = (ev.Retraction, ev.Preemption, ev.SpecDecoding, ev.PoolExhausted, ev.Unrecognized)
RECOMMEND_KEPT_MAX = 16  # distinct inputs whose recommendations a server keeps (oldest dropped first)


class Recommender:
    """Observes the rules (:class:`exporter.diagnosis.rules.FindingObserver`): recomputes a server's recommendations
    when one of its findings changes, and refreshes them (their values follow the usage percentiles) every
    30 s of log time while a finding is live, unless nothing they depend on changed (:func:`inputs`).

    A finding near its thresholds flaps (fire, clear, fire ... a few samples apart) while the demand hardly
    moves, so the same inputs come back again and again: the server keeps the recommendations of its last
    few distinct inputs (``ServerMemory.reco_kept``) and takes them instead of recomputing. They are a
    function of the inputs (tests/pipeline/test_sample_cost.py checks the state after every event against
    every refresh computed), so this changes no value, only how often the catalogue runs."""

    def transition(self, src: SourceState, srv: ServerState, rule: str, on: bool, cfg: RulesConfig) -> None:
        self._refresh(src, srv, cfg, inputs(src, srv, cfg))

    def event(self, src: SourceState, srv: ServerState, e: object, cfg: RulesConfig) -> None:
        """A line that is not a sample while a finding is live: a fact the recommendations read may have changed
        (an SGLang boot prints its mamba cap, which fires ``mamba_capped``, before its KV pool and the memory left:
        advice made at the cap line alone would stand until the next sample, which an idle server never prints).
        Runtime events (retractions, preemptions, speculative metrics, an exhausted pool) change no fact: skipped,
        so that a storm of them costs nothing here."""
        if isinstance(e, RUNTIME_EVENTS):
            return
        now = inputs(src, srv, cfg)
        if now != memory_of(srv).reco_inputs:
            self._refresh(src, srv, cfg, now)

    def sample(self, src: SourceState, srv: ServerState, ts: float, cfg: RulesConfig) -> None:
        m = memory_of(srv)
        if ts - m.reco_ts < RECOMMEND_REFRESH_SECONDS:
            return
        m.reco_ts = ts
        now = inputs(src, srv, cfg)
        if now != m.reco_inputs:
            self._refresh(src, srv, cfg, now)

    @staticmethod
    def _refresh(src: SourceState, srv: ServerState, cfg: RulesConfig, now: tuple) -> None:
        """Make ``srv``'s recommendations those of the inputs ``now``: the kept ones, else :func:`update`'s."""
        m = memory_of(srv)
        kept = m.reco_kept.get(now)
        if kept is None:
            recs = update(src, srv, cfg)
            if len(m.reco_kept) >= RECOMMEND_KEPT_MAX:
                del m.reco_kept[next(iter(m.reco_kept))]
            m.reco_kept[now] = (tuple(recs), srv.recommended_ratio)
        else:
            _show(srv, list(kept[0]), kept[1])
        m.reco_inputs = now


def observe(rules: Rules) -> Rules:
    """Make the recommendations follow ``rules`` (idempotent); returns ``rules``."""
    if not any(isinstance(o, Recommender) for o in rules.observers):
        rules.observers.append(Recommender())
    return rules


def ratio_of(src: SourceState, srv: ServerState, cfg: RulesConfig | None = None) -> float | None:
    """The recommended mamba/full memory ratio while a finding it answers is live, else None."""
    return balanced_ratio(src, srv, cfg) if _ratio_live(srv.findings) else None


def _ratio(x: flags.Context) -> float | None:
    """:func:`ratio_of` of a context (the ratio reads its facts and demand, not the findings it answers)."""
    return flags.balanced_ratio(x) if _ratio_live(x.srv.findings) else None


def _ratio_live(findings: dict[str, int]) -> bool:
    """Whether a finding the ratio answers is live."""
    return bool(findings.get(MAMBA_BOUND) or findings.get(KV_BOUND) or findings.get(MAMBA_CAPPED))


__all__ = [
    "Recommendation",
    "merged",
    "order",
    "Recommender",
    "balanced_ratio",
    "context",
    "for_rules",
    "inputs",
    "observe",
    "observed",
    "ratio_of",
    "update",
]
