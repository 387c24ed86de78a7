"""Silence (docs/rules.md#silence): an SGLang server prints no line while idle, so a serving source whose batch lines
stopped for longer than ``quiet_seconds`` is idle as of its last batch line, and the findings an idle sample ends, end.

* the state machine against a reference written out from the documentation (random sequences of samples, silences,
  stops, deaths and boots), as the hysteresis' reference test does;
* in log time: a later line of any kind shows the silence (an access line, a batch line, an event line, a boot);
  every read path (line by line, chunks through the C and the pure-Python scanner, blocks of text) reaches the same
  state, and the state a naive reading of the lines gives;
* by the wall clock (serve's tick): only for a log read to its end; a later line showing the same gap gives the
  log's basis, so serve ends where replay ends; a restored state goes quiet too;
* vLLM is untouched (its idle stats line, its ``stalled`` state), and ``quiet_seconds: 0`` turns it off.

No test waits on a clock: the ticks are given their ``now``.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import feed_support
import pytest

from exporter.app import exposition, new_pipeline
from exporter.diagnosis.rules import ENDING_RULES, RulesConfig, load_config
from exporter.presentation.report import life_of
from exporter.state.snapshot import capture, restore
from exporter.state.store import ENDED, STATE_BASES, Silence, SourceState
from parsers import clock
from parsers import events as ev
from parsers.clock import sglang_ts

ROOT = Path(__file__).resolve().parents[2]
MAMBA = ROOT / "fixtures" / "scenarios" / "sglang-mamba-bound.log"
Q = 60.0


def header(ts: float) -> str:
    """An SGLang header for Unix time ``ts``, as the log prints it (the zone the headers are read in)."""
    return "[" + clock.wall_text(ts)


def decode(ts: float, running: int = 16, queued: int = 9, mamba: float = 0.97) -> str:
    return (
        f"{header(ts)} TP0] Decode batch, #running-req: {running}, #full token: 20920, full token usage: 0.10, mamba num: 78, "
        f"mamba usage: {mamba:.2f}, cuda graph: True, gen throughput (token/s): 491.37, #queue-req: {queued}"
    )


def prefill(ts: float, new: int = 1, running: int = 15, queued: int = 9) -> str:
    return (
        f"{header(ts)} TP0] Prefill batch, #new-seq: {new}, #new-token: 1320, #cached-token: 0, full token usage: 0.11, "
        f"mamba usage: 0.95, #running-req: {running}, #queue-req: {queued}, #pending-token: 0, cuda graph: False, "
        f"input throughput (token/s): 8314.49"
    )


def access(ts: float, port: int = 40100) -> str:
    return f'{header(ts)}] INFO:     10.0.0.1:{port} - "GET /health HTTP/1.1" 200 OK'


BASE = MAMBA.read_text().splitlines()  # a mamba-bound SGLang server, mamba_bound firing at its end
END = sglang_ts(BASE[-1][1:17], BASE[-1][18:20], None)  # its last line (an access line at its last batch line's time)
LAST_BATCH = max(sglang_ts(x[1:17], x[18:20], None) for x in BASE if "batch," in x)


def replayed(lines: list[str], cfg: RulesConfig | None = None):
    pipe = new_pipeline(config=cfg)
    pipe.feed_lines("s", lines)
    pipe.finish()
    return pipe, pipe.sources["s"]


def state(src: SourceState) -> tuple:
    srv = src.servers["0"]
    return (src.life, src.life_since, src.basis, {r for r, v in srv.findings.items() if v})


# --------------------------------------------------------------------------------------------
# the state machine against its reference


def _reference(cur: tuple, op: tuple) -> tuple:
    """docs/rules.md's table, written out: (life, since, cause) after ``op``."""
    life, since, cause = cur
    kind = op[0]
    if kind == "sample":  # a sample: busy serving, else idle; an ended server stays ended
        _, busy, ts = op
        new = "serving" if busy else "idle"
        if life in ENDED or life == new:
            return cur
        return new, ts, None
    if kind == "silence":  # a serving source goes idle as of its last batch line; the log confirms the wall clock
        _, basis, at = op
        if life == "serving":
            return "idle", at, "silent" if basis == "log" else "silent_wall"
        if basis == "log" and life == "idle" and cause == "silent_wall" and since == at:
            return life, since, "silent"
        return cur
    if kind == "stop":
        return cur if life in ENDED else ("stopped", op[1], "signal")
    if kind == "death":
        return cur if life == "dead" else ("dead", op[1], "scheduler_error")
    if kind == "boot":
        return "starting", op[1], None
    raise AssertionError(op)


