"""`replay` through the real command: promtool-clean expositions, bad input, `python -m exporter`. The
expositions promtool checks come from the command line's entry called once per fixture in two processes
(tests/replay_batch.py, as the goldens do); the tests below it run the command one process each."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import ci_support
import pytest
from prometheus_client.parser import text_string_to_metric_families
from replay_batch import replay_many

ROOT = Path(__file__).resolve().parents[2]
EXE = [sys.executable, "-m", "exporter"]
# every engine log (fixtures/other-engines/ are not: replay says so and exits 1, tests/parsers/test_other_engines.py)
FIXTURES = sorted(p for p in glob.glob(str(ROOT / "fixtures" / "**" / "*.log"), recursive=True) if "other-engines" not in p)
DECODE = (
    "[2026-08-14 08:17:30 TP0] Decode batch, #running-req: 4, #full token: 1051, full token usage: 0.20, mamba num: 16, "
    "mamba usage: 0.20, cuda graph: True, gen throughput (token/s): 453.12, #queue-req: 0\n"
)


def replay(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(EXE + ["replay", *args], cwd=ROOT, input=stdin, capture_output=True, timeout=120)


def values(text: str, name: str) -> list[float]:
    return [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def promtool() -> str | None:
    p = shutil.which("promtool")
    if p is None and os.environ.get("CI"):
        pytest.fail("promtool missing in CI: `make test` installs Debian's prometheus package")
    return p


@pytest.fixture(scope="module")
def replayed() -> dict[str, dict]:
    """``replay <fixture>`` of every fixture: its exit code, stdout and stderr."""
    return dict(zip(FIXTURES, replay_many([["replay", p] for p in FIXTURES]), strict=True))


@pytest.mark.parametrize("path", FIXTURES, ids=[os.path.relpath(p, ROOT) for p in FIXTURES])
def test_every_fixture_exposition_passes_promtool(path: str, replayed: dict[str, dict]) -> None:
    tool = promtool()
    ci_support.need(tool is not None, "promtool not installed")
    r = replayed[path]
    assert r["rc"] == 0, r["stderr"]
    assert values(r["stdout"], "hybrid_cache_exporter_lines_total")
    check = subprocess.run([tool, "check", "metrics"], input=r["stdout"].encode(), capture_output=True, timeout=60)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), (check.stdout + check.stderr).decode()


def test_bad_inputs_are_reported_and_the_lines_around_them_survive(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.log"
    garbage.write_bytes(DECODE.encode() + os.urandom(50_000).replace(b"\n", b"") + b"\n" + b"x" * (10 << 20) + b"\n" + DECODE.encode())
    r = replay(str(garbage), str(tmp_path / "missing.log"), str(tmp_path), "--source", "s")
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "missing.log: cannot read" in err and "is a directory" in err
    assert "Traceback" not in err
    out = r.stdout.decode()
    assert values(out, "hybrid_cache_decode_batches_total") == [2.0]


def test_stdin_and_python_dash_m() -> None:
    r = replay("-", "--source", "pipe", stdin=(DECODE * 3).encode())
    assert r.returncode == 0
    assert values(r.stdout.decode(), "hybrid_cache_decode_batches_total") == [3.0]
    assert 'source="pipe"' in r.stdout.decode()


def test_engine_can_be_forced(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(DECODE)
    r = replay(str(log), "--engine", "vllm")
    assert values(r.stdout.decode(), "hybrid_cache_decode_batches_total") == []
    r = replay(str(log), "--engine", "sglang")
    assert values(r.stdout.decode(), "hybrid_cache_decode_batches_total") == [1.0]


def test_bare_messages_without_headers_still_find_their_engine(tmp_path: Path) -> None:
    sg = tmp_path / "sg.log"
    sg.write_text(
        "Mamba Cache is allocated. max_mamba_cache_size: 80, conv_state size: 0.10GB, ssm_state size: 4.38GB \n"
        "Traceback (most recent call last):\n" + DECODE.split("] ", 1)[1]
    )
    out = replay(str(sg)).stdout.decode()
    assert values(out, "hybrid_cache_mamba_capacity_slots") == [80.0]
    assert values(out, "hybrid_cache_decode_batches_total") == [1.0]
    vl = tmp_path / "vl.log"
    vl.write_text("GPU KV cache size: 973,760 tokens\nMaximum concurrency for 262,144 tokens per request: 14.77x\n")
    out = replay(str(vl)).stdout.decode()
    assert values(out, "hybrid_cache_kv_capacity_tokens") == [973760.0]
    assert values(out, "hybrid_cache_max_concurrency") == [14.77]
    assert 'engine="vllm"' in out
