"""Offline files as users have them: a log and its rotated generations (plain, gzip, bzip2, xz;
numbered or dated) given to the real `replay` and `report` commands in any order are one source,
read oldest first, and give exactly what the whole log gives; files that are not an engine's log
are an error, empty files a warning."""

from __future__ import annotations

import bz2
import gzip
import itertools
import json
import lzma
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from exporter.app import replay
from exporter.reading import reader as reader_mod
from exporter.reading.reader import Reader, read_ahead, read_blocks

ROOT = Path(__file__).resolve().parents[2]
EXE = [sys.executable, "-m", "exporter"]
WHOLE = (ROOT / "fixtures/scenarios/sglang-mamba-bound.log").read_bytes()
VLLM = (ROOT / "fixtures/scenarios/vllm-max-num-seqs.log").read_bytes()
DPKG = b"".join(
    b"2026-08-%02d 06:25:%02d status half-configured libc-bin:amd64 2.36-9+deb12u%d\n" % (1 + i % 28, i % 60, i % 9) for i in range(5991)
)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(EXE + list(args), cwd=ROOT, capture_output=True, timeout=120)


def cut(data: bytes, parts: int, rnd: random.Random, mid_line: bool) -> list[bytes]:
    """``data`` in ``parts`` consecutive pieces; with ``mid_line`` some cuts fall inside a line
    (copytruncate copies whatever the writer had written)."""
    cuts = sorted(rnd.sample(range(1, len(data)), parts - 1))
    if not mid_line:
        cuts = sorted({data.index(b"\n", c) + 1 for c in cuts})
    bounds = [0, *cuts, len(data)]
    return [data[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]


WRITERS = {
    "": lambda p, b: p.write_bytes(b),
    ".gz": lambda p, b: p.write_bytes(gzip.compress(b)),
    ".bz2": lambda p, b: p.write_bytes(bz2.compress(b)),
    ".xz": lambda p, b: p.write_bytes(lzma.compress(b)),
}


def generations(tmp: Path, data: bytes, names: list[str], rnd: random.Random, mid_line: bool = True) -> list[str]:
    """Write ``data`` as the generations ``names`` (oldest first) and return their paths."""
    d = tmp / "gens"
    d.mkdir(exist_ok=True)
    paths = []
    for name, piece in zip(names, cut(data, len(names), rnd, mid_line), strict=True):
        ext = next((e for e in (".gz", ".bz2", ".xz") if name.endswith(e)), "")
        p = d / name
        WRITERS[ext](p, piece)
        paths.append(str(p))
    return paths


def whole(tmp: Path, data: bytes, *args: str) -> subprocess.CompletedProcess:
    d = tmp / "whole"
    d.mkdir(exist_ok=True)
    (d / "server.log").write_bytes(data)
    return run(*args, str(d / "server.log"))


NUMBERED = ["server.log.4.xz", "server.log.3.bz2", "server.log.2.gz", "server.log.1", "server.log"]
DATED = ["server.log-20260812.gz", "server.log-20260813.gz", "server.log-20260814", "server.log"]


@pytest.mark.parametrize("names", [NUMBERED, DATED], ids=["numbered", "dateext"])
@pytest.mark.parametrize("data", [WHOLE, VLLM], ids=["sglang", "vllm"])
def test_generations_in_any_order_replay_like_the_whole_log(tmp_path, names, data) -> None:
    want = whole(tmp_path, data, "replay")
    assert want.returncode == 0, want.stderr
    rnd = random.Random(len(names))
    paths = generations(tmp_path, data, names, rnd)
    orders = [paths, paths[::-1], rnd.sample(paths, len(paths))]
    for order in orders:
        got = run("replay", *order)
        assert got.returncode == 0, got.stderr
        assert got.stdout == want.stdout, order


def _proven_by_text(rep: dict, files: dict[str, Path]) -> dict:
    """The report with each fact's proving line (file, line number) replaced by that line's text: the
    same line sits at another number of another file when the log is read as its generations."""
    for s in rep["sources"]:
        for r in s["provenance"] + [r for srv in s["servers"] for r in srv["provenance"]]:
            if r.get("line") is not None:
                lines = [ln for text in read_blocks(str(files[r.pop("file")]), Reader()) for ln in text[:-1].split("\n")]
                r["line"] = lines[r["line"] - 1]
    return rep


def test_report_on_reversed_generations_has_no_restart_and_no_negative_duration(tmp_path) -> None:
    want = whole(tmp_path, WHOLE, "report", "--json")
    paths = generations(tmp_path, WHOLE, NUMBERED, random.Random(3))
    got = run("report", "--json", *paths[::-1])
    assert got.returncode == 0, got.stderr
    files = {Path(p).name: Path(p) for p in paths}
    proven = _proven_by_text(json.loads(want.stdout), {"server.log": tmp_path / "whole" / "server.log"})
    assert any(r.get("line") for s in proven["sources"] for srv in s["servers"] for r in srv["provenance"])
    assert _proven_by_text(json.loads(got.stdout), files) == proven
    text = run("report", *paths[::-1]).stdout.decode()
    assert "-" not in "".join(w for w in text.split() if w[:1] == "-" and w[1:2].isdigit())  # no '-1h58m54s'

    def seconds(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if "seconds" in k and isinstance(v, (int, float)):
                    yield v
                yield from seconds(v)
        elif isinstance(o, list):
            for v in o:
                yield from seconds(v)

    assert min(seconds(json.loads(got.stdout))) >= 0


def test_the_same_generation_twice_is_read_once(tmp_path) -> None:
    """``delaycompress`` leaves ``server.log.1`` and an old ``server.log.1.gz`` may sit beside it;
    a ``copy`` rotation leaves a copy that the live file continues."""
    want = whole(tmp_path, WHOLE, "replay")
    d = tmp_path / "dup"
    d.mkdir()
    half = WHOLE.index(b"\n", len(WHOLE) // 2) + 1
    (d / "server.log.1").write_bytes(WHOLE[:half])
    (d / "server.log.1.gz").write_bytes(gzip.compress(WHOLE[:half]))
    (d / "server.log.2").write_bytes(WHOLE[: half // 2])  # an earlier copy (rotation mode `copy`)
    (d / "server.log").write_bytes(WHOLE)  # the live file still holds everything (`copy` keeps it)
    got = run("replay", str(d / "server.log"), str(d / "server.log.1.gz"), str(d / "server.log.2"), str(d / "server.log.1"))
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout
    assert got.stderr.count(b"read once") == 3


def test_order_follows_the_content_when_the_names_disagree(tmp_path) -> None:
    """Names are only the fallback: two pieces numbered the wrong way round are still read in the
    order of their timestamps."""
    want = whole(tmp_path, WHOLE, "replay")
    a, b = cut(WHOLE, 2, random.Random(1), mid_line=False)
    d = tmp_path / "odd"
    d.mkdir()
    (d / "server.log.1").write_bytes(a)  # the older content under the 'newer' number
    (d / "server.log.2").write_bytes(b)
    got = run("replay", str(d / "server.log.1"), str(d / "server.log.2"))
    assert got.stdout == want.stdout


def test_other_files_stay_their_own_logs(tmp_path) -> None:
    from exporter.reading.offline import generation_of, order_generations

    for name in ("a.log", "v0.5.10", "v0.5.11", "b.log.1"):
        (tmp_path / name).write_bytes(WHOLE)
    groups = order_generations([str(tmp_path / n) for n in ("a.log", "v0.5.10", "v0.5.11", "b.log.1")])
    assert [(name, len(paths)) for name, paths in groups] == [("a", 1), ("v0.5.10", 1), ("v0.5.11", 1), ("b", 1)]
    assert generation_of("/x/server.log.2.gz")[0] == "/x/server.log"
    assert generation_of("/x/server.log-20260814.gz")[0] == "/x/server.log"
    assert generation_of("/x/server.log.gz")[0] == "/x/server.log"
    assert generation_of("/x/v0.5.10")[0] == "/x/v0.5.10"


@pytest.mark.parametrize("cmd", ["replay", "report"])
def test_a_file_that_is_not_an_engine_log_is_an_error(tmp_path, cmd: str) -> None:
    p = tmp_path / "dpkg.log"
    p.write_bytes(DPKG)
    got = run(cmd, str(p))
    assert got.returncode != 0
    err = got.stderr.decode()
    assert "dpkg.log: no SGLang or vLLM log line" in err and "Traceback" not in err
    (tmp_path / "server.log").write_bytes(WHOLE)
    both = run(cmd, str(p), str(tmp_path / "server.log"))
    assert both.returncode != 0 and "dpkg.log" in both.stderr.decode()


@pytest.mark.parametrize("cmd", ["replay", "report"])
def test_an_empty_file_is_a_warning(tmp_path, cmd: str) -> None:
    p = tmp_path / "empty.log"
    p.write_bytes(b"")
    z = tmp_path / "empty.log.1.gz"
    z.write_bytes(gzip.compress(b""))
    got = run(cmd, str(p), str(z))
    assert got.returncode == 0, got.stderr
    assert got.stderr.decode().count("warning") == 2 and "empty" in got.stderr.decode()


def test_a_quiet_piece_of_a_log_is_not_an_error(tmp_path) -> None:
    """A generation with only access lines (headers, nothing parsed) is still the engine's log."""
    p = tmp_path / "server.log.1"
    p.write_bytes(b'[2026-08-14 08:17:30] INFO:     127.0.0.1:40052 - "POST /generate HTTP/1.1" 200 OK\n' * 5)
    (tmp_path / "server.log").write_bytes(WHOLE)
    got = run("replay", str(p), str(tmp_path / "server.log"))
    assert got.returncode == 0, got.stderr


def test_zstd_is_reported_not_misread(tmp_path) -> None:
    p = tmp_path / "server.log.1.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 20)
    got = run("replay", str(p))
    assert got.returncode == 1 and b"zstd" in got.stderr


def test_every_order_of_three_small_generations(tmp_path) -> None:
    """All 6 orders, in-process (the whole-log exposition is the reference)."""
    from exporter.app import exposition, replay

    d = tmp_path / "w"
    d.mkdir()
    (d / "server.log").write_bytes(WHOLE)
    ref = exposition(replay([str(d / "server.log")], None, None, None)[0])
    paths = generations(tmp_path, WHOLE, ["server.log.2.gz", "server.log.1", "server.log"], random.Random(9))
    for order in itertools.permutations(paths):
        pipe, failed = replay(list(order), None, None, None)
        assert failed == 0 and exposition(pipe) == ref, order


def test_two_logs_of_the_same_file_name_are_two_sources(tmp_path) -> None:
    """An SGLang and a vLLM log both called ``server.log`` (two pods' logs copied into two
    folders) stay two servers: they were fed into one source, and the vLLM one was an error."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a/server.log").write_bytes(WHOLE)
    (tmp_path / "b/server.log").write_bytes(VLLM)
    r = run("replay", str(tmp_path / "a/server.log"), str(tmp_path / "b/server.log"))
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert 'engine="sglang",source="a/server"' in out or 'source="a/server"' in out
    assert 'source="b/server"' in out
    assert 'source="server"' not in out
    alone = run("replay", str(tmp_path / "b/server.log")).stdout.decode()
    # the vLLM log gives the same series as when it is replayed alone, under its longer name
    lines = sorted(
        line.replace('source="server"', 'source="b/server"')
        for line in alone.splitlines()
        if 'source="server"' in line and "_total" not in line
    )
    assert lines and all(line in out.splitlines() for line in lines)


# --------------------------------------------------------------------------------------------
# read_ahead: replay's blocks made by a thread of their own (exporter/reading/reader.py)


def _blocks(n: int, fail_at: int | None = None, closed: list | None = None):
    try:
        for i in range(n):
            if i == fail_at:
                raise OSError(5, "Input/output error")
            yield f"block {i}\n"
    finally:
        if closed is not None:
            closed.append(threading.current_thread().name)


def test_read_ahead_gives_the_blocks_in_order_then_ends():
    closed: list = []
    assert list(read_ahead(_blocks(50, closed=closed), depth=2)) == [f"block {i}\n" for i in range(50)]
    assert closed == ["read-ahead"]  # the generator ran and was closed in the reading thread
    assert not any(t.name == "read-ahead" for t in threading.enumerate())


def test_an_error_comes_after_the_blocks_read_before_it():
    got = []
    with pytest.raises(OSError, match="Input/output error"):
        for b in read_ahead(_blocks(10, fail_at=7)):
            got.append(b)
    assert got == [f"block {i}\n" for i in range(7)]


def test_a_consumer_that_stops_stops_the_thread_and_closes_the_file():
    closed: list = []
    ahead = read_ahead(_blocks(10_000, closed=closed), depth=2)
    assert next(ahead) == "block 0\n"
    ahead.close()
    assert closed == ["read-ahead"]
    assert not any(t.name == "read-ahead" for t in threading.enumerate())


def test_a_small_file_is_read_without_a_thread(tmp_path, monkeypatch):
    from exporter.reading import offline

    monkeypatch.setattr(offline, "read_ahead", lambda blocks: pytest.fail("a file of one block read ahead"))
    log = tmp_path / "small.log"
    log.write_bytes(WHOLE)
    assert len(WHOLE) < offline.CHUNK
    replay([str(log)], None, None, None)


def test_replay_reads_ahead_and_gives_what_a_plain_read_gives(tmp_path, monkeypatch):
    """A log of many blocks: the exposition, the byte count and the held last line are those of the plain read."""
    from exporter.app import exposition
    from exporter.reading import offline

    src = ROOT / "fixtures" / "scenarios" / "sglang-mamba-bound.log"
    text = src.read_text()
    log = tmp_path / "big.log"
    log.write_text(text * 40 + text.splitlines()[-1][:50])  # many blocks of CHUNK, and a cut last line
    monkeypatch.setattr(offline, "CHUNK", 1 << 12)
    monkeypatch.setattr(reader_mod, "CHUNK", 1 << 12)
    taken = []

    def counted(blocks):
        for b in read_ahead(blocks):
            taken.append(len(b))
            yield b

    monkeypatch.setattr(offline, "read_ahead", counted)
    ahead = replay([str(log)], None, None, None)[0]
    assert len(taken) > 100  # the file was read ahead, a block at a time
    monkeypatch.setattr(offline, "read_ahead", lambda blocks: blocks)
    plain = replay([str(log)], None, None, None)[0]
    assert exposition(ahead) == exposition(plain)
