"""Scenario 7: other hybrid families on the CPU backend. A tiny Nemotron-H (Mamba2 + attention, pattern ``M-M*``)
serves a load; its capacity facts equal the log and ``vllm:cache_config_info``, and ``plan`` reproduces them: this is
the run that showed vLLM 0.32.0 already holds a Mamba2 prefill-checkpoint block per request in align mode (585.14x,
not 682.67x). A tiny Granite-4.0-H (``layer_types``), a tiny Falcon-H1 (attention and Mamba2 in every layer) and a
tiny LFM2 (short convolution, no SSM state) boot and stop: their capacity equals the log, and ``plan`` reproduces it
(issue 36; plain Mamba2: docs/engine-suite.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


# --------------------------------------------------------------------------------------------
# Granite-4.0-H, Falcon-H1 and LFM2 (issue 36): families plan took for dense or refused before its catalogue (LFM2's
# state is a short convolution alone). A boot is enough: what the scenario asserts on is in the startup lines (no
# load, no count of requests).

FAMILIES = {"granitemoehybrid": "granite-h", "falcon_h1": "falcon-h1", "lfm2": "lfm2"}


@dataclass
class Booted:
    family: str
    source: str
    config: Path
    log: str
    exposition: str
    vllm: str
    end_exposition: str


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def booted(request, engine_py, workdir) -> Booted:
    family, source = request.param, FAMILIES[request.param]
    h.SCENARIO = source  # the waits of this boot (conftest.py names a module's by its SOURCE)
    model = h.build_model(family, workdir / "models" / f"tiny-{source}")
    log, side, eng = c.scenario(model, workdir, source, served_name=f"tiny-{source}")
    try:
        e, vm = c.boot(side, eng, source)
        eng.stop()
        e_end = c.wait_exporter(side, lambda e: c.state_of(e, source) == "stopped", 30, "the stopped state")
        h.save_fixture(log, source, workdir)
        return Booted(family, source, model / "config.json", h.read(log), e, vm, e_end)
    finally:
        eng.stop()
        side.stop()


def test_family_capacity_equals_log_and_cache_config_info(booted):
    c.assert_capacity(booted.exposition, booted.source, booted.log, booted.vllm)


def test_family_plan_reproduces_the_engine(booted):
    """``plan --platform cpu`` gives the engine's block size, padding, blocks, concurrency, KV tokens and cap, and
    the layers its kv cache groups say: Granite's layer_types, Falcon-H1's attention and Mamba2 in every layer."""
    p = c.assert_plan(booted.config, c.last_boot(booted.log), booted.vllm, 128)
    assert p["model"]["family"] == {"granitemoehybrid": "granite_h", "falcon_h1": "falcon_h1", "lfm2": "lfm2"}[booted.family]
    assert p["state"]["bytes_per_request_per_gpu"] > 0 and p["model"]["linear_layers"] > 0


def test_family_stopped_and_clean(booted):
    assert c.state_of(booted.end_exposition, booted.source) == "stopped"
    c.assert_clean_lines(booted.end_exposition, booted.source)
