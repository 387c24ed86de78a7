"""Bounded cardinality: dp_rank label values come from log text, so each source keeps at most
--max-dp-ranks (default 256) of them; lines of further ranks are counted in
hybrid_cache_exporter_dp_rank_limit_lines_total and not stored. A scrape copies under the
pipeline lock and renders outside it."""

from __future__ import annotations

import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import feed_support
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import exposition, new_pipeline
from exporter.exposition.collector import HybridCacheCollector
from exporter.state.store import DEFAULT_MAX_DP_RANKS

ROOT = Path(__file__).resolve().parents[2]
DECODE = (
    "[2026-08-14 08:17:{s:02d} DP{dp} TP0] Decode batch, #running-req: 4, #full token: 1051, full token usage: 0.20, "
    "mamba num: 16, mamba usage: 0.20, cuda graph: True, gen throughput (token/s): 453.12, #queue-req: 0"
)
PREFILL = (
    "[2026-08-14 08:17:{s:02d} DP{dp} TP0] Prefill batch, #new-seq: 1, #new-token: 100, #cached-token: 10, "
    "full token usage: 0.20, mamba usage: 0.20, #running-req: 3, #queue-req: 0"
)


def dp_lines(n: int, ranks: int) -> list[str]:
    return [(PREFILL if i % 3 == 0 else DECODE).format(s=i % 60, dp=i % ranks) for i in range(n)]


def samples(text: bytes) -> list:
    return [s for f in text_string_to_metric_families(text.decode()) for s in f.samples]


@pytest.mark.parametrize("path", feed_support.PATHS)
def test_thirty_thousand_dp_tags_keep_256_ranks_and_count_the_rest(path: str) -> None:
    n = 30_000
    lines = dp_lines(n, n)  # every line a new DP<n> tag
    pipe = new_pipeline("sglang")
    tracemalloc.start()
    feed_support.feed(pipe, path, lines)
    pipe.finish()
    text = exposition(pipe)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    src = pipe.sources["s"]
    assert len(src.servers) == DEFAULT_MAX_DP_RANKS
    assert src.dp_dropped == n - DEFAULT_MAX_DP_RANKS
    assert src.lines["parsed"] == n  # well-formed lines: parsed, then dropped for the bound
    got = samples(text)
    assert {s.labels["dp_rank"] for s in got if "dp_rank" in s.labels} == {str(i) for i in range(DEFAULT_MAX_DP_RANKS)}
    assert [s.value for s in got if s.name == "hybrid_cache_exporter_dp_rank_limit_lines_total"] == [n - DEFAULT_MAX_DP_RANKS]
    assert len(got) < 256 * 40
    assert peak < 64 << 20, peak  # the lines themselves are ~6 MB; 420k series took 793 MiB


def test_known_ranks_keep_counting_after_the_limit() -> None:
    pipe = new_pipeline("sglang", max_dp_ranks=4)
    lines = dp_lines(3000, 8)
    pipe.feed_lines("s", lines)
    pipe.finish()
    src = pipe.sources["s"]
    assert sorted(src.servers) == ["0", "1", "2", "3"]
    assert src.dp_dropped == 1500  # ranks 4..7: half of the lines
    decode = {s.labels["dp_rank"]: s.value for s in samples(exposition(pipe)) if s.name == "hybrid_cache_decode_batches_total"}
    want = {str(r): sum(1 for i in range(3000) if i % 8 == r and i % 3) for r in range(4)}
    assert decode == want


def test_no_limit_no_family() -> None:
    pipe = new_pipeline("sglang")
    pipe.feed_lines("s", dp_lines(100, 2))
    pipe.finish()
    assert not [s for s in samples(exposition(pipe)) if s.name.startswith("hybrid_cache_exporter_dp_rank_limit")]


def test_vllm_engine_indices_are_bounded_too() -> None:
    pipe = new_pipeline("vllm", max_dp_ranks=2)
    for i in range(10):
        pipe.feed(
            "s",
            f"(EngineCore_DP{i} pid={100 + i}) INFO 08-14 08:17:3{i} [loggers.py:1] Engine 00{i}: Avg prompt throughput: 1.0 tokens/s, "
            "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%",
        )
    pipe.finish()
    src = pipe.sources["s"]
    assert len(src.servers) == 2 and src.dp_dropped == 8


def test_the_flag_reaches_replay(tmp_path) -> None:
    log = tmp_path / "dp.log"
    log.write_text("\n".join(dp_lines(600, 20)) + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", "--max-dp-ranks", "3", str(log)], cwd=ROOT, capture_output=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    got = samples(r.stdout)
    assert {s.labels["dp_rank"] for s in got if s.name == "hybrid_cache_decode_batches_total"} == {"0", "1", "2"}
    assert [s.value for s in got if s.name == "hybrid_cache_exporter_dp_rank_limit_lines_total"] == [600 - 3 * 30]
    bad = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", "--max-dp-ranks", "0", str(log)], cwd=ROOT, capture_output=True, timeout=60
    )
    assert bad.returncode == 2 and b"--max-dp-ranks" in bad.stderr


def test_a_scrape_renders_outside_the_pipeline_lock() -> None:
    """While the families are built, another thread (a tailer) can take the lock."""
    pipe = new_pipeline("sglang")
    pipe.feed_lines("s", dp_lines(2000, 50))
    col = HybridCacheCollector(pipe)
    free: list[bool] = []
    render = col._collect

    def probing(sources):
        def probe() -> None:
            got = pipe.lock.acquire(blocking=False)
            free.append(got)
            if got:
                pipe.lock.release()

        t = threading.Thread(target=probe)
        t.start()
        t.join()
        yield from render(sources)

    col._collect = probing  # type: ignore[method-assign]
    fams = list(col.collect())
    assert free == [True]
    assert any(f.name == "hybrid_cache_decode_batches" for f in fams)
