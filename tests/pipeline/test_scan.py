"""The bulk scanner: what it returns for real-format lines, and the C extension agreeing with the
pure-Python reference on every fixture and on thousands of mutated lines."""

from __future__ import annotations

import glob
import os
import random
from pathlib import Path

import pytest
from pipeline_support import damaged, generated_log

from exporter.app import new_pipeline
from exporter.reading.reader import read_lines
from exporter.state import scan as scan_mod
from exporter.state.scan import line_at, scan_py, scan_text_py

ROOT = Path(__file__).resolve().parents[2]
SGLANG_LOGS = sorted(glob.glob(str(ROOT / "fixtures" / "sglang" / "*.log"))) + sorted(
    glob.glob(str(ROOT / "fixtures" / "scenarios" / "*.log"))
)

HEAD = "Decode batch, "
DECODE_KEYS = (
    "#running-req",
    "#full token",
    "full token usage",
    "mamba num",
    "mamba usage",
    "cuda graph",
    "gen throughput (token/s)",
    "#queue-req",
)
PREFILL_KEYS = ("#new-seq", "#new-token", "#cached-token", "full token usage", "mamba usage", "#running-req", "#queue-req")
SPEC = ((HEAD, DECODE_KEYS, None, None), ("Prefill batch, ", PREFILL_KEYS, 1, 2))

D = (
    "[2026-08-14 08:17:{s} TP0] Decode batch, #running-req: 9, #full token: 3044, full token usage: 0.01, mamba num: 29, "
    "mamba usage: 0.16, cuda graph: True, gen throughput (token/s): 463.62, #queue-req: 0"
)
P = (
    "[2026-08-14 08:17:{s} TP0] Prefill batch, #new-seq: 6, #new-token: {new}, #cached-token: {cached}, full token usage: 0.01, "
    "mamba usage: 0.19, #running-req: 10, #queue-req: 0"
)
INFO = '[2026-08-14 08:17:{s}] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK'

requires_native = pytest.mark.skipif(scan_mod.native is None, reason="the C extension exporter._scan is not built")


def scanners():
    yield scan_py
    if scan_mod.native is not None:
        yield scan_mod.native.scan


def test_native_extension_is_built_where_required() -> None:
    """`make test` sets HCE_REQUIRE_NATIVE=1: there, a failed build of the extension must not pass
    silently as the pure-Python fallback."""
    if os.environ.get("HCE_REQUIRE_NATIVE"):
        assert scan_mod.native is not None, "exporter._scan was not built (see pip's build output)"
    assert scan_mod.scan is (scan_mod.native.scan if scan_mod.native is not None else scan_py)


@pytest.mark.parametrize("fn", list(scanners()), ids=lambda f: f.__module__)
def test_aggregates_of_a_run(fn) -> None:
    lines = [
        D.format(s="34"),
        INFO.format(s="35"),
        P.format(s="36", new=1252, cached=1536),
        D.format(s="39.250"),  # milliseconds
        D.format(s="41"),  # next 10-s bucket
        P.format(s="42", new=387, cached=5120),
        "[2026-08-14 08:17:43 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2",  # ends the run
        D.format(s="44"),
    ]
    stop, n_info, top, counts, new, cached, first, last = fn(lines, 0, SPEC)
    assert stop == 6 and n_info == 1
    assert top == ("2026-08-14 08:17", "42", "")
    t = " TP0"  # the tags as the header carries them
    assert counts == {("D", t): 3, ("P", t): 2}
    assert new == {t: 1252 + 387} and cached == {t: 1536 + 5120}
    b3, b4 = "2026-08-14 08:173", "2026-08-14 08:174"
    assert first == {("D", t, b3): 0, ("P", t, b3): 2, ("D", t, b4): 4, ("P", t, b4): 5}
    assert last == {("D", t, b3): 3, ("P", t, b3): 2, ("D", t, b4): 4, ("P", t, b4): 5}
    # from the line after the one that stopped it
    assert fn(lines, 7, SPEC)[:3] == (8, 0, ("2026-08-14 08:17", "44", ""))
    assert fn(lines, 6, SPEC)[0] == 6  # a non-steady line: nothing consumed
    assert fn(lines, 8, SPEC) == (8, 0, None, {}, {}, {}, {}, {})


