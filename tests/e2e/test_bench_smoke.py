"""CI runs a small smoke version of the benchmark: both tools on the same generated log, and the
exporter's counters must equal mtail's exactly (bench/run.py exits non-zero otherwise). No timing
is asserted here: ratios are reported by `make bench`, never tested."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_smoke_counts_match_mtail(tmp_path: Path) -> None:
    if shutil.which("mtail") is None:
        if os.environ.get("CI"):
            pytest.fail("mtail missing in CI: `make test` installs Debian's mtail package")
        pytest.skip("mtail not installed")
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "run.py"),
        "--quick",
        "--out",
        str(tmp_path / "out"),
        "--data",
        str(tmp_path / "data"),
        "--exporter",
        str(Path(sys.executable).parent / "hybrid-cache-exporter"),
        "--set",
        "lines=20000",
        "--reps",
        "1",
        "--skip",
        "scaling,soak",
    ]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=600)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, out[-4000:]
    results = (tmp_path / "out" / "results.md").read_text()
    assert "decode batches" in results and "| no |" not in results, results
