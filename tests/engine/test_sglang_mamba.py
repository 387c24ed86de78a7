"""SGLang, the mission's own case: a tiny LFM2 whose mamba state pool caps concurrency while its KV pool is nearly
empty, and the exporter's advice applied.

Boot 1: ``--max-mamba-cache-size 16`` (3 slots per request: a cap of 5) and a KV pool of 4,096 tokens, with 10 clients
of short requests. Concurrency is pinned at the cap with 3 requests queued and the KV pool under a fifth full:
``mamba_bound`` fires beside the boot's ``mamba_capped``, and so do their alerts in a real Prometheus running the
project's rules. While SGLang writes, the real ``logrotate`` copytruncates the log. At consistent moments the
exporter's gauges equal the newest batch line and SGLang's own /metrics. The first flag the exporter recommends for
``mamba_bound`` is applied in boot 2, appended to the same file; ``report`` of the whole log (the rotated copy and the
live file) compares what the exporter predicted with what SGLang then logged.

Between the boots, idle clears (issue 32): once its last request ends SGLang prints no line at all (no idle batch
line, nothing periodic), so the sidecar, its log read to the end, sees ``quiet_seconds`` of wall time pass without a
batch line and shows the source idle as of its last batch line (basis ``wall_clock``), ``mamba_bound`` ended and
``mamba_capped`` kept. A scrape of SGLang's /metrics then writes one access line, whose time shows the same silence in
the log's own time: the basis becomes ``derived``, and ``report`` of the file says the same.
"""

from __future__ import annotations

import calendar
import json
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import checks as c
import harness as h
import pytest
import sglang_checks as sc
import sglang_harness as sh
from prom import Prometheus

SOURCE = "sglang-mamba"
SLOTS, KV_TOKENS, CLIENTS = 16, 4096, 10


def max_tokens(i: int) -> int:
    """64-127 tokens, staggered, so that the requests do not finish together and the queue never empties: the KV
    pool holds at most 5 x (10 + 127) tokens, under a fifth of it."""
    return 64 + (i * 37) % 64


ARGS = ("--max-mamba-cache-size", str(SLOTS), "--max-total-tokens", str(KV_TOKENS))
DECODE_LOG_INTERVAL = 8
ALERTS = {"HybridCacheMambaBound", "HybridCacheMambaCappedAtStartup"}
QUIET = 30.0  # the suite's quiet_seconds (sglang_checks.RULES_YAML)
MOMENTS = 5  # consistent moments, each at a different batch line with requests running
# boot 2 runs the same clients for the rule's window and one more sample of log time, in 3 samples or more
WINDOW = sc.FOR_SECONDS + sc.SAMPLE_SECONDS


def all_running(m) -> bool:
    return int(m["running"]) == CLIENTS


def every_client(text: str) -> list:
    return [m for m in sh.batch_lines(text) if all_running(m)]


