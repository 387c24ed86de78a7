"""Counts identical across formats, on the fast path (issue 30): a busy server's log, rendered in
every format the benchmark measures and every format tests/formats_support.py renders with the
real formatters, replays to the exposition of the default header, byte for byte, and the bulk
scanner read the runs of each (with the C scanner and with the pure-Python one). A line the
header templates read differently from the generic chain, a run the scanner groups wrongly, a
bucket or a log time taken from the wrong field would change a number here.

The same, fed line by line and in random chunks (``serve``'s tailers), gives the same state."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from feed_support import SCANNERS, use_scanner
from formats_support import FORMATS as REAL_FORMATS
from formats_support import render
from pipeline_support import feed_in_chunks, generated_log

from exporter.app import exposition, new_pipeline, replay
from exporter.reading.reader import lines_of
from exporter.state.sampler import Sampler

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import formats as bench_formats  # noqa: E402

CASES = [f"bench:{f}" for f in bench_formats.FORMATS if f != "default"] + [f"real:{f}" for f in REAL_FORMATS if f != "default"]


@pytest.fixture(autouse=True, params=SCANNERS)
def scanner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    use_scanner(monkeypatch, request.param)
    return request.param


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    lines = generated_log(tmp_path_factory.mktemp("busy") / "busy.log", 8000, 10)
    # a second DP rank, a restart's startup line and a malformed batch line in the middle
    mid = len(lines) // 2
    dp1 = [ln.replace(" TP0]", " DP1 TP0]") for ln in lines[mid : mid + 300] if "batch" in ln]
    lines[mid:mid] = [
        *dp1,
        lines[mid].split("]", 1)[0] + "] Decode batch, #running-req: banana",
        "[2026-08-14 09:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 8192, "
        "#mamba_num_gained: 6, #new_token_ratio: 0.1043 -> 0.4312",
    ]
    return lines


def _text(case: str, lines: list[str]) -> str:
    kind, fmt = case.split(":")
    if kind == "bench":
        return "".join(bench_formats._one(fmt, line) + "\n" for line in lines)
    return render(fmt, lines)


def _replayed(path: Path) -> bytes:
    pipe, failed = replay([str(path)], None, None, None)
    assert failed == 0
    return exposition(pipe)


@pytest.fixture(scope="module")
def default_exposition(busy: list[str], tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("default") / "server.log"
    path.write_text("".join(line + "\n" for line in busy), encoding="utf-8")
    return _replayed(path)


@pytest.mark.parametrize("case", CASES)
def test_every_format_counts_what_the_default_header_counts(
    case: str, busy: list[str], default_exposition: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = []
    run = Sampler.run

    def counting_run(self, src, ss, line, lo, r, peeled=False):
        ok = run(self, src, ss, line, lo, r, peeled)
        if ok:
            taken.append(r.stop - lo)
        return ok

    monkeypatch.setattr(Sampler, "run", counting_run)
    path = tmp_path / "server.log"
    path.write_text(_text(case, busy), encoding="utf-8")
    got = _replayed(path)
    assert got == default_exposition, case
    assert b'outcome="unrecognized",source="server"} 1.0' in got
    assert sum(taken) > len(busy) * 0.8, f"{case}: the scanner read {sum(taken)} of {len(busy)} lines"


@pytest.mark.parametrize("case", ["bench:json", "bench:logfmt", "bench:config", "bench:collector", "real:docker", "real:cri"])
def test_chunked_feeding_gives_the_state_of_line_by_line(case: str, busy: list[str]) -> None:
    _chunked_as_line_by_line(lines_of(_text(case, busy[:3000]).encode()), 3, (1, 7, 33, 64, 200, 1000))


def _chunked_as_line_by_line(lines: list[str], seeds: int, sizes: tuple[int, ...]) -> None:
    """Fed in random chunks of ``sizes`` (``seeds`` ways), the pipeline ends in the exposition line by line gives."""
    pipe = new_pipeline(None)
    for line in lines:
        pipe.feed("s", line)
    pipe.finish()
    want = exposition(pipe)
    for seed in range(seeds):
        pipe = new_pipeline(None)
        feed_in_chunks(pipe, random.Random(seed), lines, sizes)
        pipe.finish()
        assert exposition(pipe) == want, seed


@pytest.mark.parametrize("zone", ["Asia/Kolkata", "America/New_York"])
def test_zoned_times_read_in_another_zone_give_the_state_of_line_by_line(zone: str, busy: list[str]) -> None:
    """A logfmt log writes its times in UTC (``Z``); read in another zone, the scanner's 10-s buckets
    are renamed to that zone's (the line path's ``bucket_of``): the state is line by line's."""
    from parsers import clock

    clock.set_zone(zone)
    try:
        _chunked_as_line_by_line(lines_of(_text("bench:logfmt", busy[:3000]).encode()), 2, (1, 7, 200, 1000, 3000))
    finally:
        clock.set_zone(None)
