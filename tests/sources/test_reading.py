"""The one reading layer (exporter.reading.reader): the same bytes give the same lines and the same
exposition whichever entry point reads them (replay's whole-file blocks, serve's tailer and stdin
chunks) and in whichever format they were written (plain, Docker json-file, CRI with P/F splits)."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from exporter.app import exposition, new_pipeline
from exporter.reading.offline import replay_files
from exporter.reading.reader import Reader, lines_of, read_lines

ROOT = Path(__file__).resolve().parents[2]
YEAR = time.localtime().tm_year
RTIME = f"{YEAR}-08-14T08:10:00.123456789Z"


def _padded_server_args(text: str) -> str:
    """The scenario log with its server_args line grown past 16 KiB (containerd and Docker split
    such a line into several records), the other lines untouched."""
    out = []
    for line in text.split("\n"):
        if "server_args=" in line and line.rstrip().endswith("}"):
            line = line.rstrip()[:-1] + ", 'json_model_override_args': '" + '{"k": 1}' * 2600 + "'}"
            assert len(line.encode()) > 16 << 10
        out.append(line)
    return "\n".join(out)


SGLANG = _padded_server_args((ROOT / "fixtures/scenarios/sglang-mamba-bound.log").read_text())
VLLM = (ROOT / "fixtures/scenarios/vllm-max-num-seqs.log").read_text()


def _cuts(rnd: random.Random, n: int, p: float) -> list[int]:
    """Random cut points inside a message of ``n`` bytes (a long one is always cut, like the runtimes do at 16 KiB)."""
    if n > 16 << 10:
        cuts = list(range(16 << 10, n, 16 << 10))
        return sorted(set(cuts + [rnd.randrange(1, n) for _ in range(rnd.randint(0, 3))]))
    if n < 2 or rnd.random() >= p:
        return []
    return sorted(set(rnd.randrange(1, n) for _ in range(rnd.randint(1, 3))))


def encode(text: str, fmt: str, rnd: random.Random, p: float) -> bytes:
    """``text`` (lines) as a file of format ``fmt``, messages split into records at random points."""
    if fmt == "plain":
        return text.encode()
    out: list[bytes] = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for line in lines:
        raw = line.encode()
        cuts = _cuts(rnd, len(raw), p)
        bounds = [0, *cuts, len(raw)]
        for i in range(len(bounds) - 1):
            part = raw[bounds[i] : bounds[i + 1]]
            final = i == len(bounds) - 2
            if fmt == "docker":
                s = part.decode("utf-8", "replace") + ("\n" if final else "")  # Docker json-encodes text
                out.append(json.dumps({"log": s, "stream": "stderr", "time": RTIME}).encode() + b"\n")
            else:
                out.append(RTIME.encode() + b" stderr " + (b"F " if final else b"P ") + part + b"\n")
    return b"".join(out)


def replay_exposition(path: Path) -> bytes:
    pipe = new_pipeline(None)
    assert replay_files(pipe, [str(path)], "s") == 0
    pipe.finish()
    return exposition(pipe)


def serve_path_exposition(data: bytes, chunks: list[int]) -> bytes:
    """What serve's tailer and stdin source do: one Reader fed the bytes as they arrive, its lines
    through ``Pipeline.feed_lines``; at the end the reader is flushed."""
    pipe = new_pipeline(None)
    pipe.source("s")
    r = Reader()
    pos = 0
    for n in chunks:
        lines = r.feed(data[pos : pos + n])
        if lines:
            pipe.feed_lines("s", lines)
        pos += n
    for lines in (r.feed(data[pos:]), r.flush()):
        if lines:
            pipe.feed_lines("s", lines)
    assert r.pending == 0
    pipe.finish()
    return exposition(pipe)


_REF: dict[str, bytes] = {}


def reference(tmp: Path, name: str, text: str) -> bytes:
    if name not in _REF:
        p = tmp / f"ref-{name}.log"
        p.write_text(text)
        _REF[name] = replay_exposition(p)
    return _REF[name]


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    engine=st.sampled_from(["sglang", "vllm"]),
    fmt=st.sampled_from(["plain", "docker", "cri"]),
    seed=st.integers(0, 2**32 - 1),
    p=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    chunk_max=st.sampled_from([1 << 6, 1 << 12, 1 << 20]),
)
# a record cut inside the vLLM logo's multi-byte characters: Docker's U+FFFD leads the line
@example(engine="vllm", fmt="docker", seed=1, p=0.5, chunk_max=1 << 6)
def test_replay_and_serve_read_the_same_exposition_in_every_format(tmp_path, engine, fmt, seed, p, chunk_max) -> None:
    text = SGLANG if engine == "sglang" else VLLM
    want = reference(tmp_path, engine, text)
    rnd = random.Random(seed)
    data = encode(text, fmt, rnd, p)
    path = tmp_path / f"{engine}-{fmt}-{seed}.log"
    path.write_bytes(data)
    assert replay_exposition(path) == want
    chunks = []
    left = len(data)
    while left > 0 and len(chunks) < 4000:
        n = rnd.randint(1, chunk_max)
        chunks.append(n)
        left -= n
    assert serve_path_exposition(data, chunks) == want


def test_the_long_server_args_line_is_one_line_in_every_format(tmp_path) -> None:
    """The >16 KiB server_args line split into records: one line again, so report sees the config."""
    rnd = random.Random(3)
    plain = [ln for ln in lines_of(SGLANG.encode()) if "server_args=" in ln]
    assert len(plain) == 1 and len(plain[0]) > 16 << 10
    for fmt in ("docker", "cri"):
        got = [ln for ln in lines_of(encode(SGLANG, fmt, rnd, 0.0), [7, 100, 20000]) if "server_args=" in ln]
        assert got == plain, fmt


def test_record_time_is_kept_for_lines_without_their_own(tmp_path) -> None:
    """A message without an SGLang header keeps its record time (the CRI form the collector-prefix
    stripping reads); an SGLang line (which has its own time) is handed on bare."""
    recs = [
        {"log": "[2026-08-14 08:17:30 TP0] Decode batch, #running-req: 4\n", "stream": "stderr", "time": RTIME},
        {"log": "INFO 08-14 08:17:30 [loggers.py:1] Engine 000: ", "stream": "stdout", "time": RTIME},
        {"log": "Avg prompt throughput: 1.0 tokens/s\n", "stream": "stdout", "time": "2027-01-01T00:00:00Z"},
    ]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in recs)
    assert lines_of(data) == [
        "[2026-08-14 08:17:30 TP0] Decode batch, #running-req: 4",
        f"{RTIME} stdout F INFO 08-14 08:17:30 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s",
    ]
    cri = f"{RTIME} stdout P abc\n{RTIME} stdout F def\nnot a record\n".encode()
    assert lines_of(cri) == ["2026-08-14T08:10:00.123456789Z stdout F abcdef".replace("2026", str(YEAR)), "not a record"]


def test_pending_bytes_point_at_the_next_unread_message() -> None:
    """Positions save ``bytes fed - pending``: the start of the first record of an unfinished
    message, in every format, for every cut of the input."""
    recs = [f"{RTIME} stderr P ab\n", f"{RTIME} stderr F cd\n", f"{RTIME} stderr P ef\n"]
    data = "".join(recs).encode()
    for cut in range(len(data) + 1):
        r = Reader()
        got = r.feed(data[:cut])
        done = sum(len(x) for x in recs[:2]) if cut >= sum(len(x) for x in recs[:2]) else 0
        assert cut - r.pending == done, cut
        assert got == ([f"{RTIME} stderr F abcd"] if done else [])


def test_every_chunking_gives_the_same_lines_in_every_format() -> None:
    rnd = random.Random(5)
    text = SGLANG[:40000] + "\n" + "héllo ✓ wörld\n" * 50
    for fmt in ("plain", "docker", "cri"):
        data = encode(text, fmt, rnd, 0.5)
        want = lines_of(data)
        for size in (1, 3, 17, 4096, 70000):
            assert lines_of(data, [size] * (len(data) // size)) == want, (fmt, size)


def test_an_overlong_joined_message_is_cut_and_counted() -> None:
    data = b"".join(f"{RTIME} stderr P {'x' * 900}\n".encode() for _ in range(5)) + f"{RTIME} stderr F end\nnext\n".encode()
    r = Reader(max_line=1000)
    got = r.feed(data) + r.flush()
    assert [len(x) for x in got] == [len(f"{RTIME} stderr F ") + 1000, 4]
    assert r.overlong == 1 and r.pending == 0


def test_gzip_and_bom(tmp_path) -> None:
    import gzip

    p = tmp_path / "server.log.2.gz"
    with gzip.open(p, "wb") as f:
        f.write(b"\xef\xbb\xbf" + encode("a\nb\n", "cri", random.Random(1), 1.0))
    assert [ln.split(" F ")[-1] for ln in read_lines(str(p))] == ["a", "b"]


def _record_zoo(rnd: random.Random, fmt: str, n: int) -> bytes:
    """Records of every kind the reading layer meets: whole ones in the runtime's own layout, split
    ones, escapes (inside and outside ASCII), other layouts, no record at all, empty messages,
    overlong ones, non-ASCII bytes."""
    msgs = [
        "[2026-08-14 08:17:35 TP0] Decode batch, #running-req: 6, #full token: 5437",
        '[2026-08-14 08:17:35] INFO:     127.0.0.1:46913 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "INFO 08-14 08:17:35 [loggers.py:127] Engine 000: Avg prompt throughput: 0.0 tokens/s",
        "Traceback (most recent call last):",
        "tab\there, back\\slash, <html> & \x01 control",
        "",
        "héllo ✓",
        "x" * 1200,
        "[2026-08-14 08:17:35 TP0]no blank after the header",
    ]
    out = []
    for _ in range(n):
        m = rnd.choice(msgs)
        kind = rnd.random()
        if fmt == "docker":
            t = rnd.choice([RTIME, "2026-08-14T08:17:35Z", "", "nope", "2026 08"])
            if kind < 0.7:
                rec = json.dumps({"log": m + "\n", "stream": rnd.choice(["stdout", "stderr"]), "time": t}, separators=(",", ":"))
                if rnd.random() < 0.3:
                    rec = rec.replace("é", "\\u00e9").replace("<", "\\u003c")
            elif kind < 0.8:
                rec = json.dumps({"log": m[:10], "stream": "stderr", "time": t}, separators=(",", ":"))  # split
            elif kind < 0.9:
                rec = json.dumps({"log": m + "\n", "stream": "stderr", "time": t})  # another layout
            else:
                rec = rnd.choice([m, "{not json", '{"log": 5}', '{"log":"a\\nb\\n","stream":"stdout","time":"x"}'])
        else:
            t = rnd.choice([RTIME, "2026-08-14T08:17:35Z", "2026-08-14Tx"])
            if kind < 0.7:
                rec = f"{t} {rnd.choice(['stdout', 'stderr'])} F" + ("" if not m and rnd.random() < 0.5 else f" {m}")
            elif kind < 0.8:
                rec = f"{t} stderr P {m[:10]}"
            else:
                rec = rnd.choice([m, f"{t} stdin F {m}", f"{t} stdout X {m}", f"{t} stdout F{m}", f"2026-08-14 {m}"])
        out.append(rec.encode("utf-8", "surrogatepass") + b"\n")
    return b"".join(out)


def _read_records(data: bytes, fmt: str, chunks: list[int], max_line: int) -> tuple[list[str], list[str], int, int]:
    """The lines a Reader gives for ``data`` fed in ``chunks`` (and as one block), its overlong
    count and the bytes it held before the flush."""
    r, r2 = Reader(max_line, fmt), Reader(max_line, fmt)
    lines, pos = [], 0
    for k in chunks:
        lines += r.feed(data[pos : pos + k])
        pos += k
    lines += r.feed(data[pos:])
    pending = r.pending
    lines += r.flush()
    text = r2.feed_text(data) + "".join(x + "\n" for x in r2.flush())
    return lines, text.split("\n")[:-1], r.overlong, pending


def test_the_c_unwrapper_reads_records_as_the_reader_does(monkeypatch) -> None:
    """Runs of whole records go through exporter/_scan.c's unwrap: the same lines, overlong counts
    and pending bytes as the Reader's own record decoding, for every chunking."""
    import pytest

    from exporter.reading import container

    native = container.native_unwrap
    if native is None:
        pytest.skip("the C extension exporter._scan is not built")
    rnd = random.Random(30)
    for case in range(300):
        fmt = rnd.choice(["docker", "cri"])
        data = _record_zoo(rnd, fmt, rnd.randint(1, 40))
        chunks = [rnd.randint(1, 400) for _ in range(len(data) // 50 + 1)]
        max_line = rnd.choice([1 << 20, 1000, 60])
        monkeypatch.setattr(container, "native_unwrap", native)
        got = _read_records(data, fmt, chunks, max_line)
        monkeypatch.setattr(container, "native_unwrap", None)
        want = _read_records(data, fmt, chunks, max_line)
        assert got == want, (case, fmt, max_line, data[:600])
        assert got[0] == got[1]


def test_the_c_unwrapper_reads_the_runtimes_own_records() -> None:
    """What the C unwrapper takes (a Docker driver's and a CRI runtime's records of an SGLang log)
    and what it leaves to the Reader, and that it stops where it must."""
    from exporter.reading import container

    if container.native_unwrap is None:
        import pytest

        pytest.skip("the C extension exporter._scan is not built")
    unwrap = container.native_unwrap
    line = "[2026-08-14 08:17:35 TP0] Decode batch, #running-req: 6"
    docker = json.dumps({"log": line + "\n", "stream": "stderr", "time": RTIME}, separators=(",", ":")).encode() + b"\n"
    other = json.dumps({"log": "Traceback\n", "stream": "stdout", "time": RTIME}, separators=(",", ":")).encode() + b"\n"
    split = json.dumps({"log": "Trace", "stream": "stdout", "time": RTIME}, separators=(",", ":")).encode() + b"\n"
    data = docker + other + split + docker
    assert unwrap(data, 0, len(data), "d", 1 << 20) == (f"{line}\n{RTIME} stdout F Traceback\n", len(docker + other))
    cri = f"{RTIME} stderr F {line}\n{RTIME} stdout F Traceback\n{RTIME} stdout P Tra\n".encode()
    assert unwrap(cri, 0, len(cri), "c", 1 << 20) == (f"{line}\n{RTIME} stdout F Traceback\n", cri.rindex(b"\n", 0, len(cri) - 1) + 1)
