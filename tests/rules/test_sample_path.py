"""The rules' cheaper sample path gives exactly what the straightforward code gave: the hysteresis that
skips steady samples makes the same transitions as the one that counted every sample, the conditions
tested in their cheap-first order have the same values as the rules as written in docs/rules.md, and a
sample reads the facts of its generation (also after a new configuration or a restart)."""

from __future__ import annotations

import random
from collections import deque
from types import SimpleNamespace

import pytest
from test_rules import T0, Feeder, sglang_boot  # tests/rules is on the path (pytest prepends it)

from exporter.diagnosis.memory import Hysteresis
from exporter.diagnosis.rules import Rules, RulesConfig
from exporter.state.facts import facts_of
from parsers import events as ev


class _CountingHysteresis(Hysteresis):
    """The hysteresis as it was: every sample goes through the whole update (``_count``), which
    moves ``last_ts`` and the windows; the steady shortcut of ``update`` is what is under test."""

    def update(self, cond: bool, ts: float, cfg, line: str = "", fast: bool = False) -> str | None:
        return self._count(cond, ts, cfg, line, fast)


@pytest.mark.parametrize("seed", range(40))
def test_hysteresis_skipping_steady_samples_makes_the_same_transitions(seed: int) -> None:
    rnd = random.Random(seed)
    cfg = RulesConfig(
        for_seconds=rnd.choice([0.0, 20.0, 60.0]),
        min_samples=rnd.choice([1, 2, 3]),
        clear_seconds=rnd.choice([0.0, 30.0, 120.0]),
        clear_min_samples=rnd.choice([1, 3]),
        tolerate=rnd.choice([0, 1, 2]),
        max_gap_seconds=rnd.choice([15.0, 300.0]),
    )
    fast = rnd.random() < 0.3
    new, old = Hysteresis(), _CountingHysteresis()
    ts, p = 0.0, rnd.random()
    for k in range(400):
        ts += rnd.choice([1.0, 5.0, 10.0, 10.0, 40.0])
        cond = rnd.random() < p
        if rnd.random() < 0.05:
            p = rnd.random()  # the load changes
        line = f"line {k}"
        # the rules skip a steady sample themselves (ServerMemory.steady); update() skips it too
        got = None if cond == new.steady else new.update(cond, ts, cfg, line, fast)
        assert got == old.update(cond, ts, cfg, line, fast), k
        assert (new.active, new.pend_start, new.pend_n, new.opp) == (old.active, old.pend_start, old.pend_n, old.opp), k
        assert new.steady == (new.active if new.pend_start is None else None)
        assert new.evidence() == [x for x in [old.pend_first] if x] + [x for x in old.pend_recent if x != old.pend_first]


def _conditions_as_written(cfg: RulesConfig, e: ev.BatchStats, mcap, eff, recent_retraction: bool, vllm: bool) -> tuple:
    """docs/rules.md's conditions, in the order they are written there."""
    kv, mamba, queued, running = e.kv_usage, e.mamba_usage, e.queued, e.running
    if running is not None and e.kind == "prefill" and e.new_seqs:
        running += e.new_seqs
    waiting = queued is not None and queued > 0
    pinned = mcap is not None and running is not None and running >= mcap
    if kv is None or (mamba is None and mcap is None):
        mamba_bound = None if kv is None or vllm else False
    else:
        kv_far = kv <= (mamba if mamba is not None else 0.0) - cfg.kv_gap or kv < cfg.kv_low
        full = mamba is not None and mamba >= cfg.mamba_high
        mamba_bound = kv_far and ((full and (waiting or pinned)) or (pinned and waiting))
    recent = bool(e.preemptions) or recent_retraction
    if kv is None:
        kv_bound = None
    else:
        room = mamba is None or mamba < cfg.mamba_room
        full = kv >= cfg.kv_high
        kv_bound = room and ((full and waiting) or (recent and (waiting or full)))
    if running is None or eff is None:
        req = None
    else:
        cap_is_mamba = mcap is not None and eff >= mcap
        heads = (kv is None or kv < cfg.headroom) and (mamba is None or mamba < cfg.headroom)
        req = (not cap_is_mamba) and running >= eff and waiting and heads and not recent
    return mamba_bound, kv_bound, req


