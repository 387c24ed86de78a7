"""The hot path (template matching, sampling, whole-chunk passes) gives the same state as the
line-by-line path, whatever the chunking: same counters, gauges, line outcomes and findings."""

from __future__ import annotations

import glob
import random
from pathlib import Path

import feed_support
import pytest
from pipeline_support import feed_in_chunks, generated_log

import exporter.state.pipeline as pipeline_mod
from exporter.app import exposition, new_pipeline
from exporter.diagnosis.rules import Rules
from exporter.reading.reader import read_lines
from exporter.state import scan as scan_mod

ROOT = Path(__file__).resolve().parents[2]
LOGS = sorted(glob.glob(str(ROOT / "fixtures" / "scenarios" / "*.log"))) + [str(ROOT / "fixtures" / "demo" / "sglang-mamba-bound.log")]


@pytest.fixture(autouse=True, params=feed_support.SCANNERS)
def scan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Every test here runs with the C scanner and with the pure-Python one."""
    feed_support.use_scanner(monkeypatch, request.param)
    return pipeline_mod.scan


def bench_log(tmp_path: Path, n: int = 6000) -> str:
    out = tmp_path / "bench.log"
    generated_log(out, n)
    return str(out)


def by_line(lines: list[str]) -> bytes:
    pipe = new_pipeline(None)
    for line in lines:
        pipe.feed("s", line)
    return exposition(pipe)


def by_chunks(lines: list[str], seed: int) -> bytes:
    pipe = new_pipeline(None)
    feed_in_chunks(pipe, random.Random(seed), lines)
    return exposition(pipe)


@pytest.mark.parametrize("path", LOGS, ids=[Path(p).name for p in LOGS])
def test_scenarios_same_state_by_line_and_by_chunks(path: str) -> None:
    lines = list(read_lines(path))
    want = by_line(lines)
    for seed in range(3):
        assert by_chunks(lines, seed) == want


def test_busy_log_same_state_and_chunk_path_is_taken(tmp_path: Path, scan) -> None:
    lines = list(read_lines(bench_log(tmp_path)))
    # a restart and a malformed batch line in the middle: both paths must handle them alike
    mid = len(lines) // 2
    lines[mid:mid] = [
        lines[mid].split("]", 1)[0] + "] Decode batch, #running-req: banana",
        "[2026-08-14 09:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 8192, "
        "#mamba_num_gained: 6, #new_token_ratio: 0.1043 -> 0.4312",
    ]
    want = by_line(lines)
    assert b'outcome="unrecognized",source="s"} 1.0' in want
    for seed in range(3):
        assert by_chunks(lines, seed) == want
    pipe = new_pipeline(None)
    pipe.feed_lines("s", lines[:200])  # learn the shapes (startup block goes line by line)
    src = pipe.sources["s"]
    before = src.lines["parsed"]
    steady = [ln for ln in lines[200:1200] if "batch" in ln or "INFO:" in ln]
    ss = pipe.sampler.sampling["s"]
    r = scan(steady, 0, ss.shapes.scan_spec())
    assert r[0] == len(steady)  # the scanner takes the whole steady state in one run
    assert pipe.sampler.run(src, ss, steady.__getitem__, 0, scan_mod.result(r))
    assert src.lines["parsed"] - before == sum("batch" in ln for ln in steady)


def test_batch_lines_mixed_with_other_lines_same_state(tmp_path: Path) -> None:
    """Runs cut short by other lines send the scanner into back-off (the next lines take the line
    path): the state must not depend on where that happens."""
    lines = list(read_lines(bench_log(tmp_path, 3000)))
    mixed: list[str] = []
    rnd = random.Random(4)
    for i, line in enumerate(lines):
        mixed.append(line)
        if i > 50 and rnd.random() < (0.9 if (i // 500) % 2 else 0.02):  # stretches of both kinds
            mixed.append(line.split("]", 1)[0] + "] Scheduler: a debug line that is not a batch line")
    want = by_line(mixed)
    for seed in range(3):
        assert by_chunks(mixed, seed) == want


def test_pending_samples_wait_for_the_next_bucket_or_an_idle_source() -> None:
    pipe = new_pipeline(None)
    rules = next((o for o in pipe.observers if isinstance(o, Rules)), None)
    seen: list[float] = []
    pipe.observers.append(lambda src, srv, line, raw: seen.append(line.ts))
    decode = (
        "[2026-08-14 08:17:3{} TP0] Decode batch, #running-req: 4, #full token: 1051, full token usage: 0.20, mamba num: 16, "
        "mamba usage: 0.20, cuda graph: True, gen throughput (token/s): 453.12, #queue-req: 0"
    )
    pipe.feed("s", '[2026-08-14 08:17:29] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK')  # engine known
    for s in "012":  # one 10-s bucket: the last line waits
        pipe.feed("s", decode.format(s))
    assert seen == [] and rules is not None
    exposition(pipe)  # a scrape shows the gauges but samples nothing while the source is active
    assert seen == [] and b"hybrid_cache_running_requests" in exposition(pipe)
    pipe.feed("s", decode.replace("08:17:3{}", "08:17:4{}").format(0))  # next bucket: the old one is sampled
    assert len(seen) == 1
    pipe.sampler.sampling["s"].fed_at -= 11  # quiet for 11 s of wall time
    exposition(pipe)
    assert len(seen) == 1  # a scrape only reads: it never runs the rules
    pipe.tick()  # the ingest side's tick samples the quiet source
    assert len(seen) == 2


def samples_seen(lines: list[str], seed: int | None) -> list[tuple[float, str]]:
    """The (log time, line) samples the rules receive, fed line by line (seed None) or in chunks."""
    pipe = new_pipeline(None)
    seen: list[tuple[float, str]] = []
    pipe.observers.append(lambda src, srv, line, raw: seen.append((line.ts, raw)))
    if seed is None:
        for line in lines:
            pipe.feed("s", line)
    else:
        feed_in_chunks(pipe, random.Random(seed), lines, (1, 5, 40, 77, 300, 2000))
    pipe.finish()
    return seen


def test_rules_get_the_same_samples_in_log_order_whatever_the_chunking(tmp_path: Path) -> None:
    lines = list(read_lines(bench_log(tmp_path, 4000)))
    want = samples_seen(lines, None)
    batch = [ts for ts, raw in want if "batch" in raw]
    assert batch == sorted(batch), "samples reach the rules in log order"
    assert len(batch) < sum("batch" in ln for ln in lines) / 3  # sampled, not every line
    for seed in range(4):
        assert samples_seen(lines, seed) == want


VLLM_LOGS = sorted(glob.glob(str(ROOT / "fixtures" / "vllm" / "*.log")))


@pytest.mark.parametrize("path", VLLM_LOGS, ids=[Path(p).name for p in VLLM_LOGS])
def test_vllm_access_line_shortcut_gives_the_parsers_outcomes(path: str) -> None:
    from parsers import parse_line

    pipe = new_pipeline(None)
    want = {"parsed": 0, "ignored": 0, "unrecognized": 0}
    for line in read_lines(path):
        src = pipe.sources.get("s")
        want[parse_line(line, src.engine if src else None, 2026).outcome] += 1
        pipe.feed("s", line)
    pipe.finish()  # a last line that may continue on the next (a terminal wrap) is counted at the end
    assert pipe.sources["s"].lines == want
