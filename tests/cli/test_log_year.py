"""The year of vLLM's year-less times (docs/serve.md#the-vllm-year): from the file by default, the one
``--log.year`` names otherwise, on every command that reads logs. The suite pins it (tests/conftest.py sets
``$HCE_LOG_YEAR``, ``--log.year``'s default, as it pins ``TZ``), so the goldens pass in any year: proven here
with the fixtures' modification times in 2027 and in 2031 (``os.utime`` on copies), and with the clock itself
in 2031 (Debian's ``faketime``), each fixture replayed by the command line's entry under that environment (tests/replay_batch.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import LOG_YEAR

from parsers import clock

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
sys.path.insert(0, str(ROOT / "tests" / "collector"))
from replay_batch import replay_many  # noqa: E402
from test_golden import fixtures, golden_path  # noqa: E402

# the vLLM fixtures: the ones a file's time or the clock could move; of them, the ones with a line whose only
# date is the year-less header (no JSON asctime, no collector stamp before it) do move under the file rule
YEARLESS = [p for p in fixtures() if 'engine="vllm"' in golden_path(p).read_text()]
_BARE = re.compile(r"^(?:(?!\d{4}-\d\d-\d\d).)*?\b(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d", re.M)
BARE = {f"{p.parent.name}/{p.name}" for p in YEARLESS if _BARE.search(p.read_text(errors="replace"))}
FAKETIME = shutil.which("faketime")


def _copies(tmp: Path, when: float) -> list[tuple[Path, Path]]:
    """Each year-less fixture copied (same name, so the same source label), its mtime set to ``when``."""
    out = []
    for log in YEARLESS:
        dst = tmp / log.parent.name / log.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, dst)
        os.utime(dst, (when, when))
        out.append((log, dst))
    return out


def _replay(path: Path, *args: str, pin: bool = True, prefix: tuple[str, ...] = ()) -> str:
    env = dict(os.environ)
    if not pin:
        env.pop(clock.YEAR_ENV, None)
    r = subprocess.run(
        [*prefix, sys.executable, "-m", "exporter", "replay", *args, str(path)], cwd=ROOT, env=env, capture_output=True, timeout=120
    )
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode()


def _differ(pairs: list[tuple[Path, Path]], *args: str, pin: bool = True, prefix: tuple[str, ...] = ()) -> list[str]:
    """The fixtures whose copy replays to something else than their golden (every copy in one of two
    processes, tests/replay_batch.py, under the same environment and prefix as a process per copy)."""
    env = dict(os.environ)
    if not pin:
        env.pop(clock.YEAR_ENV, None)
    results = replay_many([["replay", *args, str(copy)] for _, copy in pairs], env=env, prefix=prefix)
    assert [r["stderr"] for r in results if r["rc"] != 0] == []
    return [
        f"{log.parent.name}/{log.name}" for (log, _), r in zip(pairs, results, strict=True) if r["stdout"] != golden_path(log).read_text()
    ]


def test_the_suite_pins_the_year():
    assert YEARLESS, "no vLLM fixture found"
    assert os.environ[clock.YEAR_ENV] == str(LOG_YEAR) and clock.fixed_year() == LOG_YEAR


@pytest.mark.parametrize("year", [2027, 2031])
def test_the_goldens_pass_whatever_the_files_time(tmp_path, year):
    pairs = _copies(tmp_path, time.mktime((year, 3, 1, 12, 0, 0, 0, 0, -1)))
    assert _differ(pairs) == []
    # and the same files read by the file rule are dated in that year: what the pin protects the goldens from
    if year == 2031:
        assert set(_differ(pairs, "--log.year", "file")) == BARE and len(BARE) > 20


def test_an_explicit_year_beats_the_pin_and_the_file(tmp_path):
    (log, copy), *_ = _copies(tmp_path, time.mktime((2031, 3, 1, 12, 0, 0, 0, 0, -1)))
    golden = golden_path(log).read_text()
    out = _replay(copy, "--log.year", str(LOG_YEAR + 1), pin=False)
    assert out != golden
    shift = [(a, b) for a, b in zip(golden.splitlines(), out.splitlines(), strict=True) if a != b]
    assert shift and all("_timestamp_seconds" in a for a, _ in shift)  # nothing but the log times moved
    assert _replay(copy, "--log.year", str(LOG_YEAR), pin=False) == golden


def test_a_bad_year_is_refused_by_every_command():
    for cmd in (
        ["replay", "fixtures/vllm/v0.33.0.log"],
        ["report", "fixtures/vllm/v0.33.0.log"],
        ["serve", "--log", "x.log"],
        ["plan", "--from-log", "x.log"],
    ):
        r = subprocess.run(
            [sys.executable, "-m", "exporter", *cmd, "--log.year", "next"], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 2 and "--log.year: not a year: 'next'" in r.stderr, (cmd, r.stderr)
    env = dict(os.environ, **{clock.YEAR_ENV: "20x6"})
    r = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", "fixtures/vllm/v0.33.0.log"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "not a year: '20x6'" in r.stderr


def test_the_goldens_pass_under_faketime_in_2031(tmp_path):
    """The clock itself in 2031 (libfaketime for the command and what it starts), the files written then too."""
    if FAKETIME is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("faketime is required in CI (apt-get install faketime / make tools)")
        pytest.skip("faketime not installed (make tools installs it)")
    fake = (FAKETIME, "-f", "@2031-06-01 12:00:00")
    probe = subprocess.run(
        [*fake, sys.executable, "-c", "import time; print(time.localtime().tm_year)"], capture_output=True, text=True, timeout=60
    )
    assert probe.stdout.strip() == "2031", probe.stderr
    pairs = _copies(tmp_path, time.mktime((2031, 6, 1, 11, 0, 0, 0, 0, -1)))
    assert _differ(pairs, prefix=fake) == []
