"""serve's whole /metrics (pipeline + tailer self-metrics + process) is promtool-clean, parses as
OpenMetrics when asked for, and agrees with `replay` on the same log."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import test_serve_support as h
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "demo" / "sglang-mamba-bound.log"


def server_samples(text: str) -> dict:
    """Per-server samples (not the exporter's own, not wall-clock dependent)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("hybrid_cache_") and not s.name.startswith("hybrid_cache_exporter_") and "timestamp" not in s.name
    }


def test_serve_exposition_is_promtool_clean_and_matches_replay(tmp_path: Path) -> None:
    tool = shutil.which("promtool")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool missing in CI")
        pytest.skip("promtool not installed")
    srv = h.Serve(tmp_path, "--log", f"demo={DEMO}", "--from-beginning")
    try:
        srv.wait_up()
        total = sum(1 for _ in DEMO.open("rb"))
        h.wait_for(
            lambda: (
                sum(
                    h.value(srv.metrics(), "hybrid_cache_exporter_lines_total", outcome=o, source="demo")
                    for o in ("parsed", "ignored", "unrecognized")
                )
                == total
            ),
            what="every line read",
        )
        text = srv.metrics()
        check = subprocess.run([tool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
        assert check.returncode == 0 and not (check.stdout + check.stderr).strip(), check.stdout + check.stderr
        # promtool reads only the text format; OpenMetrics is checked by its own strict parser
        req = urllib.request.Request(
            f"http://127.0.0.1:{srv.port}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
            om = r.read().decode()
        assert om.endswith("# EOF\n")
        names = {f.name for f in openmetrics_families(om)}
        assert {"hybrid_cache_decode_batches", "hybrid_cache_server", "hybrid_cache_exporter_read_bytes"} <= names
    finally:
        srv.stop()
    replay = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", str(DEMO), "--source", "demo"], capture_output=True, timeout=120, cwd=ROOT
    )
    assert server_samples(text) == server_samples(replay.stdout.decode())
