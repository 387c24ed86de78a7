"""The cheaper per-sample path (batch-line fast parse, cached quantiles, lighter rules) gives exactly
what the straightforward code gave: same events, same quantiles, same state."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest

from exporter.advice import recommend
from exporter.app import new_pipeline
from exporter.diagnosis.memory import UsageStats
from exporter.reading.reader import read_lines
from parsers import events as ev
from parsers import parse_line
from parsers import shapes as shapes_mod
from parsers.header.prefix import SGLANG_HEADER_RE


def _quantile_by_loop(u: UsageStats, q: float) -> float | None:
    """The original definition: walk the bins until the running count reaches ``q * n``."""
    if not u.n:
        return None
    target = q * u.n
    acc = 0
    for i, c in enumerate(u.counts):
        acc += c
        if acc >= target and c:
            return i / 100.0
    return u.max


@pytest.mark.parametrize("seed", range(20))
def test_quantile_matches_the_bin_walk(seed: int) -> None:
    rnd = random.Random(seed)
    u = UsageStats()
    qs = (0.0, 0.01, 0.5, 0.9, 0.95, 0.99, 1.0, 1.2, -0.5, math.nan)
    assert u.quantile(0.5) is None
    lo, hi = sorted((rnd.random(), rnd.random()))
    for k in range(rnd.choice([1, 2, 5, 50, 500])):
        u.add(rnd.uniform(lo - 0.05, hi + 0.05), float(k), 300.0)
        if rnd.random() < 0.3:
            for q in qs:
                assert u.quantile(q) == _quantile_by_loop(u, q), (k, q)
    for q in qs:
        assert u.quantile(q) == _quantile_by_loop(u, q), q


ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted(str(p) for p in ROOT.glob("fixtures/*/*.log"))


def _learn(shapes: shapes_mod.LineShapes, raw: str) -> None:
    """What the sampler does with a batch line of a new shape: check it, which learns it."""
    h = SGLANG_HEADER_RE.search(raw)
    if h is not None:
        shapes.check_batch(raw[h.end() :].rstrip("\r\n"))


@pytest.mark.parametrize("engine", [None, "sglang"])
def test_batch_line_fast_path_gives_the_generic_parse(engine: str | None) -> None:
    """Every fixture line, plus variants at the edges of the fast path (ms timestamps, DP tags,
    trailing separators, CR, ANSI, junk after the header, bad values), parses to the same Line
    with a source's learned shapes as without."""
    lines: list[str] = []
    for path in FIXTURES:
        lines += list(read_lines(path))
    base = "[2026-08-14 08:17:34{ms}{tags}] Decode batch, #running-req: {r}, #full token: 1761, full token usage: 0.01, mamba num: 21, mamba usage: 0.11, cuda graph: True, gen throughput (token/s): 167.84, #queue-req: 0"
    for ms in ("", ".125"):
        for tags in ("", " TP0", " DP1 TP3", " PP1 TP0 EP2"):
            for r in ("7", "banana", "7.0", "1,024", ""):
                line = base.format(ms=ms, tags=tags, r=r)
                lines += [line, line + ", ", line + "\n", line + "\r\n", "\x1b[32m" + line, line.replace("] ", "]  ", 1), "x" + line]
                # spaces around the graph flag (the generic split strips them)
                lines += [line.replace("graph: True", "graph:  True"), line.replace("graph: True", "graph: True ")]
                lines += [line.replace(", cuda graph: True", "") + ", cuda graph: True \t"]
    prefill = (
        "[2026-08-14 08:17:35 TP0] Prefill batch, #new-seq: 6, #new-token: {n}, #cached-token: {c}, full token usage: 0.01, "
        "mamba usage: 0.19, #running-req: 10, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 29013.08"
    )
    for n in ("1252", "-5", "999999999", "1000000000", "1_000", " 12", "12.0", "1e3"):
        lines += [prefill.format(n=n, c=1536), prefill.format(n=1252, c=n)]
    # a key printed twice: the last value counts, an odd earlier one sends the line to the generic path
    twice = "[2026-08-14 08:17:36 TP0] Decode batch, #running-req: {a}, #queue-req: 0, #running-req: {b}, token usage: 0.5, full token usage: {u}"
    for a, b, u in (("1", "2", "0.25"), ("x", "2", "0.25"), ("1", "x", "0.3"), ("1.0", "2", "50%"), ("1", "2", "0.25 ")):
        lines += [twice.format(a=a, b=b, u=u)]
    # a value with ': ' in it: the generic split keeps the text after the last one of an item, so
    # 'est. x: cuda graph: True' is a graph flag there, 'cuda graph: a: True' an unknown key
    odd = "[2026-08-14 08:17:37 TP0] Decode batch, #running-req: 7, {k}: {v}, #queue-req: 0"
    for k, v in (
        ("est. x", "3"),
        ("est. x", "cuda graph: True"),
        ("cuda graph", "True"),
        ("cuda graph", "a: True"),
        ("#mamba-slot", "3/48"),
        ("#mamba-slot", "3/48: 2"),
    ):
        lines += [odd.format(k=k, v=v)]
    # digits \\d accepts in the header or a value that are not ASCII (the fast header takes [0-9] only)
    lines += [
        base.format(ms="", tags=" TP0", r="7").replace("2026", "\u0662\u0660\u0662\u0666"),
        base.format(ms="", tags=" TP0", r="\u0667"),
    ]
    shapes = shapes_mod.LineShapes()
    hits = 0
    for raw in lines:
        _learn(shapes, raw)
        want = parse_line(raw, engine)
        got = parse_line(raw, engine, shapes=shapes)
        assert got == want, raw
        hits += shapes.batch_line(raw) is not None
    assert hits > 100  # the fast path was really taken


