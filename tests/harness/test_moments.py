"""The real-engine suite's consistent moments (tests/engine/harness.py ``Recorder``), on SGLang's batch lines: a read at
an unchanged line is kept only if the engine's gauges were set by that line. SGLang publishes its gauges without a
line when its scheduler finds no batch (``_maybe_log_idle_metrics``); the CI run of 2026-12-05 compared such a read
with the last decode line and failed. These run without an engine: the reads are texts as SGLang serves them."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "engine"))

import harness as h  # noqa: E402
import sglang_checks as sc  # noqa: E402
import sglang_harness as sh  # noqa: E402

DECODE = (
    "[2026-12-05 06:51:08] Decode batch, #running-req: 4, #full token: 122, full token usage: 0.03, mamba num: 5, "
    "mamba usage: 0.31, cpu graph: False, gen throughput (token/s): 837.01, #queue-req: 0"
)


def sglang_metrics(running: float, gen: float) -> str:
    return (
        "# TYPE sglang:num_running_reqs gauge\n"
        f'sglang:num_running_reqs{{engine_type="unified",model_name="m"}} {running}\n'
        "# TYPE sglang:gen_throughput gauge\n"
        f'sglang:gen_throughput{{engine_type="unified",model_name="m"}} {gen}\n'
    )


def recorder(sglang: str) -> h.Recorder:
    return h.Recorder(lambda: h.marker(sh.batch_lines(DECODE)), {"sglang": lambda: sglang, "exporter": lambda: ""}, sc.idle_published)


def test_a_read_set_by_the_line_is_kept():
    rec = recorder(sglang_metrics(4, 837.01))
    assert rec.take() is not None and not rec.rejected


def test_sglangs_idle_publish_is_not_a_moment_of_the_line():
    rec = recorder(sglang_metrics(0, 0))
    assert rec.take() is None and len(rec.moments) == 0
    assert "idle publish" in rec.rejected[0] and "not set by the line" in rec.summary()


def test_a_gauge_that_disagrees_otherwise_stays_a_moment():
    """Only the idle signature is excused: a running count that differs while the throughput is the line's is kept,
    so that the comparison with the line fails."""
    rec = recorder(sglang_metrics(3, 837.01))
    assert rec.take() is not None