@pytest.mark.parametrize("engine", [ev.SGLANG, ev.VLLM])
def test_conditions_tested_cheap_first_are_the_rules_as_written(engine: str) -> None:
    rnd = random.Random(7)
    cfg = RulesConfig()
    rules = Rules(cfg)
    src = SimpleNamespace(engine=engine, generation=0)
    usages = [None, 0.0, 0.05, 0.3, 0.49, 0.5, 0.69, 0.7, 0.84, 0.85, 0.89, 0.9, 0.95, 1.0]
    counts = [None, 0, 1, 7, 16, 31, 48, 64]
    for _ in range(20000):
        mcap, eff = rnd.choice([None, 16, 31, 48]), rnd.choice([None, 16.0, 31.0, 48.0, 64.0])
        retracted_at = rnd.choice([None, -200.0, -60.0, -30.0, 0.0, 5.0])
        m = SimpleNamespace(sample_facts=SimpleNamespace(mamba_cap=mcap, max_running=eff), sample_gen=0, retractions=deque())
        if retracted_at is not None:
            m.retractions.append((T0 + retracted_at, 1))
        ts = rnd.choice([None, T0])
        e = ev.BatchStats(
            rnd.choice(["decode", "prefill", "stats"]),
            running=rnd.choice(counts),
            queued=rnd.choice(counts),
            kv_usage=rnd.choice(usages),
            mamba_usage=rnd.choice(usages),
            new_seqs=rnd.choice([None, 0, 3]),
            preemptions=rnd.choice([None, None, 0, 2]),
        )
        recent = ts is not None and retracted_at is not None and 0 <= -retracted_at <= cfg.retraction_window_seconds
        want = _conditions_as_written(cfg, e, mcap, eff, recent, engine == ev.VLLM)
        got = rules.conditions(src, SimpleNamespace(rule_memory=m), e, ts)
        assert got == want and [type(x) for x in got] == [type(x) for x in want], (e, mcap, eff, retracted_at)


def test_a_sample_reads_the_facts_of_its_generation() -> None:
    """The facts a sample reads are fetched again after a line that is neither a sample nor a runtime line (other facts for another configured release) and a
    restart (whose boot logs another cap)."""
    f = Feeder()
    sglang_boot(f, cap=16)
    f.decode(T0 + 10, running=16, queued=4, kv=0.1, mamba=0.5)
    m = f.srv().rule_memory
    assert m.sample_facts is f.srv().facts and m.sample_facts.mamba_cap == 16
    assert m.conditions[0] is True  # 16 running pin the cap of 16 while requests wait

    gen = f.src.generation
    f.event(ev.Retraction(retracted=1), T0 + 20, tp=None)  # a runtime line proves no fact: the same generation
    assert f.src.generation == gen
    f.event(ev.ServerReady(), T0 + 21, tp=None)  # a line that is not a sample nor a runtime line: a new generation
    assert f.src.generation > gen and m.sample_gen != f.src.generation
    f.decode(T0 + 30, running=16, queued=4, kv=0.1, mamba=0.5)
    assert m.sample_facts is f.srv().facts and f.srv().facts.generation[0] == f.src.generation == m.sample_gen

    # another configured release: other facts (they are kept per generation and configuration)
    assert str(facts_of(f.src, f.srv(), RulesConfig(engine_version="0.5.5")).version) == "0.5.5"

    restarts = f.src.restarts
    sglang_boot(f, cap=24)  # a boot after runtime lines: a restart, another cap
    assert f.src.restarts == restarts + 1
    f.decode(T0 + 50, running=16, queued=4, kv=0.1, mamba=0.5)
    assert m.sample_facts.mamba_cap == 24
    assert m.conditions[0] is False  # 16 running no longer pin the cap
