"""Format invariance (issue 20, item 2): every fixture, re-rendered in each format a server or its
platform may write (tests/formats_support.py: the engine's default, a logging config's header,
python-json-logger's JSON, structlog's JSON and logfmt, a collector's ``[date time] `` stamp,
Docker json-file, CRI, ``journalctl -o short-iso``), gives the exposition of the original: the
golden, byte for byte (the rendered file has the fixture's name, so the source label is the same).
A change that breaks one format fails here, not silently in production.

Left out: the pasted excerpts (``pasted-damaged-headers``): they are not an engine's output but
what a paste made of it, and their header-less wrapped lines would get a wrapper's prefix, which
no paste has.
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
    got = _replayed(out)
    if got != golden:
        import difflib

        diff = "\n".join(difflib.unified_diff(golden.decode().splitlines(), got.decode().splitlines(), "golden", fmt, lineterm="", n=0))
        pytest.fail(f"{fmt} of {fixture.name} differs from the golden:\n{diff}")


def test_the_default_rendering_is_the_fixture_itself() -> None:
    for f in FIXTURES[:3]:
        text = f.read_text(encoding="utf-8")
        assert render("default", text.split("\n")[:-1]) == text