@pytest.mark.parametrize("fn", list(scanners()), ids=lambda f: f.__module__)
@pytest.mark.parametrize(
    ("line", "taken"),
    [
        (D.format(s="34") + ", ", True),  # trailing separator, as some releases print
        (D.format(s="34") + ",", False),
        (D.format(s="34") + "\r", True),  # CRLF log: the last value keeps the \r, as the line template does
        (D.format(s="34.25"), True),  # two-digit fraction: part of the tags, as the header regex reads it
        (D.format(s="34").replace(" TP0]", "]"), True),
        (D.format(s="34").replace(" TP0]", " DP1 TP3 EP3]"), True),
        (D.format(s="34").replace(" TP0]", " TPé]"), True),  # Latin-1: still a one-byte string
        (D.format(s="34").replace(" TP0]", " TP€]"), False),  # not Latin-1: left to the line path
        (D.format(s="34").replace(" TP0]", " T[P0]"), False),
        (D.format(s="34").replace("#full token: 3044", "#full token: "), True),  # empty values are the parser's business
        (D.format(s="34").replace("#full token: 3044", "#full token: 30,44"), False),
        (D.format(s="34").replace("mamba num", "mamba nom"), False),
        (D.format(s="34")[:-3], False),
        (D.format(s="3"), False),
        ("[2026-8-14 08:17:34 TP0] " + D.format(s="34").split("] ", 1)[1], False),
        (P.format(s="36", new="12", cached="0"), True),
        (P.format(s="36", new="1_2", cached="0"), False),  # int() would take it, the scanner leaves it to the line path
        (P.format(s="36", new=" 12", cached="0"), False),
        (P.format(s="36", new="", cached="0"), False),
        (P.format(s="36", new="9" * 9, cached="0"), True),
        (P.format(s="36", new="1" + "0" * 9, cached="0"), False),  # 10 digits: past parsers.numbers.MAX_COUNT
        (INFO.format(s="35"), True),
        (INFO.format(s="35").replace("INFO:", "INFO "), False),
        ("[2026-08-14 08:17:34 TP0] ", False),
        ("", False),
    ],
)
def test_which_lines_a_run_takes(fn, line: str, taken: bool) -> None:
    assert fn([line], 0, SPEC)[0] == (1 if taken else 0)


@pytest.mark.parametrize("fn", list(scanners()), ids=lambda f: f.__module__)
def test_sums_of_the_largest_counts(fn) -> None:
    """Counts have at most 9 digits (parsers.numbers.MAX_COUNT), so a call's 64-bit sums cannot
    overflow (that would take 9.2e9 lines; both scanners still check)."""
    big = P.format(s="36", new="9" * 9, cached="9" * 9)
    lines = [big] * 30
    stop, _, _, counts, new, cached, *_ = fn(lines, 0, SPEC)
    assert stop == 30 and counts == {("P", " TP0"): 30} and new == cached == {" TP0": 30 * 999_999_999}


def learned_spec(path: str):
    """Feed a fixture line by line so the parsers learn its shapes; the spec they end with."""
    pipe = new_pipeline("sglang")
    lines = list(read_lines(path))
    for line in lines:
        pipe.feed("s", line)
    return lines, scan_mod.spec(pipe.sampler.sampling["s"].shapes)


# The fixtures the parsers learn a scan spec from: the spec needs both a decode and a prefill shape,
# and the others (vLLM's scenarios, a PD decode server, excerpts) lack one of the two, so there is no
# spec for the scanners to run on. Decided at collection, so no case is generated only to be skipped.
SPEC_LOGS = [p for p in SGLANG_LOGS if learned_spec(p)[1] is not None]
NO_SPEC_LOGS = [p for p in SGLANG_LOGS if p not in SPEC_LOGS]


def test_fixtures_without_a_spec_hold_no_batch_line() -> None:
    """The fixtures left out of the comparison below really have no spec to compare on: each lacks
    SGLang decode or prefill batch lines (a fixture that has both joins the comparison)."""
    assert len(SPEC_LOGS) >= 20, SPEC_LOGS
    for path in NO_SPEC_LOGS:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        assert HEAD not in text or "Prefill batch, " not in text, path


@requires_native
@pytest.mark.parametrize("path", SPEC_LOGS, ids=lambda p: Path(p).name)
def test_native_matches_python_on_fixtures(path: str) -> None:
    lines, sp = learned_spec(path)
    assert sp is not None
    i = 0
    while i <= len(lines):
        r = scan_mod.native.scan(lines, i, sp)
        assert r == scan_py(lines, i, sp), f"line {i}: {lines[i] if i < len(lines) else ''}"
        i = r[0] + 1


