"""Scenario 5 (death), run with ``VLLM_LOGGING_PREFIX``: the CPU GDN kernel rejects 32-dim heads (``Unexpected head dim size, 32``), so a tiny
Qwen3-Next with 32-dim linear heads boots, and its engine dies at the first request. The exporter must say
``dead``, not show a healthy idle server, and the engine's ``Dumping input data for V1 LLM engine ...`` (the
failed step's dump, a config echo) must not count as format drift.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import checks as c
import harness as h
import pytest

SOURCE = "gdn-head-dim-32"


@dataclass
class Run:
    log: str
    ready_exposition: str
    dead_exposition: str
    status: int | None
    ready_vllm: str
    workdir: Path


@pytest.fixture(scope="module")
def run(engine_py, workdir) -> Run:
    model = h.build_model("qwen3_next_hd32", workdir / "models" / "tiny-qwen3-next-hd32")
    # with VLLM_LOGGING_PREFIX (issue 20 item 3, live): every vLLM line of this run starts with it
    log, side, eng = c.scenario(model, workdir, SOURCE, served_name="tiny-qwen3-next-hd32", logging="prefix")
    try:
        e_ready, v_ready = c.boot(side, eng, SOURCE)
        with h.Load(eng.base, eng.served_name, 1, max_tokens=16, bound=c.LOAD_BOUND) as ld:
            e_dead = c.wait_exporter(side, lambda e: c.state_of(e, SOURCE) == "dead", c.LOAD_BOUND, "the dead state")
        c.wait_log(log, r"Application shutdown complete|Finished server process", 60)
        e_dead = side.caught_up()
        status = None if not ld.errors else 500 if "500" in ld.errors[0] else None
        h.save_fixture(log, SOURCE, workdir)
        return Run(h.read(log), e_ready, e_dead, status, v_ready, workdir)
    finally:
        eng.stop()
        side.stop()


def test_engine_death_is_exported_as_dead(run):
    assert "Unexpected head dim size, 32" in run.log
    assert c.state_of(run.ready_exposition, SOURCE) in ("idle", "starting")
    assert c.state_of(run.dead_exposition, SOURCE) == "dead"
    assert c.exp(run.dead_exposition, "server_deaths_total", SOURCE) == 1
    assert c.findings_on(run.dead_exposition, SOURCE) == set()
    assert run.status == 500


def test_the_step_dump_is_not_format_drift(run):
    assert "Dumping input data for V1 LLM engine" in run.log
    c.assert_clean_lines(run.dead_exposition, SOURCE)
    assert c.exp(run.dead_exposition, "server_restarts_total", SOURCE) == 0  # the dump's config echo is no boot


def test_the_logging_prefix_gives_the_same_metrics_as_the_lines_without_it(run):
    """Issue 20 item 3, live: this run's vLLM lines carry VLLM_LOGGING_PREFIX; the exporter gives the capacity the
    serving scenario checks (equal to the log and to vllm:cache_config_info), and a replay of the log gives the same
    metrics as a replay of the same run's lines with the prefix taken off."""
    prefixed = re.findall(rf"^{re.escape(h.LOGGING_PREFIX)}\(\w+ pid=\d+\) (?:INFO|WARNING|ERROR) ", run.log, re.M)
    assert len(prefixed) > 30, len(prefixed)
    c.assert_capacity(run.ready_exposition, SOURCE, run.log, run.ready_vllm)
    bare = run.workdir / "no-prefix" / f"{SOURCE}.log"
    bare.parent.mkdir(exist_ok=True)
    bare.write_text(re.sub(rf"^{re.escape(h.LOGGING_PREFIX)}", "", run.log, flags=re.M))
    assert h.LOGGING_PREFIX not in bare.read_text()
    with_prefix = run.workdir / "with-prefix" / f"{SOURCE}.log"
    with_prefix.parent.mkdir(exist_ok=True)
    with_prefix.write_text(run.log)

    def replay(p: Path) -> str:
        r = subprocess.run([str(h.EXE), "replay", str(p)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout

    a, b = replay(with_prefix), replay(bare)
    sa, sb = c.content_samples(a, SOURCE), c.content_samples(b, SOURCE)
    assert sa == sb and len(sa) > 15, sorted(k for k in set(sa) | set(sb) if sa.get(k) != sb.get(k))[:20]
