"""Scenarios 4, 5 (quiet) and 6: the request cap, its advice applied, and the sidecar's life.

Boot 1 runs with ``--max-num-seqs 2`` and more clients than that: ``request_cap_bound`` fires and recommends
``--max-num-seqs N``. While it runs, the real ``logrotate`` rotates the log with copytruncate. When the load
stops, vLLM prints one idle stats line and then nothing: the finding clears on that line (before, it stayed
firing through the idleness and the shutdown). Boot 1 is stopped, and boot 2 starts with the recommended
``--max-num-seqs N`` appending to the same file (the before/after the advice issue uses): its logged cap and
capacity equal what the exporter and ``plan`` predicted. One ``serve`` follows the file through all of it and
counts every stats line once.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import checks as c
import harness as h
import pytest

SOURCE = "request-cap"
CAP = 2
CONCURRENCY = 8
MAX_TOKENS = h.paced(64)
STATS = "hybrid_cache_stats_lines_total"
BUSY_AFTER_ROTATION = 2  # stats lines with requests running written into the truncated file
# the rules' sustain window (harness.RULES_YAML) and one stats interval: a second boot whose load has run this long in
# log time without request_cap_bound is one where the finding had its chance
WINDOW = h.FOR_SECONDS + h.STATS_INTERVAL


def window_of_load(text: str, after: int) -> bool:
    """The stats lines from ``after`` on show requests running over :data:`WINDOW` s of log time, in the rules'
    ``min_samples`` lines or more."""
    busy = [t for t, m in c.stats_times(text[after:], time.localtime().tm_year) if int(m.group("running")) > 0]
    return len(busy) >= h.MIN_SAMPLES and busy[-1] - busy[0] >= WINDOW


@dataclass
class Run:
    log: Path
    rotated: Path
    boot1_exposition: str
    boot1_vllm: str
    fired: str
    recommended: int
    effect: str
    idle_exposition: str
    report: str
    stopped_exposition: str
    boot2_exposition: str
    boot2_vllm: str
    boot2_load: str
    end_exposition: str
    text: str  # rotated copy + live file: every byte the engine wrote that logrotate kept
    reports: dict  # report of the real log (rotated copy + live file) in text, markdown, json, html
    page: str  # the sidecar's status page after boot 2 stopped
    written: str  # every byte vLLM wrote, both boots (harness.Engine.written): what the sidecar read
    written_reports: dict  # report of that copy, in the four formats


@pytest.fixture(scope="module")
def run(qwen, workdir) -> Run:
    log, side, eng = c.scenario(qwen, workdir, SOURCE, "--max-num-seqs", str(CAP))
    eng2 = None
    try:
        e1, v1 = c.boot(side, eng, SOURCE)
        with h.Load(eng.base, eng.served_name, CONCURRENCY, max_tokens=MAX_TOKENS, bound=c.LOAD_BOUND):
            fired = c.wait_exporter(
                side, lambda e: "request_cap_bound" in c.findings_on(e, SOURCE), c.LOAD_BOUND, "request_cap_bound to fire"
            )
            # copytruncate right after a stats line, so that a stats line seldom falls in logrotate's own window
            # between its copy and its truncation (a line written there is lost to both files, logrotate's limitation,
            # but not to a reader that read it before: the sidecar counts it, and the engine's own copy has it)
            n = len(h.stats_lines(h.read(log)))
            h.drive_until(
                lambda: len(h.stats_lines(h.read(log))) > n,
                4 * h.STATS_INTERVAL,
                lambda: c.last_stats(h.read(log)),
                "a stats line",
                every=0.05,
            )
            rotated = c.copytruncate(log, workdir)
            # vLLM writes on under the load into the truncated file, and the exporter reads it there: once it has
            # counted stats lines written after the rotation, request_cap_bound is firing. Through the rotation, or
            # again after a while: on a loaded machine the client once kept only 1 request in flight for 18 s after
            # the rotation (the log: Running 1, Waiting 0), and the finding rightly cleared until the cap bound again
            c.wait_busy(log, BUSY_AFTER_ROTATION)
            c.wait_exporter(
                side,
                lambda e: "request_cap_bound" in c.findings_on(e, SOURCE) and (h.value(e, STATS, source=SOURCE) or 0) > n + 1,
                c.LOAD_BOUND,
                "request_cap_bound firing on stats lines written after the rotation",
            )
        reco = [lab for lab, _ in h.samples(fired, "hybrid_cache_recommendation_info", source=SOURCE, rule="request_cap_bound")]
        seqs = [lab for lab in reco if lab["flag"] == "--max-num-seqs"]
        assert seqs, f"request_cap_bound recommends {reco}, not --max-num-seqs"
        recommended = int(seqs[0]["value"])
        c.wait_idle(log)
        h.quiet_for(log, 2 * h.STATS_INTERVAL, 60, "the log quiet for two stats intervals after the idle line")
        e_idle = side.caught_up()
        rep = subprocess.run(
            [str(h.EXE), "report", "--rules-config", str(side.rules), str(rotated), str(log)], capture_output=True, text=True, timeout=120
        )
        assert rep.returncode == 0, rep.stderr
        eng.stop()
        e_stop = c.wait_exporter(side, lambda e: c.state_of(e, SOURCE) == "stopped", 30, "the stopped state")
        # boot 2: the advice applied, on the same file
        eng2 = h.Engine(qwen, log, args=("--max-model-len", "2048", "--max-num-seqs", str(recommended)))
        e2 = c.restart(side, eng2, SOURCE, "kv_capacity_tokens", 30)
        v2 = eng2.metrics()
        # the same load, long enough for request_cap_bound to fire were it going to: stats lines with requests
        # running over the rule's window and one interval more, read by the sidecar while the load runs
        boot2 = h.read(log).rfind("non-default args")
        with h.Load(eng2.base, eng2.served_name, min(CONCURRENCY, recommended), max_tokens=MAX_TOKENS, bound=c.LOAD_BOUND):
            h.drive_until(
                lambda: window_of_load(h.read(log), boot2),
                c.LOAD_BOUND,
                lambda: c.last_stats(h.read(log)[boot2:]),
                f"stats lines with requests running over {WINDOW:.0f} s of log time (the rule's window and one interval)",
                every=1.0,
            )
            e2_load = c.wait_exporter(side, lambda e: c.exp(e, "running_requests", SOURCE) > 0, 20, "the sidecar at a busy line of boot 2")
        c.wait_idle(log)
        eng2.stop()
        e_end = c.wait_exporter(side, lambda e: c.state_of(e, SOURCE) == "stopped", 30, "boot 2 stopped")
        reps = c.reports([rotated, log], side.rules)
        written = h.read(eng2.written)
        written_reps = c.reports([eng2.written], side.rules)
        with urllib.request.urlopen(side.base + "/", timeout=30) as r:
            page = r.read().decode()
        text = h.read(rotated) + h.read(log)
        effect = ""
        for line in rep.stdout.splitlines():
            if "effect:" in line and "max-num-seqs" in line:
                effect = line.strip()
        fixture = workdir / f"{SOURCE}.joined.log"
        fixture.write_text(text)
        h.save_fixture(fixture, SOURCE, workdir)
        return Run(
            log,
            rotated,
            e1,
            v1,
            fired,
            recommended,
            effect,
            e_idle,
            rep.stdout,
            e_stop,
            e2,
            v2,
            e2_load,
            e_end,
            text,
            reps,
            page,
            written,
            written_reps,
        )
    finally:
        eng.stop()
        if eng2 is not None:
            eng2.stop()
        side.stop()


def test_request_cap_bound_fires_and_recommends_max_num_seqs(run):
    assert c.exp(run.boot1_exposition, "max_running_requests", SOURCE) == CAP
    assert run.recommended > CAP
    assert c.exp(run.fired, "running_requests", SOURCE) == CAP and c.exp(run.fired, "queued_requests", SOURCE) > 0


def test_quiet_clears_the_finding(run):
    """The idle stats line (vLLM prints none after it) clears request_cap_bound; `report` no longer says the
    server is pinned at its cap with 0 running and 0 waiting."""
    assert c.state_of(run.idle_exposition, SOURCE) == "idle"
    assert c.findings_on(run.idle_exposition, SOURCE) == set()
    end = run.report.split("Diagnosis at the end of the log", 1)[1].split("\n\n", 1)[0]
    assert "no finding" in end and "pinned" not in end, end
    assert "request_cap_bound [cleared]" in run.report


def test_stopped_between_the_boots(run):
    assert c.state_of(run.stopped_exposition, SOURCE) == "stopped"
    assert c.findings_on(run.stopped_exposition, SOURCE) == set()


def test_second_boot_has_the_predicted_cap_and_capacity(run, qwen):
    """The before/after: boot 2's logged cap and capacity equal what the exporter recommended and `plan` predicts."""
    e2 = run.boot2_exposition
    assert c.exp(e2, "max_running_requests", SOURCE) == run.recommended
    boot1 = c.last_boot(h.read(run.rotated))
    boot2 = c.assert_capacity(e2, SOURCE, run.text, run.boot2_vllm)
    assert (boot2.tokens, boot2.concurrency) == (boot1.tokens, boot1.concurrency)  # V1's shared pool: the cap frees no KV
    c.assert_plan(qwen / "config.json", boot2, run.boot2_vllm, run.recommended, "--max-num-seqs", str(run.recommended))
    assert f"cap {CAP} → {run.recommended}" in run.effect, run.effect
    assert "request_cap_bound" not in c.findings_on(run.boot2_load, SOURCE)


