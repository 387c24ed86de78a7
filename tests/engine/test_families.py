"""Scenario 7: another hybrid family on the CPU backend. A tiny Nemotron-H (Mamba2 + attention, pattern ``M-M*``)
runs there (Granite hybrid and Falcon-H1 do too; LFM2 and plain Mamba2 failed: docs/engine-suite.md). Its capacity
facts equal the log and ``vllm:cache_config_info``, and ``plan`` reproduces them: this is the run that showed
vLLM 0.32.0 already holds a Mamba2 prefill-checkpoint block per request in align mode (585.14x, not 682.67x).
"""

from __future__ import annotations

from dataclasses import dataclass

import checks as c
import harness as h
import pytest

SOURCE = "nemotron-h"


@dataclass
class Run:
    log: str
    exposition: str
    vllm: str
    end_exposition: str
    done: int


@pytest.fixture(scope="module")
def run(engine_py, workdir) -> Run:
    model = h.build_model("nemotron_h", workdir / "models" / "tiny-nemotron-h")
    log, side, eng = c.scenario(model, workdir, SOURCE, served_name="tiny-nemotron-h")
    try:
        e, vm = c.boot(side, eng, SOURCE)
        ld = h.Load(eng.base, eng.served_name, n=12, concurrency=4, max_tokens=32, max_seconds=120).start().join()
        c.wait_log(log, c.IDLE_LINE, 4 * h.STATS_INTERVAL + 30)
        eng.stop()
        e_end = c.wait_exporter(side, lambda e: c.state_of(e, SOURCE) == "stopped", 30, "the stopped state")
        h.save_fixture(log, SOURCE, workdir)
        return Run(h.read(log), e, vm, e_end, ld.done)
    finally:
        eng.stop()
        side.stop()


def test_capacity_equals_log_and_cache_config_info(run):
    c.assert_capacity(run.exposition, SOURCE, run.log, run.vllm)


def test_plan_reproduces_the_engine(run, workdir):
    boot = c.last_boot(run.log)
    c.assert_plan(workdir / "models" / "tiny-nemotron-h" / "config.json", boot, run.vllm, 128)


def test_served_and_stopped(run):
    assert run.done == 12
    assert c.exp(run.end_exposition, "stats_lines_total", SOURCE) == len(h.stats_lines(run.log)) > 0
    assert c.state_of(run.end_exposition, SOURCE) == "stopped"
    c.assert_clean_lines(run.end_exposition, SOURCE)