@requires_native
def test_native_matches_python_on_mutated_lines() -> None:
    rnd = random.Random(20261130)
    base = [D.format(s="34"), D.format(s="35.120"), P.format(s="36", new=1252, cached=1536), INFO.format(s="41"), D.format(s="47")]
    alphabet = list("0123456789.,:[] -\r\tDPIé€\x00ab") + ["INFO:", ", ", "] ", "\n"]
    for case in range(3000):
        lines = [damaged(rnd, rnd.choice(base), alphabet) for _ in range(rnd.randint(1, 12))]
        for start in range(len(lines) + 1):
            want = scan_py(lines, start, SPEC)
            assert scan_mod.native.scan(lines, start, SPEC) == want, (case, start, lines)
        lines = [line.replace("\n", " ") for line in lines]  # a block's lines cannot hold \n
        text = "".join(line + "\n" for line in lines)
        off = 0
        for start, line in enumerate(lines):
            want = as_text_result(lines, scan_py(lines, start, SPEC))
            assert scan_mod.native.scan_text(text, off, SPEC) == want == scan_text_py(text, off, SPEC), (case, start, lines)
            off += len(line) + 1


def as_text_result(lines: list[str], r):
    """A list scan's result with indices turned into the offsets of the same lines joined by \\n."""
    offs = [0]
    for line in lines:
        offs.append(offs[-1] + len(line) + 1)
    end = offs[-1]
    stop, n_info, top, counts, new, cached, first, last = r
    return (
        offs[stop] if stop < len(lines) else end,
        n_info,
        top,
        counts,
        new,
        cached,
        {k: offs[i] for k, i in first.items()},
        {k: offs[i] for k, i in last.items()},
    )


def text_scanners():
    yield scan_text_py
    if scan_mod.native is not None:
        yield scan_mod.native.scan_text


def test_scan_text_is_scan_over_offsets() -> None:
    rnd = random.Random(5)
    base = [D.format(s="34"), P.format(s="36", new=12, cached=0), INFO.format(s="41"), D.format(s="47"), "[2026-08-14 08:17:48 TP0] other"]
    for _ in range(500):
        lines = [rnd.choice(base) for _ in range(rnd.randint(0, 10))]
        text = "".join(line + "\n" for line in lines)
        offs = [0]
        for line in lines:
            offs.append(offs[-1] + len(line) + 1)
        for i, off in enumerate(offs):
            want = as_text_result(lines, scan_py(lines, i, SPEC))
            for fn in text_scanners():
                got = fn(text, off, SPEC)
                assert got == want, (fn, lines, i)
                if got[0] < len(text):
                    assert line_at(text, got[0]) == lines[lines.index(line_at(text, got[0]), i)]
    for fn in text_scanners():  # a last line without its newline is a line too
        assert fn(D.format(s="34"), 0, SPEC)[0] == len(D.format(s="34"))
        assert fn("", 0, SPEC) == (0, 0, None, {}, {}, {}, {}, {})


@requires_native
def test_native_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError):
        scan_mod.native.scan((D,), 0, SPEC)
    with pytest.raises(TypeError):
        scan_mod.native.scan([D], 0, (SPEC[0],))
    with pytest.raises(TypeError):
        scan_mod.native.scan([D], 0, ((HEAD, list(DECODE_KEYS), None, None), SPEC[1]))
    with pytest.raises(TypeError):
        scan_mod.native.scan_text(b"[2026", 0, SPEC)
    assert scan_mod.native.scan([D.format(s="34"), 7], 0, SPEC)[0] == 1  # a non-str item stops the run


@requires_native
def test_native_matches_python_on_sparse_and_revisited_buckets() -> None:
    """A quiet server: every line in a bucket of its own (thousands of groups per run), with lines
    of long-past buckets coming back (a DP rank whose clock lags): the same aggregates as the
    reference, however far back the bucket lies."""
    import datetime

    rnd = random.Random(9)
    t0 = datetime.datetime(2026, 8, 14, 8, 0, 0)
    lines = []
    for i in range(3000):
        back = rnd.choice([0] * 20 + [1, 5, 17, 40, 400])
        ts = (t0 + datetime.timedelta(seconds=10 * (i - back))).strftime("%Y-%m-%d %H:%M:%S")
        tags = rnd.choice([" TP0", " TP0", " DP1 TP1"])
        line = rnd.choice([D, P]).replace("2026-08-14 08:17:{s} TP0", ts + tags)
        lines.append(line.format(new=rnd.randint(0, 9000), cached=rnd.randint(0, 9000)))
    want = scan_py(lines, 0, SPEC)
    assert want[0] == len(lines) and len(want[6]) > 2000
    assert scan_mod.native.scan(lines, 0, SPEC) == want
    text = "".join(line + "\n" for line in lines)
    assert scan_mod.native.scan_text(text, 0, SPEC) == scan_text_py(text, 0, SPEC)


