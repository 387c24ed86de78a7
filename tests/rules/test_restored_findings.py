"""Findings restored from a snapshot (``serve --positions`` after a restart) are decided again by
the next lines: a restored 1 clears when the log shows the condition gone, as it would have
without the restart (before, the fresh hysteresis waited to *fire* and kept a stale 1)."""

from __future__ import annotations

import json
from pathlib import Path

from exporter.app import new_pipeline
from exporter.reading.reader import read_lines
from exporter.state.snapshot import capture, restore

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "demo" / "sglang-mamba-bound.log"


def _healthy(minute: int, second: int) -> str:
    """A balanced decode line: mamba and KV usage low, nothing waiting."""
    return (
        f"[2026-08-14 09:{minute:02d}:{second:02d} TP0] Decode batch, #running-req: 8, #full token: 9000, full token usage: 0.30, "
        "mamba num: 20, mamba usage: 0.25, cuda graph: True, gen throughput (token/s): 400.00, #queue-req: 0"
    )


def _restarted(pipe) -> object:
    """A new pipeline holding what ``pipe`` knew of its source, through the snapshot's JSON."""
    snap = json.loads(json.dumps(capture(pipe, "demo")))
    fresh = new_pipeline()
    restore(fresh, "demo", snap)
    return fresh


def _finding(pipe, rule: str) -> int:
    return pipe.sources["demo"].servers["0"].findings[rule]


def test_a_restored_finding_clears_when_the_condition_is_gone() -> None:
    pipe = new_pipeline()
    pipe.feed_lines("demo", list(read_lines(str(DEMO))))
    pipe.finish()
    assert _finding(pipe, "mamba_bound") == 1
    fresh = _restarted(pipe)
    assert _finding(fresh, "mamba_bound") == 1  # kept until the next lines decide
    # 5 minutes of a balanced server, one line every 10 s (past clear_seconds and clear_min_samples)
    fresh.feed_lines("demo", [_healthy(23 + i // 6, i % 6 * 10) for i in range(30)])
    fresh.finish()
    assert _finding(fresh, "mamba_bound") == 0


def test_a_restored_finding_holds_while_the_condition_stays() -> None:
    pipe = new_pipeline()
    lines = list(read_lines(str(DEMO)))
    pipe.feed_lines("demo", lines)
    pipe.finish()
    fresh = _restarted(pipe)
    bound = [ln for ln in lines if "Decode batch" in ln][-1]  # the last (mamba-bound) line, again later
    fresh.feed_lines("demo", [bound.replace("09:22:06", f"09:{23 + i // 6:02d}:{i % 6 * 10:02d}") for i in range(30)])
    fresh.finish()
    assert _finding(fresh, "mamba_bound") == 1


def test_a_restored_mamba_exhausted_is_held_from_the_first_line_after_it() -> None:
    pipe = new_pipeline()
    pipe.feed_lines("demo", list(read_lines(str(DEMO))))
    pipe.finish()
    pipe.sources["demo"].servers["0"].findings["mamba_exhausted"] = 1  # as if the log had said so
    fresh = _restarted(pipe)
    fresh.feed_lines("demo", [_healthy(23, 0), _healthy(30, 0)])
    fresh.finish()
    assert _finding(fresh, "mamba_exhausted") == 1  # 7 minutes: within the 10-minute hold
    fresh.feed_lines("demo", [_healthy(34, 0)])
    fresh.finish()
    assert _finding(fresh, "mamba_exhausted") == 0
