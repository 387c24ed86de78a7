"""``replay --explain``: per line, what was recognised, what was ignored and why; then the
pipeline's own totals (docs/formats/README.md#checking-a-format). Run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LINES = [
    "[2026-03-02 08:01:40] INFO:     Started server process [2817]",
    "[2026-03-02 08:01:44][scheduler_metrics_mixin.py:212][INFO]: Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, "
    "full token usage: 0.01, mamba usage: 0.02, #running-req: 0, #queue-req: 0",
    '{"asctime": "2026-03-02 08:01:45,123", "levelname": "INFO", "name": "sglang.srt", "message": "Decode batch, #running-req: 1, '
    '#full token: 10, full token usage: 0.01, mamba num: 1, mamba usage: nan, cuda graph: True, gen throughput (token/s): 1.0, #queue-req: 0"}',
    "Traceback (most recent call last):",
    "[09:05:15 TP0] max_running_requests is capped to 9 by the mamba state cache (max_mamba_cache_size=47, 5 state slots per request).",
    "[2026-03-02 08:01:46 TP0] Mamba Cache is allocated. max_mamba_cache_size: 47,",
    " conv_state size: 0.03GB, ssm_state size: 1.10GB",
]


def test_explain_says_what_each_line_was_read_as(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(LINES) + "\n")
    r = subprocess.run([sys.executable, "-m", "exporter", "replay", "--explain", str(log)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("server.log:1  ignored") and "[sglang]" in out[0] and "uvicorn" in out[0]
    assert "parsed" in out[1] and "[preamble]" in out[1] and "new_tokens=512" in out[1] and "2026-03-02T08:01:44.000Z" in out[1]
    assert "unrecognized" in out[2] and "[json[message]]" in out[2] and "ratio out of range: mamba_usage" in out[2]
    assert "no header, and no message SGLang or vLLM prints" in out[3]
    assert "MambaCap(cap=9, slots=47, slots_per_request=5)" in out[4] and "2026-03-02T09:05:15.000Z" in out[4] and "tp=0" in out[4]
    # the wrapped startup message: its pieces one by one, the join in the totals
    assert "unrecognized" in out[5] and "ignored" in out[6]
    assert out[7] == "-- source server: 4 parsed, 2 ignored, 1 unrecognized; engine sglang; times read in zone local"
    assert out[8].startswith("-- headers read by: ")
    assert out[9].startswith("-- envelope: ") and "changes" in out[9]  # the lines come in several: the stage says so


def test_explain_reads_stdin_and_names_other_engines_lines(tmp_path: Path) -> None:
    lines = "2026-03-02 08:01:41,222 - lmdeploy - INFO - cache_engine.py:51 - build CacheEngine with config:CacheConfig(max_batches=256)\n"
    r = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", "--explain", "-"], input=lines, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert "stdin:1  ignored" in r.stdout and "a header, but no message SGLang or vLLM prints after it" in r.stdout
    assert "engine not known (no SGLang or vLLM message)" in r.stdout
