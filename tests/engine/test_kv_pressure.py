"""Scenario 3: KV pressure. A pool of 16 blocks (``--num-gpu-blocks-override``), prefix caching off (mamba cache
mode none: one state block per request per mamba group) and long prompts from more clients than fit: requests
wait with the pool full, vLLM preempts, and ``kv_bound`` fires.

vLLM 0.32.0 never prints the ``Preemptions: N`` field of its stats line: ``LoggingStatLogger.log`` calls
``_update_stats``, whose ``_reset`` zeroes ``num_preemptions`` before the line is formatted (the same in
0.33.0). The log therefore carries no preemption, ``vllm:num_preemptions_total`` does, and the exporter's
``hybrid_cache_preempted_requests_total`` stays absent (not 0): the test checks both, so a release that fixes the
field makes the equality the issue asks for the thing checked.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import checks as c
import harness as h
import pytest

SOURCE = "kv-pressure"
# The pool's geometry (docs/engine-suite.md, "The KV pressure scenario"): the SSM state pinned to float32, so that
# the pool is the same on every CPU (blocks of 384 tokens; left to auto the state is bf16 on a CPU without
# AVX512-BF16, blocks of 256). A prompt of 400 words is 1,188 tokens: 4 attention blocks and 3 state blocks, 7 of
# the 15 usable blocks, so two requests run at 93 % (86.7 % while one is still in its prefill) and the others wait.
# Short requests (300 tokens at most) stay within their 4 attention blocks, so the pool stays full for as long as
# they run; long ones generate 700 and need a fifth, so two of them cannot both grow and vLLM preempts.
# The earlier load (200-word prompts, 600 tokens each, 20 blocks) grew every request by two blocks in lockstep: the
# pool went 79 → 95 → 100 % → one preempted (37 %) in each round, was at 90 % or more for 2 stats lines at a time,
# and kv_bound (3 samples over 9 s, one contrary sample tolerated) never fired on an AVX2 CPU (2026-12-03).
BLOCKS = 16
CONCURRENCY = 8
ARGS = ("--num-gpu-blocks-override", str(BLOCKS), "--no-enable-prefix-caching", "--mamba-ssm-cache-dtype", "float32")
# The load runs in two phases, each until it has shown what it is for: requests that stay within their blocks until
# kv_bound fires, then requests that outgrow them until vLLM preempts. The prompts are the first 20 of the seeds below,
# whose lengths (1,094-1,219 tokens) keep the geometry: a short request ends within its 4 attention blocks (1,219 +
# 300 < 1,536), a long one needs a fifth (1,140 + 700 > 1,536) and no sixth (1,191 + 700 < 1,920). Other seeds give
# up to 1,245 tokens, which a short request would outgrow: the load cycles through these 20.
SHORT_PROMPTS, LONG_PROMPTS = range(16), range(16, 20)
# The lengths are the scenario's geometry, the same at every pace (harness.paced): a short request no longer than its
# 4 blocks hold, and long enough to hold them while others wait. At the fast pace (4 tokens) vLLM ran one request at
# a time: 80 stats lines in 240 s, 77 of them at 40-47 % with 5-6 waiting, and kv_bound rightly did not fire.
SHORT_TOKENS = 300
LONG_TOKENS = 700  # into the fifth block, not the sixth


def words(seed: int) -> str:
    rnd = random.Random(1000 + seed)
    return " ".join(rnd.choice(["alpha", "beta", "gamma", "delta", "mamba", "state", "pool", "cache"]) for _ in range(400))


@dataclass
class Phases:
    """The load's requests: short until :meth:`outgrow`, then long."""

    long: bool = False

    def prompt(self, i: int) -> str:
        return words(LONG_PROMPTS[i % len(LONG_PROMPTS)] if self.long else SHORT_PROMPTS[i % len(SHORT_PROMPTS)])

    def max_tokens(self, i: int) -> int:
        return LONG_TOKENS if self.long else SHORT_TOKENS

    def outgrow(self) -> None:
        self.long = True


