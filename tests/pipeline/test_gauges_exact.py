"""Gauges are exact under sampling: each exported runtime gauge equals the value of the last line,
in log order, that carried its field, whatever the sampler keeps for the rules, whichever path the
lines take (one by one, a list through the bulk scanner, a block of text) and with the C scanner
or its pure-Python twin. Property test over random field subsets (line shapes) and bucket layouts.
"""

from __future__ import annotations

import random
import time

import pytest
from feed_support import use_scanner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pipeline_support import feed_in_chunks

from exporter.app import new_pipeline
from exporter.state import scan as scan_mod
from exporter.state.store import BATCH_GAUGES
from parsers import parse_line

SCANNERS = ["python"] + (["native"] if scan_mod.native is not None else [])

# keys in the order SGLang prints them (0.5.23, hybrid GDN with MTP), with a value maker each;
# any non-empty subset keeps that order, as a server's flags would
DECODE = (
    ("#running-req", lambda r: str(r.randint(0, 64))),
    ("#full token", lambda r: str(r.randint(0, 300000))),
    ("full token usage", lambda r: f"{r.random():.2f}"),
    ("mamba num", lambda r: str(r.randint(0, 200))),
    ("mamba usage", lambda r: f"{r.random():.2f}"),
    ("accept len", lambda r: f"{1 + 3 * r.random():.2f}"),
    ("accept rate", lambda r: f"{r.random():.2f}"),
    ("cuda graph", lambda r: r.choice(["True", "False"])),
    ("gen throughput (token/s)", lambda r: f"{5000 * r.random():.2f}"),
    ("#queue-req", lambda r: str(r.randint(0, 40))),
)
PREFILL = (
    ("#new-seq", lambda r: str(r.randint(1, 8))),
    ("#new-token", lambda r: str(r.randint(0, 16384))),
    ("#cached-token", lambda r: str(r.randint(0, 16384))),
    ("full token usage", lambda r: f"{r.random():.2f}"),
    ("mamba usage", lambda r: f"{r.random():.2f}"),
    ("#running-req", lambda r: str(r.randint(0, 64))),
    ("#queue-req", lambda r: str(r.randint(0, 40))),
    ("#pending-token", lambda r: str(r.randint(0, 9000))),
    ("#replay-token", lambda r: str(r.randint(1, 900))),  # >=0.5.23, printed only when non-zero
    ("cuda graph", lambda r: r.choice(["True", "False"])),
    ("input throughput (token/s)", lambda r: f"{90000 * r.random():.2f}"),
)
GAUGE_NAME = dict(BATCH_GAUGES)
T0 = time.mktime((2026, 8, 14, 8, 17, 0, 0, 0, -1))


def shape(keys: tuple, mask: int) -> tuple:
    picked = tuple(k for i, (k, _) in enumerate(keys) if mask >> i & 1)
    return picked or (keys[0][0],)


@st.composite
def logs(draw) -> list[str]:
    """A log of one or two DP ranks: runs of decode/prefill lines of 1-3 shapes per kind, with
    time steps that keep lines in one 10-s bucket, cross one, or skip several."""
    seed = draw(st.integers(0, 2**32 - 1))
    r = random.Random(seed)
    shapes = {
        "Decode": [shape(DECODE, draw(st.integers(1, 2 ** len(DECODE) - 1))) for _ in range(draw(st.integers(1, 3)))],
        "Prefill": [shape(PREFILL, draw(st.integers(1, 2 ** len(PREFILL) - 1))) for _ in range(draw(st.integers(1, 3)))],
    }
    ranks = draw(st.sampled_from([[""], [" TP0"], [" DP0 TP0", " DP1 TP1"]]))
    steps = draw(st.lists(st.sampled_from([0, 0, 0, 1, 2, 4, 9, 10, 31]), min_size=1, max_size=6))
    n = draw(st.integers(25, 160))
    t = T0
    out = ['[2026-08-14 08:16:59] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK']
    kind, sh = "Decode", shapes["Decode"][0]
    for _ in range(n):
        if r.random() < 0.3:  # runs: keep the kind and shape for a while, then switch
            kind = r.choice(["Decode", "Prefill"])
            sh = r.choice(shapes[kind])
        t += r.choice(steps)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
        tag = r.choice(ranks)
        makers = dict(DECODE if kind == "Decode" else PREFILL)
        body = ", ".join(f"{k}: {makers[k](r)}" for k in sh)
        out.append(f"[{stamp}{tag}] {kind} batch, {body}")
    return out


def oracle(lines: list[str]) -> dict[str, dict[str, float]]:
    """dp rank -> gauge -> value of the last line carrying the field, parsing each line alone."""
    want: dict[str, dict[str, float]] = {}
    for line in lines:
        parsed = parse_line(line, "sglang")
        e = parsed.event
        if e is None:
            continue
        g = want.setdefault(parsed.dp_rank, {})
        for attr, name in BATCH_GAUGES:
            v = getattr(e, attr)
            if v is not None:
                g[name] = float(v)
    return {dp: g for dp, g in want.items() if g}  # as gauges() reads the pipeline: ranks with a gauge


def gauges(pipe) -> dict[str, dict[str, float]]:
    """The runtime gauges as a scrape sees them (the sampler's read-only view of the pending lines)."""
    src = pipe.sources["s"]
    views = {dp: pipe.gauges_of(src, srv) for dp, srv in src.servers.items()}
    return {dp: g for dp, g in views.items() if g}


def feed(lines: list[str], how: str, seed: int):
    pipe = new_pipeline(None)
    seen: list[str] = []
    pipe.observers.append(lambda src, srv, line, raw: seen.append(raw))
    if how == "line":
        for line in lines:
            pipe.feed("s", line)
    elif how == "list":
        pipe.feed_lines("s", lines)
    elif how == "text":
        pipe.feed_text("s", "".join(ln + "\n" for ln in lines))
    else:
        feed_in_chunks(pipe, random.Random(seed), lines, (1, 3, 33, 40, 100))
    return pipe, seen


@pytest.mark.parametrize("scanner", SCANNERS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=logs(), seed=st.integers(0, 1000))
def test_each_gauge_is_the_last_line_that_carried_its_field(lines, seed, scanner, monkeypatch) -> None:
    use_scanner(monkeypatch, scanner)
    want = oracle(lines)
    samples = None
    for how in ("line", "list", "text", "chunks"):
        pipe, seen = feed(lines, how, seed)
        assert gauges(pipe) == want, how  # while the last lines still wait to be sampled
        pipe.finish()
        assert gauges(pipe) == want, how
        if samples is None:
            samples = seen
        assert seen == samples, f"the rules get the same samples whatever the path ({how})"