# ----------------------------------------------------------------------------------------------
# lines in other envelopes: the header templates of the source's stage (parsers/header/templates.py)

ENVELOPE_FORMATS = ("config", "json", "logfmt", "collector", "docker-lines", "cri-lines", "journald", "structlog")


@pytest.fixture(scope="module")
def busy_lines(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return generated_log(tmp_path_factory.mktemp("bench") / "busy.log", 3000, 10)


def rendered(fmt: str, lines: list[str]) -> list[str]:
    """``lines`` in format ``fmt``: the benchmark's renderings (bench/formats.py) or the real
    formatters' (tests/formats_support.py; Docker's and CRI's records read as plain lines, the way
    a collector that keeps them writes them)."""
    import sys

    from formats_support import render

    sys.path.insert(0, str(ROOT / "bench"))
    import formats as bench_formats

    if fmt in bench_formats.FORMATS:
        return [bench_formats._one(fmt, line) for line in lines]
    return render(fmt.replace("-lines", ""), lines).split("\n")[:-1]


def envelope_spec(lines: list[str]):
    pipe = new_pipeline(None)
    for line in lines[:400]:
        pipe.feed("s", line)
    sp = pipe.sampler.sampling["s"].scan_spec()
    assert sp is not None and len(sp) == 3, "no header template learned"
    return sp


@requires_native
@pytest.mark.parametrize("fmt", ENVELOPE_FORMATS)
def test_native_matches_python_on_envelopes(fmt: str, busy_lines: list[str]) -> None:
    lines = rendered(fmt, busy_lines)
    sp = envelope_spec(lines)
    i, runs, taken = 400, 0, 0
    while i <= len(lines):
        r = scan_mod.native.scan(lines, i, sp)
        assert r == scan_py(lines, i, sp), f"line {i}: {lines[i] if i < len(lines) else ''}"
        taken += r[0] - i
        runs += 1
        i = r[0] + 1
    assert taken > (len(lines) - 400) * 0.9, (fmt, taken, runs)  # the scanner reads the steady state
    text = "".join(line + "\n" for line in lines[400:])
    assert scan_mod.native.scan_text(text, 0, sp) == scan_text_py(text, 0, sp)


@requires_native
@pytest.mark.parametrize("fmt", ENVELOPE_FORMATS)
def test_native_matches_python_on_mutated_envelope_lines(fmt: str, busy_lines: list[str]) -> None:
    lines = rendered(fmt, busy_lines)
    sp = envelope_spec(lines)
    base = [ln for ln in lines[400:1000] if "batch" in ln or "INFO:" in ln]
    rnd = random.Random(fmt)
    alphabet = list('0123456789.,:[]{} -\r\tDPIé€\x00ab"\\=ZT') + ["INFO:", ", ", "] ", "\\n", '\\"', "\\u00e9", "TP1", "pid=2"]
    for case in range(1500):
        chunk = [damaged(rnd, rnd.choice(base), alphabet).replace("\n", " ") for _ in range(rnd.randint(1, 10))]
        for start in range(len(chunk) + 1):
            want = scan_py(chunk, start, sp)
            assert scan_mod.native.scan(chunk, start, sp) == want, (case, start, chunk)
        text = "".join(line + "\n" for line in chunk)
        assert scan_mod.native.scan_text(text, 0, sp) == scan_text_py(text, 0, sp), (case, chunk)


@requires_native
def test_native_rejects_bad_envelope_templates() -> None:
    d, p = SPEC
    for envs in ((), (("", (("X", "y"),)),), (("", (("L", "é"),)),), (("", ()),) * 9, ("not a template",)):
        with pytest.raises((TypeError, ValueError)):
            scan_mod.native.scan([D.format(s="34")], 0, (d, p, envs))
