"""hybrid_cache_chunked_prefill_size_tokens comes from server_args / ServerArgs(...) too (issue 20):
a server that dies before its scheduler summary still shows it; the summary's (effective) value
wins when it comes; a disabled (-1) or unresolved (None) value shows nothing."""

from __future__ import annotations

import pytest

from exporter.app import exposition, new_pipeline

ARGS = [
    "[2026-09-01 11:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3.5-27B', tp_size=1, chunked_prefill_size={v}, mamba_ssm_dtype='float32')",
    "[2026-09-01 11:00:00] server_args={{'model_path': 'Qwen/Qwen3.5-27B', 'tp_size': 1, 'chunked_prefill_size': {v}, 'mamba_ssm_dtype': 'float32'}}",
]
SUMMARY = (
    "[2026-09-01 11:00:30 TP0] max_total_num_tokens=211360, chunked_prefill_size=4096, max_prefill_tokens=16384, "
    "max_running_requests=9, context_len=262144, available_gpu_mem=9.45 GB"
)
FAIL = "[2026-09-01 11:00:20 TP0] ValueError: Not enough space for mamba cache, try to increase --mamba-full-memory-ratio."


def chunked(lines: list[str]) -> float | None:
    pipe = new_pipeline(None)
    pipe.feed_lines("s", lines)
    pipe.finish()
    for ln in exposition(pipe).decode().splitlines():
        if ln.startswith("hybrid_cache_chunked_prefill_size_tokens{"):
            return float(ln.rsplit(" ", 1)[1])
    return None


@pytest.mark.parametrize("form", ARGS, ids=["ServerArgs(...)", "dict"])
def test_a_server_that_dies_before_its_summary_shows_it(form: str) -> None:
    assert chunked([form.format(v=8192), FAIL]) == 8192
    assert chunked([form.format(v=8192), FAIL, SUMMARY]) == 4096  # the effective value wins
    assert chunked([form.format(v=-1), FAIL]) is None
    assert chunked([form.format(v=None), FAIL]) is None
