"""The real-engine suite's fixtures (docs/engine-suite.md): the engine, the tiny models, one work directory.

The suite is not part of ``make test`` (pyproject's ``norecursedirs`` leaves ``tests/engine`` out of a bare
``pytest``); ``make engine-test`` runs it, and ``.ci/run`` runs that after ``make test``. It never skips:
an engine that cannot be installed is an error with the installer's reason.

Every scenario waits for what it asserts on (``harness.drive_until``); the session ends with one line per wait
(scenario, condition, seconds, what was seen) in the terminal summary and in ``<basetemp>/waits.txt``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import harness as h  # noqa: E402

# The suite's logs are written now, by a real engine: their year comes from the file, as in production, not from
# the year the rest of the tests pin for the checked-in fixtures (tests/conftest.py, $HCE_LOG_YEAR).
os.environ.pop("HCE_LOG_YEAR", None)
from parsers import clock  # noqa: E402

clock.set_year(None)


@pytest.fixture(scope="module", autouse=True)
def scenario_name(request) -> str:
    """The scenario the waits of this module belong to: its SOURCE, or the module's name."""
    h.SCENARIO = getattr(request.module, "SOURCE", request.module.__name__)
    return h.SCENARIO


def machine() -> str:
    """The CPU the suite ran on, with the features that change the engines' paths (docs/engine-suite.md): AMX for
    SGLang's CPU backend, AVX512-BF16 for vLLM's CPU attention and SSM dtype. In the header and the summary, so that
    CI's output says which kind of machine a run was."""
    model, flags = "?", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            if key.strip() == "model name" and model == "?":
                model = val.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(val.split())
    except OSError:
        pass
    feats = ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in ("amx_tile", "avx512_bf16", "avx512f"))
    return f"{os.cpu_count()} CPUs, {model}; {feats}"


def pytest_report_header(config) -> str:
    return f"machine: {machine()}"


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """What each scenario waited for and how long, in CI's log and in ``<basetemp>/waits.txt``."""
    if not h.WAITS:
        return
    lines = [f"machine: {machine()}", *(w.line() for w in h.WAITS)]
    terminalreporter.section(f"engine waits ({h.PACE} pace{', engine on CPUs ' + h.ENGINE_CPUS if h.ENGINE_CPUS else ''})")
    for line in lines:
        terminalreporter.write_line(line)
    base = config.option.basetemp or os.environ.get("ENGINE_TMP")
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
        (Path(base) / "waits.txt").write_text("\n".join(lines) + "\n")
        terminalreporter.write_line(f"(also in {Path(base) / 'waits.txt'})")


@pytest.fixture(scope="session")
def engine_py() -> str:
    """The engine's interpreter (installed on first use into the cache outside the clone)."""
    return h.engine_python()


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("engine")


@pytest.fixture(scope="session")
def qwen(engine_py, workdir) -> Path:
    """The suite's main model: a tiny Qwen3-Next (3 Gated DeltaNet layers + 1 full-attention layer)."""
    return h.build_model("qwen3_next", workdir / "models" / "tiny-qwen3-next")


@pytest.fixture(scope="session")
def sglang_lfm2(workdir) -> Path:
    """The SGLang half's LFM2: 3 short-convolution layers + 1 full-attention layer, written by SGLang's transformers."""
    import sglang_harness as sh

    return sh.build_model("lfm2", workdir / "models" / "tiny-lfm2-sglang")
