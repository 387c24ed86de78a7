"""SGLang: a killed scheduler is a death. The tiny LFM2 serves a load; its scheduler process (``sglang::scheduler``)
is killed with SIGKILL, as the kernel's OOM killer would. SGLang's watchdog logs the crash and takes the server down;
the exporter says ``dead`` (a death counted once), ends the findings of the pools, and reads every line of it (the
traceback and the crash diagnostics are no format drift)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import checks as c
import harness as h
import pytest
import sglang_checks as sc
import sglang_harness as sh

SOURCE = "sglang-death"


@dataclass
class Run:
    log: str
    serving: str
    dead: str


@pytest.fixture(scope="module")
def run(sglang_lfm2, workdir) -> Run:
    log = workdir / f"{SOURCE}.log"
    log.touch()
    side = h.Sidecar(log, SOURCE, workdir, rules_yaml=sc.RULES_YAML)
    eng = sh.Engine(sglang_lfm2, log, ("--max-mamba-cache-size", "16", "--max-total-tokens", "4096"), served_name="tiny-lfm2")
    load = None
    try:
        eng.start()
        load = h.Load(eng.base, eng.served_name, 4, max_tokens=64, bound=300).start()
        sc.wait_lines(eng, 3, 120, "with requests running", lambda m: int(m["running"]) > 0)
        serving = c.wait_exporter(side, lambda e: c.state_of(e, SOURCE) == "serving", 30, "the serving state")
        os.kill(eng.scheduler_pid(), signal.SIGKILL)
        dead = c.wait_exporter(side, lambda e: c.state_of(e, SOURCE) == "dead", 90, "the dead state")
        load.stop()
        eng.proc.wait(60)
        dead = c.wait_exporter(side, side.all_read, 30, "the whole log read")
        sh.save_fixture(log, SOURCE, workdir)
        return Run(h.read(log), serving, dead)
    finally:
        if load is not None:
            load.stop()
        eng.stop()
        side.stop()


def test_a_killed_scheduler_is_a_death(run):
    assert "crashed with exit code -9" in run.log, run.log[-3000:]  # SGLang's subprocess watchdog
    assert c.state_of(run.dead, SOURCE) == "dead"
    assert c.exp(run.dead, "server_deaths_total", SOURCE) == 1
    assert not (c.findings_on(run.dead, SOURCE) & {"mamba_bound", "kv_bound", "request_cap_bound", "retraction_storm"})


def test_every_line_of_the_death_is_read(run):
    c.assert_clean_lines(run.dead, SOURCE)
    assert c.exp(run.dead, "server_restarts_total", SOURCE) == 0