def window_of_load(text: str) -> bool:
    times = [sc.log_time(m) for m in every_client(text)]
    return len({int(t // sc.SAMPLE_SECONDS) for t in times}) >= 3 and times[-1] - times[0] >= WINDOW


@dataclass
class Run:
    log: Path
    rotated: Path
    boot1: str  # the sidecar once boot 1's capacity lines are read
    boot1_sglang: str
    fired: str  # the sidecar when mamba_bound fired
    firing: set  # the alerts Prometheus fired
    recorder: h.Recorder
    flag: str
    value: str
    idle: str  # the sidecar once its log was silent for quiet_seconds after the load
    idle_log: str  # after one access line showed the silence in log time
    idle_report: dict  # report --json of the log then
    idle_page: str
    last_batch: str  # the log's last batch line before the silence
    idle_text: str  # the log when the sidecar showed the source idle
    poke: str  # the access line that showed it
    stopped1: str
    boot2: str
    boot2_sglang: str
    boot2_load: str
    end: str
    text: str  # the rotated copy and the live file
    reports: dict
    page: str
    boot_seconds: tuple[float, float]
    written: str  # every byte SGLang wrote, both boots (harness.Engine.written): what the sidecar read


def findings(side: h.Sidecar) -> set[str]:
    return c.findings_on(side.caught_up(), SOURCE)


@pytest.fixture(scope="module")
def run(sglang_lfm2, workdir) -> Run:
    lfm2 = sglang_lfm2
    log = workdir / f"{SOURCE}.log"
    log.touch()
    side = h.Sidecar(log, SOURCE, workdir, rules_yaml=sc.RULES_YAML)
    prom = Prometheus(workdir, SOURCE, side.port)
    eng = sh.Engine(lfm2, log, ARGS, served_name="tiny-lfm2", decode_log_interval=DECODE_LOG_INTERVAL)
    eng2 = load = None
    try:
        eng.start()
        e1 = c.wait_exporter(side, lambda e: c.exp(e, "mamba_capacity_slots", SOURCE) is not None, 30, "boot 1's capacity lines")
        sg1 = eng.metrics()
        load = h.Load(eng.base, eng.served_name, CLIENTS, max_tokens=max_tokens, bound=900).start()

        def seen() -> str:
            lines = sh.batch_lines(eng.this_boot())
            return f"{len(lines)} batch lines, the last {lines[-1].group(0) if lines else None!r}; findings {findings(side)}"

        def bound() -> str | None:
            e = side.caught_up()
            return e if "mamba_bound" in c.findings_on(e, SOURCE) else None

        fired = h.drive_until(bound, 300, seen, "mamba_bound to fire (its window and one more sample)")
        firing = h.drive_until(
            lambda: prom.firing() >= ALERTS and prom.firing(), 60, lambda: str(prom.alerts()), f"{ALERTS} firing in Prometheus"
        )
        rec = sc.recorder(eng, side)
        rec.record(MOMENTS, 180, sc.busy, f"{MOMENTS} consistent moments at batch lines with requests running", every=0.5)
        # copytruncate right after a batch line, so that one seldom falls in logrotate's own window between its copy
        # and its truncation (a line written there is lost to both files, logrotate's limitation, not to a reader
        # that read it before: the engine's own copy, harness.Engine.written, has it)
        n = len(sh.batch_lines(h.read(log)))
        h.drive_until(lambda: len(sh.batch_lines(h.read(log))) > n, 60, seen, "a batch line", every=0.02)
        rotated = c.copytruncate(log, workdir)
        h.drive_until(lambda: len(sh.batch_lines(h.read(log))) >= 3, 120, seen, "3 batch lines after the copytruncate")
        load.stop().join()
        # idle clears: SGLang writes nothing now; the sidecar's wall clock tells within quiet_seconds and a tick
        ended = {"mamba_bound", "kv_bound", "request_cap_bound", "retraction_storm"}

        def quiet() -> str:
            e = side.caught_up()
            st = [lab["state"] for lab, v in h.samples(e, "hybrid_cache_server_state", source=SOURCE) if v == 1.0]
            basis = [lab["basis"] for lab, v in h.samples(e, "hybrid_cache_server_state_basis", source=SOURCE) if v == 1.0]
            tail = h.read(log).rstrip("\n").rsplit("\n", 1)[-1]
            return f"state {st}, basis {basis}, findings {c.findings_on(e, SOURCE)}; the log's last line {tail!r}"

        def idle_now() -> str | None:
            e = side.caught_up()
            return e if c.state_of(e, SOURCE) == "idle" and not (c.findings_on(e, SOURCE) & ended) else None

        idle = h.drive_until(idle_now, QUIET + 60, quiet, f"the source idle, {sorted(ended)} ended ({QUIET:g} s of silence)")
        idle_text = h.read(log)
        last_batch = sh.batch_lines(idle_text)[-1].group(0)

        def poked() -> str | None:
            """A scrape of SGLang's /metrics: one access line; the newest, once it is more than quiet_seconds after
            the last batch line by the log's own clock (the wall clock may have told a second before the header did)."""
            eng.metrics()
            lines = [ln for ln in h.read(log)[len(idle_text) :].splitlines() if '"GET /metrics' in ln]
            return lines[-1] if lines and _header_time(lines[-1]) - _header_time(last_batch) > QUIET else None

        poke = h.drive_until(poked, 30, quiet, "an access line more than quiet_seconds after the last batch line", every=1.0)
        idle_log = h.drive_until(
            lambda: (lambda e: e if c.exp(e, "server_state_basis", SOURCE, basis="derived") == 1 else None)(side.caught_up()),
            30,
            quiet,
            "the basis derived after the access line",
        )
        idle_report = json.loads(c.reports([rotated, log], side.rules)["json"])
        with urllib.request.urlopen(side.base + "/", timeout=30) as r:
            idle_page = r.read().decode()
        reco = [lab for lab, _ in h.samples(fired, "hybrid_cache_recommendation_info", source=SOURCE, rule="mamba_bound")]
        first = [lab for lab in reco if lab["rank"] == "1"]
        assert first, f"mamba_bound fired with no first recommendation: {reco}"
        flag, value = first[0]["flag"], first[0]["value"]
        eng.stop()
        e_stop = c.wait_exporter(side, lambda e: c.state_of(e, SOURCE) == "stopped", 60, "the stopped state")
        # boot 2: the advice applied, appending to the same file
        args2 = list(ARGS)
        if flag in args2:
            args2[args2.index(flag) + 1] = value
        else:
            args2 += [flag, value]
        eng2 = sh.Engine(lfm2, log, tuple(args2), served_name="tiny-lfm2", decode_log_interval=DECODE_LOG_INTERVAL)
        e2 = c.restart(side, eng2, SOURCE, "mamba_capacity_slots", 60)
        sg2 = eng2.metrics()
        load = h.Load(eng2.base, eng2.served_name, CLIENTS, max_tokens=max_tokens, bound=600).start()
        # the same clients for as long as the finding's window and one more sample, in log time
        sc.wait_lines(eng2, 1, 120, "with every client running", all_running)
        h.drive_until(
            lambda: window_of_load(eng2.this_boot()),
            120,
            lambda: f"{len(every_client(eng2.this_boot()))} batch lines with every client running",
            f"batch lines with every client running over {WINDOW} s of log time (the rule's window and one sample)",
            every=1.0,
        )
        load.stop().join()
        e2_load = side.caught_up()
        eng2.stop()
        e_end = c.wait_exporter(side, lambda e: c.state_of(e, SOURCE) == "stopped", 60, "boot 2 stopped")
        reps = c.reports([rotated, log], side.rules)
        with urllib.request.urlopen(side.base + "/", timeout=30) as r:
            page = r.read().decode()
        text = h.read(rotated) + h.read(log)
        joined = workdir / f"{SOURCE}.joined.log"
        joined.write_text(text)
        sh.save_fixture(joined, SOURCE, workdir)
        return Run(
            log,
            rotated,
            e1,
            sg1,
            fired,
            firing,
            rec,
            flag,
            value,
            idle,
            idle_log,
            idle_report,
            idle_page,
            last_batch,
            idle_text,
            poke,
            e_stop,
            e2,
            sg2,
            e2_load,
            e_end,
            text,
            reps,
            page,
            (eng.boot_seconds, eng2.boot_seconds),
            h.read(eng2.written),
        )
    finally:
        if load is not None:
            load.stop()
        eng.stop()
        if eng2 is not None:
            eng2.stop()
        prom.stop()
        side.stop()


def test_capacity_equals_the_log_and_sglang(run):
    boot = sc.assert_capacity(run.boot1, SOURCE, h.read(run.rotated), run.boot1_sglang)
    assert (boot.slots, boot.kv_tokens, boot.cap, boot.slots_per_request) == (SLOTS, KV_TOKENS, SLOTS // 3, 3)
    # LFM2's state is all convolution: SGLang sizes its SSM (temporal) state at 0 (configs/lfm2.py)
    assert boot.ssm_bytes == 0.0


def test_plan_reproduces_the_pools(run, sglang_lfm2):
    """``plan --engine sglang`` from the LFM2's config gives both boots' pools: slots, 3 per request, the cap, the
    state (all convolution: no SSM bytes) and the KV bytes per token."""
    for text, sg in ((h.read(run.rotated), run.boot1_sglang), (run.text, run.boot2_sglang)):
        p = sc.assert_plan(sglang_lfm2 / "config.json", text, sg)
        assert p["state"]["ssm_bytes_per_request_per_gpu"] == 0


def test_mamba_bound_fires_with_the_kv_pool_nearly_empty(run):
    """Concurrency pinned at the mamba cap with requests queued while the KV pool is nearly empty: boot 1's batch lines
    show it, the finding fires (with the boot's mamba_capped), and so do both alerts in Prometheus."""
    boot1 = sh.batch_lines(h.read(run.rotated))
    pinned = [m for m in boot1 if int(m["running"]) == SLOTS // 3 and int(m["queued"]) > 0]
    assert len(pinned) >= 3, f"{len(pinned)} of {len(boot1)} batch lines at the cap with requests queued"
    assert all(float(m["kv"]) < 0.2 for m in boot1), "the KV pool stayed under a fifth full"
    assert max(int(m["running"]) for m in boot1) == SLOTS // 3, "never above the mamba cap"
    e = run.fired
    assert {"mamba_bound", "mamba_capped"} <= c.findings_on(e, SOURCE)
    assert c.exp(e, "kv_usage_ratio", SOURCE) < 0.2 and c.exp(e, "max_running_requests", SOURCE) == SLOTS // 3
    assert run.firing >= ALERTS


def test_no_ssm_dtype_advice_for_an_empty_ssm_state(run):
    """Issue 32: the log says the SSM state is 0.00 GB (LFM2: all conv state); halving it frees nothing, so
    --mamba-ssm-dtype is never recommended; the pool's size is."""
    recos = {(lab["rule"], lab["flag"]) for lab, _ in h.samples(run.fired, "hybrid_cache_recommendation_info", source=SOURCE)}
    assert recos and not [r for r in recos if r[1] == "--mamba-ssm-dtype"], recos
    assert run.flag in ("--max-mamba-cache-size", "--mamba-full-memory-ratio"), run.flag
    # report at the idle moment (mamba_capped kept): its recommendations, not SGLang's own cap line quoted as
    # evidence ("... or halve the state size with --mamba-ssm-dtype bfloat16.")
    (src,) = [x for x in run.idle_report["sources"] if x["source"] == SOURCE]
    advice = [d["flag"] for srv in src["servers"] for d in (srv.get("status") or {}).get("recommendations") or []]
    assert advice and not [f for f in advice if f.startswith("--mamba-ssm-dtype")], advice
    assert "--mamba-ssm-dtype" not in recommendations_section(run.reports["text"])


def recommendations_section(text: str) -> str:
    """The text report's recommendations: from their heading to the next blank line."""
    _, found, rest = text.partition("Recommendations")
    return rest.split("\n\n", 1)[0] if found else ""


def test_gauges_equal_the_line_and_sglang_at_consistent_moments(run):
    assert len(run.recorder.distinct(sc.busy)) >= MOMENTS, run.recorder.summary(sc.busy)
    for m in run.recorder.moments:
        sc.assert_gauges_equal_line(m, SOURCE)
        sc.assert_gauges_equal_sglang(m, SOURCE)


def test_second_boot_has_what_the_exporter_predicted(run):
    """The before/after: boot 2 logs the mamba pool and cap the exporter's first recommendation predicted; with every
    client running, nothing queues and mamba_bound does not fire."""
    ba_json = next(s for s in json.loads(run.reports["json"])["sources"] if s["source"] == SOURCE)["servers"][0]["before_after"]
    assert ba_json is not None and ba_json["boots"] == 2, ba_json
    setting = run.flag.lstrip("-").replace("-", "_")
    assert [ch["setting"] for ch in ba_json["changed"]] == [setting], ba_json["changed"]
    pools = {r["what"]: r for r in ba_json["pools"]}
    boot2 = sc.last_boot(h.read(run.log))
    for what, logged in (("mamba slots", boot2.slots), ("request cap", boot2.max_running)):
        row = pools[what]
        assert row["after"] == logged and row.get("predicted") == logged and row.get("verdict") == "agrees", row
    assert pools["KV tokens"]["before"] == pools["KV tokens"]["after"] == KV_TOKENS
    assert "mamba_bound" in ba_json["before"]["fired"] and "mamba_bound" not in ba_json["after"]["fired"]
    assert "mamba_bound" not in c.findings_on(run.boot2_load, SOURCE)
    sc.assert_capacity(run.boot2, SOURCE, run.text, run.boot2_sglang)
    for fmt in ("text", "markdown"):
        assert "Before and after the restart at " in run.reports[fmt] and "(2 boots in the log)" in run.reports[fmt], fmt
    assert "Before and after the restart" in run.page


def test_sidecar_counts_every_batch_line_once(run):
    """Through a copytruncate while SGLang writes and a restart appending to the same file: no batch line lost or
    doubled. The truth is what SGLang wrote (the harness's copy); the files logrotate kept may lack lines written in
    its window between copy and truncation, never more."""
    lines = sh.batch_lines(run.written)
    assert set(m.group(0) for m in sh.batch_lines(run.text)) <= set(m.group(0) for m in lines)
    decode = sum(1 for m in lines if "mamba_num" in m.re.groupindex)
    assert c.exp(run.end, "decode_batches_total", SOURCE) == decode
    assert c.exp(run.end, "prefill_batches_total", SOURCE) == len(lines) - decode
    assert c.exp(run.end, "server_restarts_total", SOURCE) == 1
    assert h.value(run.end, "hybrid_cache_exporter_truncations_total", source=SOURCE) >= 1
    c.assert_clean_lines(run.end, SOURCE)


def _header_time(line: str) -> float:
    """A line's header time as naive seconds (differences only: the zone cancels out)."""
    return calendar.timegm(time.strptime(line[1:20], "%Y-%m-%d %H:%M:%S"))


def test_idle_clears_when_sglang_goes_silent(run):
    """Issue 32, idle clears: SGLang wrote nothing after its last batch line; the sidecar shows the source idle as of
    that line by the wall clock (its log read to the end), the pool findings ended and mamba_capped (a fact of the boot)
    kept, and the status page says why. One access line later the log's own time shows it: the basis becomes
    derived, and replaying the file (``report``) reaches the same state from the lines alone."""
    assert float(sc.RULES_YAML.split("quiet_seconds:")[1].split()[0]) == QUIET
    e = run.idle
    assert c.state_of(e, SOURCE) == "idle"
    assert c.exp(e, "server_state_basis", SOURCE, basis="wall_clock") == 1, "nothing but the wall clock can tell yet"
    assert c.findings_on(e, SOURCE) == {"mamba_capped"}
    # after its last batch line SGLang wrote only the answers of the last requests, within quiet_seconds of it: only
    # the wall clock could tell the silence; the state is as of the last batch line
    after = [ln for ln in run.idle_text.split(run.last_batch, 1)[1].splitlines() if ln.startswith("[")]
    assert all(_header_time(ln) - _header_time(run.last_batch) <= QUIET for ln in after), after
    since = c.exp(e, "server_state_since_timestamp_seconds", SOURCE)
    last = after[-1] if after else run.last_batch
    assert c.exp(e, "last_line_timestamp_seconds", SOURCE) - since == _header_time(last) - _header_time(run.last_batch)
    # the gauges stay the last batch line's (documented): running as that line printed it
    assert c.exp(e, "running_requests", SOURCE) == int(sh.batch_lines(run.last_batch)[0]["running"])
    # the access line, more than quiet_seconds later, proves the silence in log time
    gap = _header_time(run.poke) - _header_time(run.last_batch)
    assert gap > QUIET, (run.last_batch, run.poke)
    e = run.idle_log
    assert c.state_of(e, SOURCE) == "idle" and c.findings_on(e, SOURCE) == {"mamba_capped"}
    since = c.exp(e, "server_state_since_timestamp_seconds", SOURCE)
    assert c.exp(e, "last_line_timestamp_seconds", SOURCE) - since == gap
    # replay of the same lines: the same state, basis and since, from the log alone
    (src,) = [x for x in run.idle_report["sources"] if x["source"] == SOURCE]
    life = src["servers"][0]["status"]["life"]
    assert (life["state"], life["basis"], life["since"]) == ("idle", "derived", run.last_batch[1:20]), life
    assert "mamba_bound" not in src["servers"][0]["status"]["headline"]
    assert f"no batch line for more than {QUIET:g} s" in run.idle_page


def test_stopped_not_dead(run):
    for e in (run.stopped1, run.end):
        assert c.state_of(e, SOURCE) == "stopped"
        assert c.exp(e, "server_deaths_total", SOURCE) == 0
