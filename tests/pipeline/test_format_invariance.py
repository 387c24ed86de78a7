"""Format invariance (issue 20, item 2): every fixture, re-rendered in each format a server or its
platform may write (tests/formats_support.py: the engine's default, a logging config's header,
python-json-logger's JSON, structlog's JSON and logfmt, a collector's ``[date time] `` stamp,
Docker json-file, CRI, ``journalctl -o short-iso``), gives the exposition of the original: the
golden, byte for byte (the rendered file has the fixture's name, so the source label is the same).
A change that breaks one format fails here, not silently in production.

Left out: the pasted excerpts (``pasted-damaged-headers``): they are not an engine's output but
what a paste made of it, and their header-less wrapped lines would get a wrapper's prefix, which
no paste has.

One difference is expected, and counted exactly: behind a collector's ``[date time] `` stamp,
vLLM's bare uvicorn line ``INFO:     Application startup complete.`` is the very line SGLang's
HTTP process prints with its own header, so a vLLM source counts it ``ignored`` instead of
``parsed`` (vLLM's readiness is not read from SGLang's line, ``replay --engine vllm`` on an SGLang
log finds nothing of vLLM's; the event changes no state).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from formats_support import FORMATS, render

from exporter.app import exposition, replay

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
FIXTURES = sorted(
    p for d in ("sglang", "vllm", "scenarios", "demo") for p in (ROOT / "fixtures" / d).glob("*.log") if "pasted" not in p.name
)


def _replayed(path: Path) -> bytes:
    pipe, failed = replay([str(path)], None, None, None)
    assert failed == 0
    return exposition(pipe)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "default"])
@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_format_gives_the_fixtures_exposition(fixture: Path, fmt: str, tmp_path: Path) -> None:
    lines = fixture.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out = tmp_path / fixture.name
    out.write_text(render(fmt, lines), encoding="utf-8")
    golden = (GOLDEN / f"{fixture.parent.name}__{fixture.stem}.prom").read_bytes()
    if fmt == "collector" and fixture.parent.name == "vllm":
        golden = _uvicorn_ready_ignored(golden, sum(ln.startswith("INFO:     Application startup complete") for ln in lines))
    got = _replayed(out)
    if got != golden:
        import difflib

        diff = "\n".join(difflib.unified_diff(golden.decode().splitlines(), got.decode().splitlines(), "golden", fmt, lineterm="", n=0))
        pytest.fail(f"{fmt} of {fixture.name} differs from the golden:\n{diff}")


def _uvicorn_ready_ignored(golden: bytes, n: int) -> bytes:
    """The golden with ``n`` parsed lines counted ignored (see the module docstring)."""
    import re

    def move(m: re.Match, by: int) -> bytes:
        return m.group(1) + str(float(m.group(2)) + by).encode()

    golden = re.sub(rb'(hybrid_cache_exporter_lines_total\{outcome="parsed",[^}]*\} )(\S+)', lambda m: move(m, -n), golden)
    return re.sub(rb'(hybrid_cache_exporter_lines_total\{outcome="ignored",[^}]*\} )(\S+)', lambda m: move(m, n), golden)


def test_the_default_rendering_is_the_fixture_itself() -> None:
    for f in FIXTURES[:3]:
        text = f.read_text(encoding="utf-8")
        assert render("default", text.split("\n")[:-1]) == text


@pytest.mark.parametrize("fmt", ["config", "json", "logfmt", "collector"])
def test_the_serve_path_reads_each_format_as_replay_does(fmt: str, tmp_path: Path) -> None:
    """``serve`` feeds the lines of each read in lists (``Pipeline.feed_lines``), chunked as the
    reads fall; the state is replay's (``feed_text`` of whole blocks) in every format."""
    import random

    from exporter.app import new_pipeline
    from exporter.reading.reader import lines_of

    rng = random.Random(20)
    for fixture in (f for f in FIXTURES if f.stem in ("v0.5.23", "dp-attention", "v0.33.0", "sglang-mamba-bound")):
        lines = fixture.read_text(encoding="utf-8").split("\n")[:-1]
        data = render(fmt, lines).encode()
        out = tmp_path / fixture.name
        out.write_bytes(data)
        want = _replayed(out)
        pipe = new_pipeline(None)
        got_lines = lines_of(data)
        i = 0
        while i < len(got_lines):
            n = rng.choice((1, 3, 40, 200))
            pipe.feed_lines(fixture.stem, got_lines[i : i + n])
            i += n
        pipe.finish()
        assert exposition(pipe) == want, (fmt, fixture.name)
