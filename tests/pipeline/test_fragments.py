"""A fragment is not a line (issue 29, item 7).

A line handed on without its newline (:class:`exporter.reading.lines.Fragment`: the end of a finished
input, or the part of a line a truncating restart left) is read only when its message is whole:
an SGLang batch line with every field of the source's batch lines (its learned shape), vLLM's
stats line that parses (its grammar ends every value with its unit), a death or readiness, a
startup message that ends as a whole one does (``parsers.cuts.ends_whole``). Otherwise it is
counted once, unread: ``unrecognized`` when it begins a known message, ``ignored`` when not. The
one cut not told apart: one inside the last value of a batch line (``#queue-req: 1`` of 13).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.app import exposition, new_pipeline, replay
from exporter.reading.lines import Fragment
from exporter.reading.reader import Reader

H = "[2026-08-23 09:05:14 TP0] "
DECODE = (
    "[2026-08-23 09:06:{s:02d} TP0] Decode batch, #running-req: 9, #full token: 20902, full token usage: 0.10, mamba num: 45, "
    "mamba usage: 0.96, cuda graph: True, gen throughput (token/s): 466.71, #queue-req: 13"
)
SUMMARY = (
    H + "max_total_num_tokens=211360, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=9, "
    "context_len=262144, available_gpu_mem=9.45 GB"
)
BODY = [DECODE.format(s=s) for s in range(50)]


def _counts(pipe, source: str = "s") -> tuple[float, dict]:
    srv = pipe.sources[source].servers.get("0")
    return (srv.counters.get("decode_batches", 0.0) if srv else 0.0), dict(pipe.sources[source].lines)


@pytest.mark.parametrize(
    "cut",
    [
        "#full token: ",  # the issue's: cut after a separator
        "mamba usage: 0.9",  # inside a value: parses alone, a wrong number, a line of another shape
        "Decode batch, #runn",
    ],
)
def test_a_cut_batch_line_at_a_truncation_is_no_batch(cut: str) -> None:
    """The dead writer's last line, cut, ended by the restart's first bytes: counted once,
    unread, and no batch (50 + 50 batches for the 100 lines written whole)."""
    line = DECODE.format(s=50)
    part = line[: line.index(cut) + len(cut)]
    r = Reader()
    pipe = new_pipeline(None)
    pipe.feed_lines("s", r.feed(("\n".join(BODY) + "\n" + part).encode()))
    ended = r.ends_before(b"[2026-08-23 10:00:00 TP0] Load weight begin. avail mem=70.00 GB\n")
    assert ended == [part] and type(ended[0]) is Fragment
    pipe.feed_lines("s", ended)
    pipe.feed_lines("s", r.feed("".join(ln + "\n" for ln in BODY).encode()))
    pipe.finish()
    batches, lines = _counts(pipe)
    assert batches == 100
    assert lines == {"parsed": 100, "ignored": 0, "unrecognized": 1}


def _replay_bytes(data: bytes, tmp_path: Path):
    p = tmp_path / "s.log"
    p.write_bytes(data)
    pipe, failed = replay([str(p)], None, None, None)
    assert failed == 0
    return pipe


def test_the_last_line_of_a_file_without_its_newline(tmp_path: Path) -> None:
    """The end of a finished file (docs/reading.md): a whole message there is read (the summary
    ends as a whole one does, a number with its unit; a decode line has every field of the
    source's decode lines); one cut is not (the decode line without its last field); a line of no
    engine is ignored, as it would be with its newline."""
    body = "".join(ln + "\n" for ln in BODY).encode()
    pipe = _replay_bytes(body + SUMMARY.encode(), tmp_path)
    assert pipe.sources["s"].servers["0"].capacity["max_running_requests"] == 9
    assert _counts(pipe) == (50, {"parsed": 51, "ignored": 0, "unrecognized": 0})
    pipe = _replay_bytes(body + DECODE.format(s=51).encode(), tmp_path)
    assert _counts(pipe) == (51, {"parsed": 51, "ignored": 0, "unrecognized": 0})
    assert pipe.sources["s"].servers["0"].gauges["queued_requests"] == 13
    cut = DECODE.format(s=51).rsplit(", #queue-req", 1)[0]
    pipe = _replay_bytes(body + cut.encode(), tmp_path)
    assert _counts(pipe) == (50, {"parsed": 50, "ignored": 0, "unrecognized": 1})
    pipe = _replay_bytes(body + b"Hello from a print()", tmp_path)
    assert _counts(pipe) == (50, {"parsed": 50, "ignored": 1, "unrecognized": 0})


@pytest.mark.parametrize(
    ("last", "whole"),
    [
        (SUMMARY, True),
        (SUMMARY[: SUMMARY.index("context_len")], False),  # ends at a separator: provably cut
        (SUMMARY[: SUMMARY.index(", available_gpu_mem")], False),  # the summary's last number, with no unit
        (H + "Mamba Cache is allocated. max_mamba_cache_size: 47, conv_state size: 0.03GB, ssm_state size: 1.10GB ", True),
        (H + "Load weight end. elapsed=5.54 s, type=Qwen3_5ForConditionalGeneration, avail mem=14.08 GB, mem usage=8.85 GB.", True),
        (H + "Scheduler hit an exception: Traceback (most recent call last):", True),  # a death: nothing to cut
        ("[2026-08-23 09:07:00] Subprocess scheduler_0 (pid=812) crashed with exit code -6", True),
    ],
)
def test_which_last_lines_are_whole(last: str, whole: bool, tmp_path: Path) -> None:
    pipe = _replay_bytes(("".join(ln + "\n" for ln in BODY) + last).encode(), tmp_path)
    lines = pipe.sources["s"].lines
    assert (lines["parsed"], lines["unrecognized"]) == ((51, 0) if whole else (50, 1))


def test_vllm_stats_line_at_the_end() -> None:
    """vLLM's stats line is whole when it parses (its grammar ends every value with its unit):
    read at the end of the input; cut inside a value, it does not parse and is not."""
    stats = (
        "(APIServer pid=1) INFO 11-01 10:03:{s:02d} [loggers.py:310] Engine 000: Avg prompt throughput: 1872.3 tokens/s, "
        "Avg generation throughput: 5.4 tokens/s, Running: 12 reqs, Waiting: 3 reqs, GPU KV cache usage: 87.5%, "
        "Prefix cache hit rate: 45.0%"
    )
    for last, n in ((stats.format(s=59), 3), (stats.format(s=59)[:-4], 2)):
        pipe = new_pipeline(None)
        pipe.feed_lines("s", [stats.format(s=s) for s in (10, 20)] + [Fragment(last)])
        pipe.finish()
        assert pipe.sources["s"].servers["0"].counters["stats_lines"] == n
        assert pipe.sources["s"].lines["unrecognized"] == 3 - n


def test_stdin_and_a_file_agree(tmp_path: Path) -> None:
    """The reading layer marks the fragment whatever the entry: `lines_of` (the tailers' and
    stdin's splitting) and replay give the same exposition."""
    from exporter.reading.reader import lines_of

    data = ("".join(ln + "\n" for ln in BODY) + DECODE.format(s=51)[:-1]).encode()
    pipe = new_pipeline(None)
    pipe.feed_lines("s", lines_of(data, chunks=[100, 7, 3000]))
    pipe.finish()
    assert exposition(pipe) == exposition(_replay_bytes(data, tmp_path))


def test_explain_marks_the_fragment(tmp_path: Path) -> None:
    import io

    from exporter.presentation.explain import explain_files

    p = tmp_path / "s.log"
    p.write_bytes(("".join(ln + "\n" for ln in BODY[:3]) + DECODE.format(s=51).rsplit(", #queue-req", 1)[0]).encode())
    out = io.StringIO()
    assert explain_files(new_pipeline(None), [str(p)], None, out, io.StringIO()) == 0
    lines = out.getvalue().splitlines()
    assert lines[3].startswith("s.log:4 ") and "no newline: read only when its message is whole" in lines[3]
    assert "no newline" not in lines[2]
    assert "-- source s: 3 parsed, 0 ignored, 1 unrecognized" in out.getvalue()
