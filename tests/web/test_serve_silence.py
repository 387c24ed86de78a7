"""``serve``'s wall clock (docs/rules.md#silence): a serving SGLang source whose log, read to its end, wrote nothing for
``quiet_seconds`` goes idle as of its last batch line, basis ``wall_clock``, on /metrics and the status page alike;
the next line that shows the same gap in the log's own time makes it ``derived``, as ``replay`` of those lines
says. The waits are bounded waits for a condition, never a sleep."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import test_serve_support as h

ROOT = Path(__file__).resolve().parents[2]
MAMBA = ROOT / "fixtures" / "scenarios" / "sglang-mamba-bound.log"
PROBE = '[2026-08-14 08:30:00] INFO:     10.0.0.1:40100 - "GET /metrics HTTP/1.1" 200 OK\n'  # 227 s after the last batch line


def _state(text: str) -> tuple[str, ...]:
    """The state and basis /metrics says (the series at 1)."""
    return tuple(
        m
        for name, label in (("hybrid_cache_server_state", "state"), ("hybrid_cache_server_state_basis", "basis"))
        for m in re.findall(rf'^{name}{{[^}}]*\b{label}="(\w+)"[^}}]*}} 1\.0$', text, re.M)
    )


def _until(srv: h.Serve, want: tuple[str, ...], timeout: float, what: str) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = srv.metrics()
        if _state(text) == want:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; seen {_state(text)}")
        time.sleep(0.2)


def test_serve_tells_an_idle_sglang_by_the_wall_clock_then_by_the_log(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    log.write_text(MAMBA.read_text())
    rules = tmp_path / "rules.yaml"
    rules.write_text("quiet_seconds: 5\n")
    srv = h.Serve(tmp_path, "--log", f"sglang={log}", "--from-beginning", "--rules-config", str(rules))
    try:
        srv.wait_up()
        text = _until(srv, ("idle", "wall_clock"), 60, "the source idle by the wall clock")
        assert h.value(text, "hybrid_cache_finding", rule="mamba_bound") == 0
        assert h.value(text, "hybrid_cache_finding", rule="mamba_capped") == 1
        last_batch = h.value(text, "hybrid_cache_server_state_since_timestamp_seconds")
        code, page = srv.get("/")
        assert code == 200 and "told by the wall clock" in page, page[:2000]
        with log.open("a") as f:
            f.write(PROBE)
        text = _until(srv, ("idle", "derived"), 30, "the basis derived after the probe")
        assert h.value(text, "hybrid_cache_server_state_since_timestamp_seconds") == last_batch
    finally:
        srv.stop()
    (tmp_path / "replayed.log").write_text(log.read_text())
    out = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", "--rules-config", str(rules), str(tmp_path / "replayed.log")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    ).stdout
    assert _state(out) == ("idle", "derived")
    assert h.value(out, "hybrid_cache_server_state_since_timestamp_seconds") == last_batch
