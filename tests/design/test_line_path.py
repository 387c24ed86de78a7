"""The path of one line through the code (docs/architecture.md, "One replayed line, stage by stage"),
measured by ``bench/calls.py`` on the line that turns ``mamba_bound`` on: it walks the stages one way
(state, then diagnosis; the ground apart) and stays within its budget of module switches, so a change
that sends the line back to a stage it left, or bounces it between modules, fails here and shows in the
figures of the doc.

The budget is today's figure (10 module switches up to the recommendations; 21 before the diagnosis'
memory left the state, the samples' headers were read once, the usage and lengths became one call and a
window's transition kept its own evidence);
raise it only with a reason written beside it.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import calls  # noqa: E402

PATH_SWITCHES_MAX = 10


def test_the_measure_counts_a_return():
    """The walk of a made-up route: the ground apart, entering a stage left for a later one is a return."""
    stages, returns = calls.walk(
        ["exporter.state.sampler", "parsers.clock", "exporter.state.store", "exporter.diagnosis.rules", "exporter.capacity.model"]
    )
    assert stages == ["exporter.state", "exporter.diagnosis"] and returns == 0
    stages, returns = calls.walk(["exporter.state.pipeline", "exporter.diagnosis.rules", "exporter.state.facts", "exporter.advice.flags"])
    assert stages == ["exporter.state", "exporter.diagnosis", "exporter.state", "exporter.advice"] and returns == 1


def test_a_firing_line_walks_one_way_within_its_budget():
    r = calls.measure(str(ROOT / "fixtures/scenarios/sglang-mamba-bound.log"), "mamba_bound")
    assert r["path_stages"] == ["exporter.state", "exporter.diagnosis"], r["path_stages"]
    assert r["path_returns"] == 0
    assert r["path_switches"] <= PATH_SWITCHES_MAX, (r["path_switches"], r["path_modules"])
    # the diagnosis' memory is the diagnosis' own: the line's evidence goes nowhere back into the state
    assert not any(m.startswith("exporter.state") for m in r["path_modules"][r["path_modules"].index("exporter.diagnosis.rules") :])