@pytest.mark.parametrize("seed", range(30))
def test_the_state_machine_follows_its_reference(seed: int) -> None:
    rnd = random.Random(seed)
    src = SourceState("s", engine=ev.SGLANG)
    src.set_life("starting", 0.0)
    ref = ("starting", 0.0, None)
    ts, last_batch = 0.0, None
    for k in range(300):
        ts += rnd.choice([1.0, 5.0, 30.0, 90.0])
        r = rnd.random()
        if r < 0.55:
            busy = rnd.random() < 0.8
            op = ("sample", busy, ts)
            e = ev.BatchStats("decode", running=3 if busy else 0, queued=0, gen_throughput=10.0)
            src.sample(ev.Line(ev.PARSED, ev.SGLANG, ts, event=e))
            last_batch = ts
        elif r < 0.85 and last_batch is not None:
            # a silence is always of the last batch line; the wall clock's may be followed by the log's
            op = ("silence", rnd.choice(["log", "wall"]), last_batch)
            src.silence(Silence(last_batch, op[1]))
        elif r < 0.92:
            op = ("stop", ts)
            src.set_life("stopped", ts, "signal")
        elif r < 0.95:
            op = ("death", ts)
            src.set_life("dead", ts, "scheduler_error")
        else:
            op = ("boot", ts)
            src.restart()
            src.set_life("starting", ts)
            last_batch = None
        ref = _reference(ref, op)
        assert (src.life, src.life_since, src.life_cause) == ref, (k, op)
        assert src.basis == {"silent": "derived", "silent_wall": "wall_clock"}.get(ref[2], "logged")


# --------------------------------------------------------------------------------------------
# log time: a later line shows the silence


def test_probes_after_the_last_batch_line_show_the_silence() -> None:
    """The scenario of fixtures/scenarios/sglang-goes-silent.log: probes every 10 s after the load; the first one
    more than quiet_seconds after the last batch line ends mamba_bound, as of that batch line."""
    _, src = replayed(BASE)
    assert state(src) == ("serving", state(src)[1], "logged", {"mamba_bound", "mamba_capped"})
    probes = [access(END + 7 + 10 * k, 40100 + k) for k in range(30)]
    for n, want in ((6, "serving"), (7, "idle")):  # END + 57 s: not yet; END + 67 s: silent
        _, src = replayed(BASE + probes[:n])
        assert src.life == want, n
    pipe, src = replayed(BASE + probes)
    assert state(src) == ("idle", LAST_BATCH, "derived", {"mamba_capped"})
    srv = src.servers["0"]
    m = srv.rule_memory
    ep = m.episodes["mamba_bound"][-1]
    assert ep[1] == LAST_BATCH  # the episode ends at the last batch line, the line that still showed the load
    clear = m.evidence["mamba_bound"].clear
    assert clear[0][0] == LAST_BATCH and "Decode batch" in clear[0][1] and "quiet_seconds" in clear[1][1]
    assert m.binding_last is None  # the silent time is no pool's binding time
    # the gauges stay the last batch line's (docs/rules.md#silence): the state says they are not a load now
    assert srv.gauges["running_requests"] == 16.0
    assert srv.recommendations and {r[0] for r in srv.recommendations} == {"mamba_capped"}
    life = life_of(src)
    assert life["basis"] == "derived" and "no batch line for more than 60 s" in life["words"]


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(lambda t: [decode(t)], id="a batch line (a new load)"),
        pytest.param(lambda t: [prefill(t)], id="a prefill line"),
        pytest.param(lambda t: [f"{header(t)} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1"], id="an event line"),
        pytest.param(lambda t: [f"{header(t)}] Cache flushed successfully!"], id="an ignored line"),
    ],
)
def test_any_line_after_the_gap_shows_it_before_it_counts(after) -> None:
    """Whatever line comes first after the gap, the silence is applied before it: the findings end as of the last
    batch line, and a new load then serves again (its own sample), with fresh windows."""
    _, src = replayed(BASE + after(LAST_BATCH + Q + 5))
    srv = src.servers["0"]
    assert srv.findings["mamba_bound"] == 0
    assert srv.rule_memory.episodes["mamba_bound"][-1][1] == LAST_BATCH
    assert src.life in ("idle", "serving")
    if src.life == "serving":  # the new load's sample came after the silence
        assert src.life_since == LAST_BATCH + Q + 5 and src.basis == "logged"