def full(m: h.Moment) -> bool:
    """The moment's stats line shows the pool at 90 % or more with requests waiting."""
    return float(m.marker.match.group("kv")) >= 90.0 and int(m.marker.match.group("waiting")) > 0


def fired(m: h.Moment) -> bool:
    return "kv_bound" in c.findings_on(m.reads["exporter"], SOURCE)


@dataclass
class Run:
    log: str
    boot_exposition: str
    boot_vllm: str
    fired: str  # the exposition while kv_bound fired
    end_vllm: str
    end_exposition: str
    recorder: h.Recorder


@pytest.fixture(scope="module")
def run(qwen, workdir) -> Run:
    log, side, eng = c.scenario(qwen, workdir, SOURCE, *ARGS)
    try:
        e0, v0 = c.boot(side, eng, SOURCE)
        phases = Phases()
        with h.Load(
            eng.base, eng.served_name, CONCURRENCY, prompt=phases.prompt, max_tokens=phases.max_tokens, bound=2 * c.LOAD_BOUND
        ) as load:
            rec = c.recorder(eng, side, load)
            rec.until(
                lambda r: any(map(fired, r.moments)) and any(map(full, r.moments)),
                c.LOAD_BOUND,
                "kv_bound firing, and a stats line with the pool >= 90 % and requests waiting",
                lambda: (
                    f"{rec.summary()}; {len(rec.distinct(full))} full with requests waiting, {sum(map(fired, rec.moments))} firing; {load}"
                ),
            )
            phases.outgrow()
            h.drive_until(
                lambda: h.value(eng.metrics(), "vllm:num_preemptions_total") > 0,
                c.LOAD_BOUND,
                lambda: f"{h.value(eng.metrics(), 'vllm:num_preemptions_total'):.0f} preemptions; {c.last_stats(h.read(log))}; {load}",
                "a preemption (vllm:num_preemptions_total) under requests that outgrow their blocks",
                every=1.0,
            )
        c.wait_idle(log)
        v_end = eng.metrics()
        e_end = side.caught_up()
        eng.stop()
        h.save_fixture(log, SOURCE, workdir)
        return Run(h.read(log), e0, v0, next(m for m in rec.moments if fired(m)).reads["exporter"], v_end, e_end, rec)
    finally:
        eng.stop()
        side.stop()


def test_capacity_and_plan_with_a_block_override(run, qwen):
    boot = c.assert_capacity(run.boot_exposition, SOURCE, run.log, run.boot_vllm)
    assert int(c.cache_config(run.boot_vllm)["num_gpu_blocks"]) == BLOCKS
    c.assert_plan(qwen / "config.json", boot, run.boot_vllm, None, *ARGS)
    assert h.labels_of(run.boot_exposition, "hybrid_cache_server_info", source=SOURCE)["radix_cache_strategy"] == "none"


def test_kv_bound_fires_under_pressure(run):
    assert "kv_bound" in c.findings_on(run.fired, SOURCE), "kv_bound never fired while the pool was full and requests waited"
    assert any(map(full, run.recorder.moments)), "no stats line showed the pool full with requests waiting"
    recos = {lab["flag"] for lab, _ in h.samples(run.fired, "hybrid_cache_recommendation_info", source=SOURCE, rule="kv_bound")}
    assert recos, "kv_bound fired with no recommendation"


def test_preemptions_against_vllm(run):
    live = h.value(run.end_vllm, "vllm:num_preemptions_total")
    assert live > 0, "the load caused no preemption"
    logged = [m for m in h.stats_lines(run.log) if m.group("preempt")]
    counted = c.exp(run.end_exposition, "preempted_requests_total", SOURCE)
    if logged:  # a release that prints the field: the exporter's counter is the log's, and equals vLLM's
        assert counted == sum(int(m.group("preempt")) for m in logged) == live
    else:  # 0.32.0: the field is never printed (module docstring); the counter is absent, not a false 0
        assert "Preemptions:" not in run.log
        assert counted is None


def test_quiet_after_the_load(run):
    assert c.state_of(run.end_exposition, SOURCE) == "idle"
    assert c.findings_on(run.end_exposition, SOURCE) == set()
    c.assert_clean_lines(run.end_exposition, SOURCE)
