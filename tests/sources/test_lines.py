"""LineSplitter: chunk boundaries, partial lines, overlong lines, binary garbage."""

from __future__ import annotations

import os

from exporter.reading.lines import LineSplitter


def test_lines_split_across_chunks_are_joined() -> None:
    sp = LineSplitter()
    assert sp.feed(b"[2026-08-14 08:17:30] Decode ba") == []
    assert sp.pending == len(b"[2026-08-14 08:17:30] Decode ba")
    assert sp.feed(b"tch, #running-req: 4\nnext") == ["[2026-08-14 08:17:30] Decode batch, #running-req: 4"]
    assert sp.flush() == "next"
    assert sp.flush() is None


def test_every_chunking_gives_the_same_lines() -> None:
    data = b"".join(b"line %d \xe2\x96\x88\n" % i for i in range(200))
    want = [f"line {i} █" for i in range(200)]
    for size in (1, 2, 3, 7, 64, 4096):
        sp = LineSplitter()
        got: list[str] = []
        for i in range(0, len(data), size):
            got += sp.feed(data[i : i + size])
        assert got == want and sp.flush() is None


def test_overlong_line_is_capped_counted_and_neighbours_survive() -> None:
    sp = LineSplitter(max_line=1000)
    got = sp.feed(b"before\n" + b"x" * 5000)
    got += sp.feed(b"y" * 5000)
    got += sp.feed(b"z\nafter\n")
    assert got[0] == "before" and got[-1] == "after"
    assert len(got) == 3 and len(got[1]) == 1000
    assert sp.overlong == 1


def test_overlong_line_in_one_chunk() -> None:
    sp = LineSplitter(max_line=100)
    assert sp.feed(b"a\n" + b"b" * 500 + b"\nc\n") == ["a", "b" * 100, "c"]
    assert sp.overlong == 1


def test_binary_garbage_never_raises() -> None:
    sp = LineSplitter()
    out = sp.feed(os.urandom(100_000) + b"\n")
    assert all(isinstance(s, str) for s in out)


def test_feed_text_and_read_text_give_the_lines_of_feed_for_any_chunking() -> None:
    """replay's block path (``read_text`` from a file, ``feed_text`` of chunks): the same lines,
    cuts and counts as feed, with short, long and overlong lines, multibyte characters and invalid
    bytes across chunk boundaries."""
    import io
    import random

    rnd = random.Random(7)
    parts = []
    for i in range(400):
        n = rnd.choice([0, 5, 80, 300, 999, 1000, 1001, 2500])
        parts.append(b"%d " % i + bytes(rnd.choice(b"ab \xe2\x96\x88\xff") for _ in range(n)) + b"\n")
    data = b"".join(parts) + b"tail without newline"
    for size in (1, 3, 64, 999, 1000, 1001, 4096, 1 << 16):
        a, b, c = LineSplitter(max_line=1000), LineSplitter(max_line=1000), LineSplitter(max_line=1000)
        want: list[str] = []
        text = ""
        for i in range(0, len(data), size):
            want += a.feed(data[i : i + size])
            t = b.feed_text(data[i : i + size])
            assert t == "" or t.endswith("\n")
            text += t
        assert text[:-1].split("\n") == want
        f, read, n = io.BytesIO(data), "", 1
        while n:
            t, n = c.read_text(f, size)
            assert t == "" or t.endswith("\n")
            read += t
        assert read == text
        assert (a.overlong, a.pending, a.flush()) == (b.overlong, b.pending, b.flush()) == (c.overlong, c.pending, c.flush())
        assert a.overlong > 0


def test_long_line_check_agrees_with_splitting() -> None:
    import random

    from exporter.reading.lines import _long_line

    rnd = random.Random(11)
    for _ in range(2000):
        data = b"\n".join(b"x" * rnd.choice([0, 1, 9, 10, 11, 25]) for _ in range(rnd.randint(1, 12))) + b"\n"
        nl = data.rfind(b"\n")
        for m in (9, 10, 11, 30):
            assert _long_line(data, nl, m) == (max(map(len, data[:nl].split(b"\n"))) > m), (data, m)