def test_a_boot_after_the_gap_is_a_restart_after_the_silence() -> None:
    boot = [x for x in BASE[:40] if "server_args=" in x or "Mamba Cache" in x]
    shifted = [header(LAST_BATCH + 600) + x[20:] for x in boot]
    _, src = replayed(BASE + shifted)
    assert src.life == "starting" and src.restarts == 1 and src.batch_ts is None
    assert src.servers["0"].rule_memory.boots[-1].fired  # the old boot's record is kept


def test_gaps_within_the_bound_change_nothing() -> None:
    """A busy server's batch lines come seconds apart; a gap of quiet_seconds exactly is not yet a silence."""
    t = LAST_BATCH
    tail = [decode(t + Q), access(t + 2 * Q), decode(t + 2 * Q)]
    _, src = replayed(BASE + tail)
    assert src.life == "serving" and src.servers["0"].findings["mamba_bound"] == 1 and src.basis == "logged"


def test_quiet_seconds_zero_turns_it_off_and_vllm_is_untouched() -> None:
    _, src = replayed(BASE + [access(LAST_BATCH + 3600)], RulesConfig(quiet_seconds=0))
    assert state(src)[0] == "serving" and "mamba_bound" in state(src)[3]
    # vLLM: a serving server whose stats lines stop stays serving (vLLM prints an idle line when idle: silence there is
    # a hang, not idleness), and stalled stays stalled
    from test_quiet_and_death import BOOT, PINNED, stats

    pipe = new_pipeline(config=RulesConfig(for_seconds=9, min_samples=3, clear_seconds=9, clear_min_samples=3))
    pipe.feed_lines("v", BOOT + PINNED + [stats(40, 2, 6, gen=0.0, prompt=0.0), stats(59 * 60, 2, 6, gen=0.0, prompt=0.0)])
    pipe.finish()
    src = pipe.sources["v"]
    assert src.life == "stalled" and src.batch_ts is None and src.servers["0"].findings["request_cap_bound"] == 1
    pipe.tick(1e12, caught_up=lambda: {"v"})
    assert src.life == "stalled"


# --------------------------------------------------------------------------------------------
# every read path, and a naive reading of the lines


