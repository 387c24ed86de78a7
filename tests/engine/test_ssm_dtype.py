"""Scenario 10: the SSM state dtype, the one input of ``plan --platform cpu`` that depends on the CPU. The tiny
Qwen3-Next booted with ``--mamba-ssm-cache-dtype bfloat16``: vLLM's CPU build keeps a 16-bit state asked for a GDN
model on any CPU (``Using bfloat16 SSM state storage ...`` where it has AVX512-BF16), so this boot has on every
machine the pool an AVX2-only CPU gives by default (the CI failures of 2026-12-02: docs/engine-suite.md, "The CPU
the engine runs on"). The exporter's facts equal the log and ``vllm:cache_config_info``; ``plan`` reproduces them
both ways: with the dtype asked, and with ``--cpu-isa avx2`` and the dtype left to auto.
"""

from __future__ import annotations

import checks as c
import harness as h
import pytest

SOURCE = "ssm-bf16"
ARGS = ("--mamba-ssm-cache-dtype", "bfloat16")


@pytest.fixture(scope="module")
def run(qwen, workdir) -> c.Served:
    return c.serve_load_stop(qwen, workdir, SOURCE, *ARGS)


def test_capacity_and_dtype_equal_log_and_cache_config_info(run):
    c.assert_capacity(run.exposition, SOURCE, run.log, run.vllm)
    assert c.cache_config(run.vllm)["mamba_ssm_cache_dtype"] == "bfloat16"
    assert h.labels_of(run.exposition, "hybrid_cache_server_info", source=SOURCE)["mamba_ssm_dtype"] == "bfloat16"
    assert "Reset SSM cache type" not in run.log
    # the line that says the dtype was kept is printed only where the AVX512-BF16 branch runs
    assert ("Using bfloat16 SSM state storage" in run.log) == (c.CPU_ISA == "avx512-bf16"), c.CPU_ISA


def test_plan_reproduces_the_engine_asked_and_as_an_avx2_default(run, qwen):
    boot = c.last_boot(run.log)
    asked = c.assert_plan(qwen / "config.json", boot, run.vllm, 128, *ARGS)
    auto_on_avx2 = c.assert_plan(qwen / "config.json", boot, run.vllm, 128, "--cpu-isa", "avx2")
    assert asked["vllm"] == auto_on_avx2["vllm"] and asked["state"]["ssm_dtype"] == auto_on_avx2["state"]["ssm_dtype"] == "bfloat16"


def test_served_and_stopped(run):
    c.assert_served_and_stopped(run, SOURCE)