def test_batch_line_leaves_other_engines_and_long_lines_alone() -> None:
    line = "[2026-08-14 08:17:34 TP0] Decode batch, #running-req: 7, #queue-req: 0"
    shapes = shapes_mod.LineShapes()
    _learn(shapes, line)
    assert shapes.batch_line(line) is not None
    assert parse_line(line, "vllm", shapes=shapes).event is None
    long = line.replace("#queue-req: 0", "#queue-req: " + "9" * (70 * 1024))
    assert shapes.batch_line(long) is None
    assert parse_line(long, "sglang", shapes=shapes).outcome == ev.UNRECOGNIZED  # 'line too long', as before


def test_sources_keep_their_own_shapes() -> None:
    """Two servers of different releases in one process: each source's sampler learns its own
    shapes, neither overwrites the other's (they were process globals)."""
    from exporter.app import new_pipeline

    old = "[2025-05-31 18:31:2{s} TP0] Decode batch. #running-req: 64, #token: 38912, token usage: 0.04, cuda graph: True, gen throughput (token/s): 1893.41, #queue-req: 0"
    new = (
        "[2026-08-14 08:17:3{s}] Decode batch, #running-req: 4, #full token: 1051, full token usage: 0.20, mamba num: 16, "
        "mamba usage: 0.20, cuda graph: True, gen throughput (token/s): 453.12, #queue-req: 0"
    )
    pipe = new_pipeline("sglang")
    for s in "0123":
        pipe.feed("a", old.format(s=s))
        pipe.feed("b", new.format(s=s))
    a, b = pipe.sampler.sampling["a"].shapes.current["D"], pipe.sampler.sampling["b"].shapes.current["D"]
    assert a is not b and a.line.fullmatch(old.format(s="9")) and b.line.fullmatch(new.format(s="9"))
    assert not a.line.fullmatch(new.format(s="9"))


def _recommendation_states(lines: list[str], monkeypatch: pytest.MonkeyPatch, skip_unchanged: bool) -> tuple[list, int]:
    """The recommendations of the applied event's server after every applied event, and how many
    times ``recommend.update`` ran."""
    calls = 0
    update = recommend.update

    def counted(*args, **kw):
        nonlocal calls
        calls += 1
        return update(*args, **kw)

    states: list = []

    def snapshot(src, srv, line, raw) -> None:
        recs = [r.as_dict() for r in srv.rule_memory.recommendations]
        states.append((srv.dp_rank, list(srv.recommendations), srv.recommended_ratio, recs))

    with monkeypatch.context() as mp:
        mp.setattr(recommend, "update", counted)
        if not skip_unchanged:
            mp.setattr(recommend, "inputs", lambda *args: object())  # never equal: always recompute
        pipe = new_pipeline(None)
        pipe.observers.append(snapshot)
        for line in lines:
            pipe.feed("s", line)
        pipe.finish()
    return states, calls


def test_skipped_recommendation_refreshes_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refresh whose inputs (``recommend.inputs``) equal the last one's is skipped: the
    recommendations after every event are the same as with every refresh computed (SGLang
    mamba / KV bound and capped, vLLM request-cap bound)."""
    skipped = 0
    for path in sorted(ROOT.glob("fixtures/scenarios/*.log")) + sorted(ROOT.glob("fixtures/demo/*.log")):
        lines = list(read_lines(str(path)))
        fast, n_fast = _recommendation_states(lines, monkeypatch, skip_unchanged=True)
        full, n_full = _recommendation_states(lines, monkeypatch, skip_unchanged=False)
        assert fast == full, path.name
        skipped += n_full - n_fast
    assert skipped > 30  # refreshes were really skipped


def test_recent_events_count_within_a_window_as_a_full_scan_does() -> None:
    import random

    from exporter.diagnosis.memory import Recent

    rnd = random.Random(3)
    for _ in range(300):
        r = Recent(16)
        t = 1000.0
        for _ in range(rnd.randint(0, 40)):
            t += rnd.choice([0, 0.5, 3, 30, -2 if rnd.random() < 0.05 else 1])
            r.append((t, 1))
            for now in (t, t + 10, t - 5):
                for window in (0, 5, 60):
                    assert r.count_within(now, window) == sum(1 for x, _ in r if 0 <= now - x <= window)


def test_the_samples_header_reads_ascii_headers_as_split_header_does() -> None:
    """The fast path's header pattern (digits one by one, ASCII only) gives the same groups as
    SGLANG_HEADER_RE on every header it matches, and matches every ASCII one that one does."""
    rx = re.compile(shapes_mod._SAMPLE_HEADER)
    assert rx.groups == SGLANG_HEADER_RE.groups
    rnd = random.Random(5)
    for _ in range(3000):
        h = "[2026-08-14 08:17:34"
        h = "".join(c if rnd.random() > 0.05 else rnd.choice("0x:.- ") for c in h)
        h += (
            rnd.choice(["", ".125", ".12", ".1234", ",125"])
            + rnd.choice(["", " TP0", " DP1 TP3", "[", " x]"])
            + rnd.choice(["] ", "]", " ] "])
        )
        want, got = SGLANG_HEADER_RE.fullmatch(h), rx.fullmatch(h)
        assert (want is None) == (got is None), h
        assert want is None or want.groups() == got.groups(), h