def random_log(rnd: random.Random) -> list[str]:
    """The mamba-bound server, then bursts of load and silences of random lengths, with probes in between."""
    out = list(BASE)
    t = LAST_BATCH
    for _ in range(rnd.randint(3, 12)):
        for _ in range(rnd.randint(0, 40)):
            t += rnd.choice([0.0, 1.0, 2.0, 3.0, 7.0])
            out.append(rnd.choice([decode, decode, prefill])(t))
            if rnd.random() < 0.3:
                out.append(access(t, rnd.randint(1024, 65000)))
        gap = rnd.choice([5.0, 30.0, 59.0, 60.0, 61.0, 65.0, 200.0, 900.0])
        for at in sorted(rnd.uniform(0, gap) // 1 for _ in range(rnd.randint(0, 8))):  # probes, some past the bound
            out.append(access(t + at, rnd.randint(1024, 65000)))
        t += gap
    return out


def silences_by_hand(lines: list[str]) -> list[float]:
    """The silences a reading of the lines gives: a line more than Q after the newest batch line while the server
    serves (the base log serves from its first sample; after a silence, the next batch line serves again)."""
    out, newest, serving = [], None, False
    for x in lines:
        if not x.startswith("[20"):
            continue
        ts = sglang_ts(x[1:17], x[18:20], None)
        if newest is not None and serving and ts - newest > Q:
            out.append(newest)
            serving = False
        if "batch," in x:
            newest = ts if newest is None or ts > newest else newest
            serving = True
    return out


def _spied(cfg: RulesConfig | None = None):
    pipe = new_pipeline(config=cfg)
    pipe.seen = []

    def spy(src, srv, line, raw):
        if type(line.event) is Silence:
            pipe.seen.append((line.event.since, line.event.basis))

    pipe.observers.append(spy)
    return pipe


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("scanner", feed_support.SCANNERS)
def test_every_read_path_sees_the_same_silences_as_the_lines_say(seed: int, scanner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    feed_support.use_scanner(monkeypatch, scanner)
    rnd = random.Random(seed)
    lines = random_log(rnd)
    want = silences_by_hand(lines)
    results = []
    for how in (*feed_support.PATHS, "chunks"):
        pipe = _spied()
        feed_support.feed(pipe, how, lines, seed=seed)
        pipe.finish()
        assert [s for s, _ in pipe.seen] == want, how
        results.append((exposition(pipe), state(pipe.sources["s"])))
    assert all(r == results[0] for r in results[1:])


def test_the_scanner_keeps_its_runs_on_a_busy_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The silence costs the bulk path nothing where batch lines come seconds apart: every run is taken whole."""
    from exporter.state.sampler import Sampler

    taken, refused = [], []
    orig = Sampler.run

    def run(self, src, ss, line, lo, r, peeled=False):
        ok = orig(self, src, ss, line, lo, r, peeled)
        (taken if ok else refused).append(r.stop - lo)
        return ok

    monkeypatch.setattr(Sampler, "run", run)
    t = LAST_BATCH
    busy = [decode(t + k // 3) for k in range(3000)]
    pipe = new_pipeline()
    pipe.feed_lines("s", BASE)
    pipe.feed_lines("s", busy)
    assert sum(taken) > 2900 and not refused


# --------------------------------------------------------------------------------------------
# the wall clock (serve's tick)


def _fed(lines: list[str], cfg: RulesConfig | None = None):
    pipe = new_pipeline(config=cfg)
    pipe.feed_lines("s", lines)
    return pipe, pipe.sources["s"], pipe.sampler.sampling["s"]


def test_the_wall_clock_tells_only_a_log_read_to_its_end() -> None:
    pipe, src, ss = _fed(BASE)
    t0 = ss.fed_at
    pipe.tick(t0 + Q + 1)  # replay's path: no caught_up, no wall clock
    assert src.life == "serving"
    pipe.tick(t0 + Q + 1, caught_up=set)  # bytes left to read: the lines may be on their way
    assert src.life == "serving"
    pipe.tick(t0 + Q - 1, caught_up=lambda: {"s"})  # not silent for long enough
    assert src.life == "serving" and src.servers["0"].findings["mamba_bound"] == 1
    pipe.tick(t0 + Q, caught_up=lambda: {"s"})
    assert state(src) == ("idle", LAST_BATCH, "wall_clock", {"mamba_capped"})
    assert "told by the wall clock" in life_of(src)["words"]
    # a probe later, the log's own time says the same: serve's state is then replay's of the same lines
    pipe.feed("s", access(LAST_BATCH + Q + 30))
    pipe.finish()
    _, replay = replayed(BASE + [access(LAST_BATCH + Q + 30)])
    assert state(src) == state(replay) == ("idle", LAST_BATCH, "derived", {"mamba_capped"})
    assert exposition(pipe) == exposition(replayed(BASE + [access(LAST_BATCH + Q + 30)])[0])


def test_a_late_line_within_the_bound_is_the_documented_exception() -> None:
    """A log written late (lines held for longer than quiet_seconds, then written with their old times): the wall
    clock said idle, the lines then say the server served on. serve keeps what it saw and says so (basis
    wall_clock); the next samples serve again and the rules' windows start over (docs/rules.md#silence)."""
    pipe, src, ss = _fed(BASE)
    pipe.tick(ss.fed_at + Q, caught_up=lambda: {"s"})
    assert src.basis == "wall_clock"
    pipe.feed_lines("s", [decode(LAST_BATCH + 5), decode(LAST_BATCH + 15)])
    pipe.finish()
    assert src.life == "serving" and src.basis == "logged"
    assert src.servers["0"].findings["mamba_bound"] == 0  # replay of the same lines keeps it: the exception
    _, replay = replayed(BASE + [decode(LAST_BATCH + 5), decode(LAST_BATCH + 15)])
    assert replay.servers["0"].findings["mamba_bound"] == 1


def test_a_restored_state_goes_quiet_by_the_wall_clock_too() -> None:
    """serve restarted (positions, or the current boot read back at start): the last batch line's time comes with
    the state, and the wall clock runs from the start of the new pipeline."""
    old, _, _ = _fed(BASE)
    snap = capture(old, "s")
    new = new_pipeline()
    restore(new, "s", snap)
    src = new.sources["s"]
    assert src.life == "serving" and src.batch_ts == LAST_BATCH
    new.tick(new.began + Q - 1, caught_up=lambda: {"s"})
    assert src.life == "serving"
    new.tick(new.began + Q, caught_up=lambda: {"s"})
    assert src.life == "idle" and src.life_since == LAST_BATCH and src.basis == "wall_clock"


def test_the_basis_is_exported_with_the_state() -> None:
    pipe, _ = replayed(BASE + [access(LAST_BATCH + 3600)])
    text = exposition(pipe).decode()
    got = {b: f'hybrid_cache_server_state_basis{{basis="{b}",engine="sglang",source="s"}}' in text for b in STATE_BASES}
    assert all(got.values()), got
    assert 'hybrid_cache_server_state_basis{basis="derived",engine="sglang",source="s"} 1.0' in text
    assert all(f'rule="{r}"' in text for r in ENDING_RULES)


def _suite_rules(tmp_path: Path) -> Path:
    """The real-engine suite's rules for SGLang (tests/engine/sglang-rules.yaml, which tests/engine/sglang_checks.py
    reads)."""
    return ROOT / "tests" / "engine" / "sglang-rules.yaml"


def test_the_real_sglang_log_goes_idle_after_its_load(tmp_path: Path) -> None:
    """The real SGLang 0.5.23's mission run (fixtures/engine/sglang-cpu-0.5.23/sglang-mamba.log, docs/engine-suite.md)
    under the suite's rules: boot 1's load pinned at the mamba cap fired mamba_bound; after it SGLang wrote the last
    answers and then nothing until one scrape of its /metrics 31 s later, which shows the silence (quiet_seconds 30):
    idle as of the last batch line, mamba_bound ended there, mamba_capped kept. With the default 60 s the same gap is
    within the bound, and boot 1 ends by its shutdown line as before."""
    suite = load_config(str(_suite_rules(tmp_path)))  # the real-engine suite's rules for SGLang (quiet_seconds 30)
    lines = (ROOT / "fixtures" / "engine" / "sglang-cpu-0.5.23" / "sglang-mamba.log").read_text().splitlines()
    stop = next(i for i, x in enumerate(lines) if "SIGTERM received" in x)
    boot1 = lines[:stop]
    last_batch = max(i for i, x in enumerate(boot1) if "batch," in x)
    poke = boot1[-1]
    assert '"GET /metrics' in poke and all("INFO:" in x for x in boot1[last_batch + 1 :]), boot1[last_batch:]
    t_batch, t_poke = (sglang_ts(x[1:17], x[18:20], None) for x in (boot1[last_batch], poke))
    assert Q > t_poke - t_batch > suite.quiet_seconds
    _, src = replayed(boot1[:-1], suite)  # before the scrape: nothing in the log can tell (serve's wall clock did)
    assert src.life == "serving"
    _, src = replayed(boot1, suite)
    assert state(src) == ("idle", t_batch, "derived", {"mamba_capped"})
    eps = src.servers["0"].rule_memory.episodes["mamba_bound"]
    assert eps and eps[-1][1] == t_batch
    _, src = replayed(lines)  # the whole log, the default bound: boot 2 stopped, no silence on the way
    assert src.life == "stopped" and src.basis == "logged"


def test_the_tailers_are_asked_outside_the_lock_and_a_line_meanwhile_wins() -> None:
    """``caught_up`` looks at every tailer (serve), so the tick asks it without the pipeline's lock, and only when a
    source is quiet; a line fed while it is asked makes the source not quiet any more: it stays serving."""
    pipe, src, ss = _fed(BASE)
    asked = []

    def not_asked():
        asked.append(1)
        return {"s"}

    pipe.tick(ss.fed_at + Q - 1, caught_up=not_asked)  # nothing quiet: the tailers are not looked at
    assert not asked and src.life == "serving"

    def meanwhile():
        free = []  # the lock is re-entrant: another thread (a tailer) tries it
        t = threading.Thread(target=lambda: free.append(pipe.lock.acquire(blocking=False) and (pipe.lock.release() or True)))
        t.start()
        t.join()
        assert free == [True], "caught_up asked under the pipeline's lock"
        pipe.feed("s", decode(LAST_BATCH + 5))  # the tailer's line, read while the files were looked at
        return {"s"}

    pipe.tick(ss.fed_at + Q, caught_up=meanwhile)
    assert src.life == "serving" and src.basis == "logged"
