"""Shared helpers of the test layers.

The tests live one directory per layer of the code: parsers/, sources/ (reading, tailing,
rotation), pipeline/ (sampler, scanner, flow), state/, rules/, capacity/, collector/ (contract,
goldens), web/, cli/, dashboards/, e2e/ (real Prometheus, packaging, deploy, bench), design/
(import layers, docs). What several layers use lives in a helper module of this directory
(``test_serve_support``: run ``serve`` as a subprocess and scrape it; ``rotation_support``: writers
and real logrotate), which this file puts on ``sys.path``; the golden expositions stay in
``tests/golden/`` and the engines' oracle in ``tests/oracle/``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

# The zone zone-less log times are read in is the exporter's local zone by default
# (docs/formats/README.md#time); the goldens and every timestamp a test expects are UTC's. Pin it
# for this process and every command it starts, so a developer in any zone gets the same results
# (tests/cli/test_timezone.py proves --log.timezone itself, under other zones).
os.environ["TZ"] = "UTC"
time.tzset()
# The year of vLLM's year-less times comes from the file's modification time by default
# (docs/serve.md#the-vllm-year), which a fresh clone sets to the clone's time: the goldens would
# change with the calendar. Pin it the same way, for this process and every command it starts
# (``--log.year``'s default is $HCE_LOG_YEAR); tests/cli/test_log_year.py proves the goldens under
# other file times and clocks, and the tests of the file rule itself drop the pin.
LOG_YEAR = 2026
os.environ["HCE_LOG_YEAR"] = str(LOG_YEAR)
from parsers import clock  # noqa: E402 - after the pins, which it reads at call time only

clock.set_year(LOG_YEAR)

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = ROOT / "fixtures"

if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


# The slowest modules of `make test` (measured, docs/architecture.md "Test run time"), handed out
# first: xdist's loadscope gives whole modules to its workers in collection order (with
# --no-loadscope-reorder, as the Makefile runs it; by default it puts the modules with the most tests
# first, and these have few), so a long module collected last would run alone at the end. Only the
# order changes; any module may join or leave.
HEAVY_FIRST = (
    "e2e/test_packaging.py",
    "sources/test_rotation_many_files.py",
    "e2e/test_prometheus_integration.py",
    "collector/test_golden.py",
    "e2e/test_bench_smoke.py",
    "e2e/test_lifecycle_alerts.py",
    "web/test_browser.py",
    "sources/test_serve_restart.py",
    "cli/test_replay_cli.py",
    "sources/test_held_faults.py",
    "sources/test_reading_serve.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}

    def key(item: pytest.Item) -> int:
        rel = Path(str(item.path)).resolve().relative_to(TESTS).as_posix() if str(item.path).startswith(str(TESTS)) else ""
        return rank.get(rel, len(rank))

    items.sort(key=key)  # stable: the order inside a module and among the others is kept


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@ci_support.needs(ok, why)``: skip with the reason on a developer's machine, fail in CI."""
    import ci_support  # on sys.path only once this file has run

    for mark in item.iter_markers("needs"):
        ci_support.need(*mark.args)


@pytest.fixture(scope="session")
def root() -> Path:
    """The repository's top directory."""
    return ROOT


@pytest.fixture
def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (servers in tests bind there only)."""
    import test_serve_support as h  # on sys.path only once this file has run

    return h.free_port()


@pytest.fixture
def serve(tmp_path):
    """``serve(*args, up=True, **kw)`` starts ``hybrid-cache-exporter serve`` (``test_serve_support.Serve``) in
    ``tmp_path`` and waits until it answers; every server started is killed at the end of the test."""
    import test_serve_support as h  # on sys.path only once this file has run

    started: list[h.Serve] = []

    def start(*args: str, up: bool = True, **kw) -> h.Serve:
        s = h.Serve(tmp_path, *args, **kw)
        started.append(s)
        if up:  # up=False: a test that watches the start itself (a missing file, stdin)
            s.wait_up()
        return s

    yield start
    for s in started:
        s.kill()


@pytest.fixture
def writers():
    """``writers(path, kind)`` starts a steady writer (``rotation_support.Writer``); every one
    started is killed at the end of the test."""
    import rotation_support as rs

    made: list[rs.Writer] = []

    def make(*a, **k) -> rs.Writer:
        w = rs.Writer(*a, **k)
        made.append(w)
        return w

    yield make
    for w in made:
        w.kill()
