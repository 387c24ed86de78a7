"""Scenarios 1, 2 and the shutdown of 5: one boot of the tiny Qwen3-Next with vLLM's defaults on the CPU.

The sidecar (``serve --from-beginning``) follows the log from its first byte. After the boot the exporter's
capacity facts are checked against the log, ``vllm:cache_config_info`` and ``plan``; a load with a shared prompt
prefix (prefix-cache hits) runs until both /metrics were scraped at :data:`MOMENTS` consistent moments at as many
stats lines with requests running; then the engine goes idle, stays quiet, and is stopped with SIGTERM, as a
container runtime stops it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import checks as c
import harness as h
import pytest

SOURCE = "serving"
JSON_SOURCE = "serving-json"  # the JSON handler's file of the same run, followed by the same sidecar
CONCURRENCY = 6
MAX_TOKENS = h.paced(48)
MOMENTS = 4  # consistent moments, each at a different stats line with requests running
# a shared prefix longer than two blocks (384 tokens on AVX512-BF16, 256 without; prefix caching hits on whole
# blocks), then a unique tail
PREFIX = " ".join(random.Random(7).choice(["alpha", "beta", "gamma", "delta", "pool", "cache", "state"]) for _ in range(260))


def prompt(i: int) -> str:
    return f"{PREFIX} request {i}: " + " ".join(random.Random(i).choice(["x", "y", "z", "w"]) for _ in range(20))


@dataclass
class Run:
    log: str
    boot_exposition: str
    boot_vllm: str
    recorder: c.Recorder
    idle_exposition: str
    idle_vllm: str
    stopped_exposition: str
    plan: dict
    load: h.Load
    json_log: str  # the same run's records as JSON (a second handler of one logging dictConfig)


@pytest.fixture(scope="module")
def run(qwen, workdir) -> Run:
    log, side, eng = c.scenario(qwen, workdir, SOURCE, logging="both")  # the same records as JSON: JSON_SOURCE
    try:
        e0, v0 = c.boot(side, eng, SOURCE)
        boot = c.last_boot(h.read(log))
        p = c.plan(qwen / "config.json", "--platform", "cpu", "--kv-budget", repr(boot.kv_gib), "--context-len", str(boot.max_len))
        with h.Load(eng.base, eng.served_name, CONCURRENCY, prompt=prompt, max_tokens=MAX_TOKENS, bound=c.LOAD_BOUND) as load:
            rec = c.recorder(eng, side, load)
            rec.record(MOMENTS, c.LOAD_BOUND, c.busy, f"{MOMENTS} consistent moments at stats lines with requests running")
        c.wait_idle(log)
        h.quiet_for(log, 2 * h.STATS_INTERVAL, 60, "the log quiet for two stats intervals after the idle line")
        v_idle = eng.metrics()
        e_idle = c.wait_exporter(side, side.all_read, 20, "both files read")
        eng.stop()
        e_stop = c.wait_exporter(
            side, lambda e: c.state_of(e, SOURCE) == "stopped" and c.state_of(e, JSON_SOURCE) == "stopped", 30, "the stopped state"
        )
        e_stop = c.wait_exporter(side, side.all_read, 20, "both files read")
        h.save_fixture(log, SOURCE, workdir)
        return Run(h.read(log), e0, v0, rec, e_idle, v_idle, e_stop, p, load, h.read(eng.json_log))
    finally:
        eng.stop()
        side.stop()


def test_capacity_equals_log_and_cache_config_info(run):
    c.assert_capacity(run.boot_exposition, SOURCE, run.log, run.boot_vllm)
    # the CPU build's default request cap (engine/arg_utils.py::get_batch_defaults: 128 x TP x PP)
    assert c.exp(run.boot_exposition, "max_running_requests", SOURCE) == 128
    assert h.labels_of(run.boot_exposition, "hybrid_cache_gdn_prefill_kernel_info", source=SOURCE)["kernel"] == "cpu"
    # the CPU decides the SSM dtype (plan --cpu-isa): the AVX512-BF16 branch is taken exactly where cpuinfo says
    assert ("Reset SSM cache type to float32" in run.log) == (c.CPU_ISA == "avx512-bf16"), c.CPU_ISA


def test_plan_reproduces_the_engine(run, qwen):
    boot = c.last_boot(run.log)
    c.assert_plan(qwen / "config.json", boot, run.boot_vllm, 128)


def test_gauges_equal_the_last_stats_line(run):
    assert run.load.done > 0 and run.load.failed == 0, str(run.load)
    busy = run.recorder.distinct(c.busy)
    assert len(busy) >= MOMENTS, run.recorder.summary(c.busy)
    for m in run.recorder.moments:
        c.assert_gauges_equal_line(m, SOURCE)


def test_gauges_within_documented_bounds_of_vllm(run):
    boot = c.last_boot(run.log)
    per_req = c.blocks_per_request(run.plan, boot.max_len)
    cc = c.cache_config(run.boot_vllm)
    for m in run.recorder.moments:
        c.assert_live_bounds(m, SOURCE, CONCURRENCY, 128, per_req, int(cc["num_gpu_blocks"]))


def test_throughputs_against_vllm_counters(run):
    """Σ logged generation throughput × interval = vllm:generation_tokens_total, and Σ logged prompt throughput ×
    interval = prompt tokens minus prefix-cache hits: the log counts computed prompt tokens only. Each interval is
    known to the log's second (``checks.integrate``), so each sum is a range that must hold vLLM's counter."""
    gen_lo, gen_hi = c.integrate(run.log, "gen", h.STATS_INTERVAL)
    total_gen = h.value(run.idle_vllm, "vllm:generation_tokens_total")
    assert total_gen == run.load.tokens_done == run.load.done * MAX_TOKENS
    assert gen_lo <= total_gen <= gen_hi, (gen_lo, total_gen, gen_hi)
    prompt_lo, prompt_hi = c.integrate(run.log, "prompt", h.STATS_INTERVAL)
    prompt_total = h.value(run.idle_vllm, "vllm:prompt_tokens_total")
    hits = h.value(run.idle_vllm, "vllm:prefix_cache_hits_total")
    assert hits > 0, "the shared prefix gave no prefix-cache hit"
    assert prompt_lo <= prompt_total - hits <= prompt_hi, (prompt_lo, prompt_total, hits, prompt_hi)
    assert prompt_hi < prompt_total  # the logged rate is below vllm:prompt_tokens_total's


def test_prefix_hit_ratio_equals_vllm_counters_once_idle(run):
    """Fewer than 1000 requests: the logged hit rate is over every query so far (``CachingMetrics``), so at the
    idle line it equals hits / queries of vLLM's counters, to the 0.1 % the line prints."""
    assert run.load.sent < 1000, f"{run.load}: vLLM's logged hit rate is over its last 1000 requests only"
    last = h.stats_lines(run.log)[-1]
    ratio = h.value(run.idle_vllm, "vllm:prefix_cache_hits_total") / h.value(run.idle_vllm, "vllm:prefix_cache_queries_total")
    assert abs(float(last.group("hit")) / 100.0 - ratio) <= 0.0005 + 1e-9
    assert c.exp(run.idle_exposition, "prefix_cache_hit_ratio", SOURCE) == float(last.group("hit")) / 100.0


