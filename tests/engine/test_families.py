"""Scenario 7: another hybrid family on the CPU backend. A tiny Nemotron-H (Mamba2 + attention, pattern ``M-M*``)
runs there (Granite hybrid and Falcon-H1 do too; LFM2 and plain Mamba2 failed: docs/engine-suite.md). Its capacity
facts equal the log and ``vllm:cache_config_info``, and ``plan`` reproduces them: this is the run that showed
vLLM 0.32.0 already holds a Mamba2 prefill-checkpoint block per request in align mode (585.14x, not 682.67x).
"""

from __future__ import annotations

import checks as c
import harness as h
import pytest

SOURCE = "nemotron-h"


@pytest.fixture(scope="module")
def run(engine_py, workdir) -> c.Served:
    model = h.build_model("nemotron_h", workdir / "models" / "tiny-nemotron-h")
    return c.serve_load_stop(model, workdir, SOURCE, served_name="tiny-nemotron-h")


def test_capacity_equals_log_and_cache_config_info(run):
    c.assert_capacity(run.exposition, SOURCE, run.log, run.vllm)


def test_plan_reproduces_the_engine(run, workdir):
    boot = c.last_boot(run.log)
    c.assert_plan(workdir / "models" / "tiny-nemotron-h" / "config.json", boot, run.vllm, 128)


def test_served_and_stopped(run):
    c.assert_served_and_stopped(run, SOURCE)