def test_report_and_status_page_compare_the_two_boots(run):
    """Issue 21 item 4 with the real engine: `report` (text, markdown, json, html) of the real log and the sidecar's
    status page say the flag that changed, the pools and the cap before/after, what the exporter predicted and what
    vLLM then logged (equal), the binding and queueing shares before/after; and the server's state, stopped."""
    kv = c.last_boot(h.read(run.rotated)).tokens
    # the files logrotate kept, in every format; the status page against the report of what vLLM wrote, which the
    # sidecar read (the kept files lack any line written in logrotate's window)
    c.assert_before_after(run.reports, run.reports["html"], SOURCE, CAP, run.recommended, kv, "request_cap_bound")
    c.assert_before_after(run.written_reports, run.page, SOURCE, CAP, run.recommended, kv, "request_cap_bound")
    assert (
        "Server state: stopped: it logged a shutdown" in run.page and "Server state: stopped: it logged a shutdown" in run.reports["text"]
    )


def test_sidecar_counts_every_stats_line_once(run):
    """Through a copytruncate while vLLM writes and a restart appending to the same file: no stats line lost or
    doubled. The truth is what vLLM wrote (the harness's copy); the files logrotate kept may lack a line written in
    its window between copy and truncation (seen once: 25 kept of 26 written, the sidecar counting 26)."""
    written, on_disk = len(h.stats_lines(run.written)), len(h.stats_lines(run.text))
    assert c.exp(run.end_exposition, "stats_lines_total", SOURCE) == written
    assert written - 1 <= on_disk <= written, (on_disk, written)
    assert c.exp(run.end_exposition, "server_restarts_total", SOURCE) == 1
    assert h.value(run.end_exposition, "hybrid_cache_exporter_truncations_total", source=SOURCE) >= 1
    c.assert_clean_lines(run.end_exposition, SOURCE)
