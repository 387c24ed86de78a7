"""The header stage (parsers/header/): the envelope decided once per source, the templates learned
from its lines reading every line exactly as the generic chain does, and the catalogue.

The templates are the fast path of every format that is not an engine's default header; a template
that read one line differently from the generic chain would change a number, so they are compared
on every line of every SGLang fixture in every format, on the benchmark's formats, and on
thousands of damaged lines."""

from __future__ import annotations

import glob
import random
import re
import sys
from pathlib import Path

import pytest
from formats_support import FORMATS, render
from pipeline_support import damaged, generated_log

from parsers.events import SGLANG
from parsers.header import ENVELOPES, NONE, Stage, envelope_of, read_header
from parsers.header.learning import derive
from parsers.header.templates import same

ROOT = Path(__file__).resolve().parents[2]
SGLANG_LOGS = sorted(glob.glob(str(ROOT / "fixtures" / "sglang" / "*.log"))) + sorted(
    glob.glob(str(ROOT / "fixtures" / "scenarios" / "sglang*.log"))
)
sys.path.insert(0, str(ROOT / "bench"))
import formats as bench_formats  # noqa: E402

TEMPLATED = ("config", "json", "structlog", "logfmt", "collector", "docker", "cri", "journald")


def _lines(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8").split("\n")[:-1]


def _read_all(lines: list[str]) -> tuple[Stage, int]:
    """Every line through one stage, as the sampler reads them; asserts each header is the generic
    chain's. Returns the stage and how many lines a template read."""
    stage = Stage()
    fast = 0
    for line in lines:
        n = len(stage.templates)
        got = stage.peel(line, SGLANG, 2026)
        want = read_header(line, SGLANG, 2026)
        assert same(got, want), (line, got, want)
        if n and len(stage.templates) == n and any(t.peel(line) is not None for t in stage.templates):
            fast += 1
    return stage, fast


@pytest.mark.parametrize("fmt", TEMPLATED)
def test_every_fixture_line_in_every_format_reads_as_the_generic_chain(fmt: str) -> None:
    fast = total = 0
    for path in SGLANG_LOGS:
        rendered = render(fmt, _lines(path)).split("\n")[:-1]
        _, n = _read_all(rendered)
        fast += n
        total += len(rendered)
    assert fast > total * 0.6, f"{fmt}: templates read {fast} of {total} lines"  # the fast path is taken


@pytest.fixture(scope="module")
def busy_log(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return generated_log(tmp_path_factory.mktemp("bench") / "busy.log", 4000, 10)


@pytest.mark.parametrize("fmt", [f for f in bench_formats.FORMATS if f != "default"])
def test_the_benchmarks_formats_read_as_the_generic_chain(fmt: str, busy_log: list[str]) -> None:
    lines = [bench_formats._one(fmt, line) for line in busy_log]
    stage, fast = _read_all(lines)
    assert fast > len(lines) * 0.95
    assert stage.envelope == {"docker": "json", "cri": "collector"}.get(fmt, fmt)  # their records read as plain lines
    assert stage.changes == 0


_NOISE = list('0123456789.,:;[]{}()" =\\-_|/\t\rDPITEZ+') + ["\\n", '\\"', "\\u00e9", "é", "\x1b[0m", "TP1", "DP2", "pid=3", "INFO:", "] "]


@pytest.mark.parametrize("fmt", ["config", "json", "logfmt", "collector", "docker", "cri", "structlog"])
def test_damaged_lines_are_read_as_the_generic_chain_or_left_to_it(fmt: str, busy_log: list[str]) -> None:
    """A template either reads a line exactly as the generic chain does, or leaves it to it."""
    if fmt in bench_formats.FORMATS:
        lines = [bench_formats._one(fmt, line) for line in busy_log[:600]]
    else:
        lines = render(fmt, busy_log[:600]).split("\n")[:-1]
    stage, _ = _read_all(lines)
    assert stage.templates
    rnd = random.Random(fmt)
    read = 0
    for case in range(4000):
        s = damaged(rnd, rnd.choice(lines[40:]), _NOISE, (1, 1, 2, 3), cut=False)
        for t in stage.templates:
            got = t.peel(s)
            if got is not None:
                read += 1
                want = read_header(s, SGLANG, 2026)
                assert same(got, want), (case, t.items, s, got, want)
                break
    assert read > 1000  # most damaged lines still have the shape: the comparison is not vacuous


def test_a_template_is_kept_only_when_it_reads_its_own_line_as_the_chain() -> None:
    line = '{"asctime": "2026-03-02 08:01:44,123", "levelname": "INFO", "message": "Decode batch, #running-req: 1", "tp_rank": 3}'
    t = derive(line, read_header(line, SGLANG, 2026), 2026)
    assert t is not None and t.kind == "json" and t.peel(line).tp_rank == 3
    # nested objects, numbers as times, a message the chain reads otherwise: no template
    for other in (
        '{"record": {"time": "2026-03-02T08:01:44Z"}, "message": "Decode batch, #running-req: 1"}',
        '{"ts": 1772438504.12, "message": "Decode batch, #running-req: 1"}',
        '{"ts": "2026-03-02T08:01:44Z", "message": "a message no engine prints"}',
        "2026-03-02 08:01:44,123 - sglang - INFO - Decode batch, #running-req: 1",  # a name token: the generic reader's
    ):
        assert derive(other, read_header(other, SGLANG, 2026), 2026) is None, other


def test_a_message_with_escapes_is_decoded_as_the_record_reader_does() -> None:
    first = '{"time": "2026-03-02T08:01:44Z", "msg": "INFO:     127.0.0.1:1 - \\"POST /generate HTTP/1.1\\" 200 OK"}'
    stage = Stage()
    stage.peel(first, SGLANG, 2026)
    assert stage.templates
    h = stage.read('{"time": "2026-03-02T08:01:45Z", "msg": "INFO:     \\u00e9 \\"GET\\" 200"}', SGLANG, 2026)
    assert h.msg == 'INFO:     é "GET" 200' and h.ts == 1772438505.0


def test_the_envelope_is_decided_once_and_a_change_is_counted() -> None:
    stage = Stage()
    json_line = '{"asctime": "2026-03-02 08:01:44,123", "message": "Decode batch, #running-req: 1"}'
    for line in (json_line, json_line, "Traceback (most recent call last):", '  File "x.py", line 1', json_line):
        stage.peel(line, SGLANG, 2026)
    assert (stage.envelope, stage.changes) == ("json", 0)  # lines without a header decide nothing
    stage.peel("[2026-03-02 08:01:45 TP0] Load weight end. elapsed=1 s", SGLANG, 2026)  # a second writer
    assert (stage.envelope, stage.changes) == ("sglang", 1)
    stage.peel(json_line, SGLANG, 2026)
    assert (stage.envelope, stage.changes) == ("json", 2)


def test_read_learns_and_counts_nothing() -> None:
    stage = Stage()
    line = 'ts=2026-03-02T08:01:44.000Z level=info msg="Decode batch, #running-req: 1"'
    stage.read(line, SGLANG, 2026)
    assert stage.envelope is None and not stage.templates and stage.changes == 0


def test_every_envelope_of_the_catalogue_is_read_as_itself() -> None:
    from exporter.reading.container import CRI, DOCKER, detect

    names = [e.name for e in ENVELOPES]
    assert len(names) == len(set(names)) and NONE in names
    for e in ENVELOPES:
        if e.name in (DOCKER, CRI):
            assert detect(e.example) == e.name
        else:
            assert envelope_of(e.example, read_header(e.example, None, 2026)) == e.name, e.name
        for f in e.fixtures:
            path = f.split(" ", 1)[0]
            assert (ROOT / path).exists(), f
            if path.endswith("formats_support.py"):
                assert set(f.split(" ", 1)[1].replace(",", " ").split()) <= set(FORMATS), f


def test_the_formats_page_shows_the_catalogue() -> None:
    """docs/formats/README.md's table of envelopes is the catalogue's, name for name and in order."""
    text = (ROOT / "docs" / "formats" / "README.md").read_text(encoding="utf-8")
    table = text.split("## Formats read", 1)[1].split("\n\n| envelope |", 1)[1].split("\n\n", 1)[0]
    rows = [r for r in table.split("\n")[2:] if r.startswith("|")]
    shown = [re.match(r"\| `([a-z]+)`", r).group(1) for r in rows]
    assert shown == [e.name for e in ENVELOPES]


def test_a_prefixed_record_is_one_envelope_whichever_path_reads_it() -> None:
    """A collector's prefix over a JSON record is the collector's envelope, read by the template or
    by the generic chain: the lines of one shape never re-decide the source's envelope."""
    stage = Stage()
    for s in range(10):
        line = f'2026-03-02T08:01:{s:02d}.000Z {{"message": "Decode batch, #running-req: {s}", "tp_rank": 0}}'
        stage.peel(line, SGLANG, 2026)
        stage.peel("Traceback (most recent call last):", SGLANG, 2026)
    assert stage.templates and stage.templates[0].kind == "collector"
    assert (stage.envelope, stage.changes) == ("collector", 0)
