"""``--gpu-memory-utilization`` advice by release (issue 35 item 2): never a value that shrinks the pool. The value in
force is the logged one, else the release's default (exporter/capacity/defaults.py: 0.9, 0.92, and from 0.34 1.0 with the
extensible KV cache); where the log does not tell it, nothing is proposed; on 0.34 with a cap below 1.0 the lever is
to unset it."""

from __future__ import annotations

import pytest

from exporter.advice import flags, recommend
from exporter.state.pipeline import Pipeline

STATS = (
    "(APIServer pid=1) INFO 12-03 10:{m:02d}:{s:02d} [loggers.py:335] Engine 000: Avg prompt throughput: 900.0 tokens/s, Avg "
    "generation throughput: 400.0 tokens/s, Running: 30 reqs, Waiting: 12 reqs, GPU KV cache usage: 98.0%"
)
DISABLED = (
    "(EngineCore pid=142) WARNING 12-03 09:59:00 [abstract.py:175] Disabling the extensible KV cache: the CUDA driver does not "
    "support virtual memory management. The KV cache will be sized from profiling estimates instead of measured memory."
)


def boot(version: str | None, util: float | None, extra: tuple[str, ...] = ()) -> list[str]:
    lines = []
    if version:
        lines += [
            f"(APIServer pid=1) INFO 12-03 09:58:00 [startup.py:38] vLLM server version {version}, serving model Qwen/Qwen3-Next-80B-A3B-Instruct",
            f"(EngineCore pid=142) INFO 12-03 09:58:10 [core.py:153] Initializing a V1 LLM engine (v{version}) with config: "
            "model='Qwen/Qwen3-Next-80B-A3B-Instruct', max_seq_len=262144, tensor_parallel_size=1, kv_cache_dtype=auto, device_config=cuda",
        ]
    args = {"model": "Qwen/Qwen3-Next-80B-A3B-Instruct", **({"gpu_memory_utilization": util} if util is not None else {})}
    lines.append(f"(APIServer pid=1) INFO 12-03 09:58:01 [startup.py:96] non-default args: {args}")
    return lines + list(extra)


def advice(lines: list[str]) -> str | None:
    pipe = Pipeline("vllm")
    stats = [STATS.format(m=i // 6, s=i % 6 * 10) for i in range(36)]
    pipe.feed_lines("s", lines + stats)
    src = pipe.sources["s"]
    recs = [r for r in recommend.for_rules(src, src.servers["0"], ["kv_bound"]) if r.flag == "--gpu-memory-utilization"]
    assert len(recs) <= 1
    return recs[0].value if recs else None


@pytest.mark.parametrize(
    ("version", "util", "extra", "want"),
    [
        ("0.33.0", None, (), "0.95"),  # 0.92 unset: more of the GPU
        ("0.19.1", None, (), "0.93"),  # 0.9 unset
        ("0.33.0", 0.9, (), "0.93"),
        ("0.33.0", 0.95, (), None),  # the ceiling for a pool sized from an estimate
        ("0.34.0", None, (), None),  # unset is 1.0 with the extensible KV cache: nothing above it
        ("0.34.0", 0.85, (), flags.UNSET),  # a cap below 1.0: remove it
        ("0.34.0", None, (DISABLED,), "0.95"),  # without the extensible KV cache, unset is 0.92
        ("0.34.0", 0.9, (DISABLED,), "0.93"),
        (None, None, (), None),  # the release's default is not known: any number could shrink the pool
        (None, 0.9, (), "0.93"),  # a larger logged value grows the pool whatever the release
    ],
)
def test_the_value_proposed_grows_the_pool(version, util, extra, want):
    assert advice(boot(version, util, extra)) == want


def test_a_default_the_advice_rests_on_is_said():
    pipe = Pipeline("vllm")
    pipe.feed_lines("s", boot("0.33.0", None) + [STATS.format(m=i // 6, s=i % 6 * 10) for i in range(36)])
    src = pipe.sources["s"]
    [rec] = [r for r in recommend.for_rules(src, src.servers["0"], ["kv_bound"]) if r.flag == "--gpu-memory-utilization"]
    assert rec.assumes == ("gpu_memory_utilization 0.92: unset: vLLM 0.33.0's default 0.92",)