def test_idle_then_stopped_not_dead(run):
    assert c.state_of(run.idle_exposition, SOURCE) == "idle"
    assert c.findings_on(run.idle_exposition, SOURCE) == set()
    # a SIGTERM shutdown often prints an EngineDeadError too (the engine core is stopped first): not a death
    assert "[shutdown]" in run.log
    assert c.state_of(run.stopped_exposition, SOURCE) == "stopped"
    assert c.exp(run.stopped_exposition, "server_deaths_total", SOURCE) == 0
    assert c.findings_on(run.stopped_exposition, SOURCE) == set()


def test_every_line_parsed_or_ignored(run):
    c.assert_clean_lines(run.stopped_exposition, SOURCE)
    n = len(h.stats_lines(run.log))
    assert c.exp(run.stopped_exposition, "stats_lines_total", SOURCE) == n


def test_the_json_logging_config_gives_the_same_metrics_on_the_same_run(run):
    """Issue 20 item 3, live: one dictConfig (VLLM_LOGGING_CONFIG_PATH) with two handlers, vLLM's default formatter
    to the log and pythonjsonlogger's JsonFormatter to a second file: the exporter following both exports the same
    capacity, gauges, counters, findings and state for both, at the idle line and after the shutdown; the JSON
    file has a record for every vLLM line of the log (its stats lines, one for one) and no format drift."""
    assert run.json_log.count('"levelname"') > 50 and '"message": "Engine 000: Avg prompt throughput' in run.json_log
    assert len(h.stats_lines(run.log)) == run.json_log.count("Avg prompt throughput") > 0
    n = c.assert_same_metrics(run.idle_exposition, SOURCE, JSON_SOURCE)
    assert n > 20, n
    assert (
        c.exp(run.idle_exposition, "kv_capacity_tokens", JSON_SOURCE)
        == c.exp(run.idle_exposition, "kv_capacity_tokens", SOURCE)
        is not None
    )
    assert c.assert_same_metrics(run.stopped_exposition, SOURCE, JSON_SOURCE) > 20
    assert c.state_of(run.stopped_exposition, JSON_SOURCE) == "stopped"
    c.assert_clean_lines(run.stopped_exposition, JSON_SOURCE)
