"""The release check (``make release-check``) without the network: its reading of a wheel's source, its verdicts
on two releases of a made-up engine, and its table against the parsers (every marker a parser counts as its own has
a row, every current row a recorded text)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from parsers import sglang as sgl
from parsers import vllm as vll
from tests.release import check, messages
from tests.release.source import Module, Wheel

BASE = '''
import logging
logger = logging.getLogger(__name__)


def size(x, n, blocks):
    """Available KV cache memory: a docstring, no message."""
    logger.info("Available KV cache memory: %s GiB", x)
    logger.info("Old line %d " "carried on", n)
    msg = f"Blocks: {blocks:,} of " + "the pool"
    logger.info(msg)
    if n < 0:
        raise ValueError(f"Too small ({n!r})")
'''

NEW = """
import logging
logger = logging.getLogger(__name__)


def size(x, n, blocks):
    logger.info("Available KV cache memory: %s GiB", x)
    logger.info("Old line %d carried on, differently", n)
    msg = f"Blocks: {blocks:,} of " + "the pool"
    logger.info(msg)
    logger.warning("Memory after warmup: %s GiB free", x)
    logger.info("Unrelated news %s", x)
"""


def _wheel(cache: Path, version: str, source: str, where: str = "fakeeng/worker.py") -> Path:
    path = cache / f"fakeeng-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("fakeeng/__init__.py", "")
        z.writestr(where, source)
    return path


ROWS = (
    messages.Message("fakeeng", "Available KV cache memory: ", "fakeeng/worker.py", "a parser"),
    messages.Message("fakeeng", "Old line %d ", "fakeeng/worker.py", "a parser"),
    messages.Message("fakeeng", "Blocks: ", "fakeeng/worker.py", "a parser"),
    messages.Message("fakeeng", "Too small (", "fakeeng/worker.py", "a parser"),
    messages.Message("fakeeng", "Memory after warmup", "fakeeng/worker.py", "a parser"),
    messages.Message("fakeeng", "Ancient form", "", "a parser", current=False),
)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.setattr(check, "of", lambda engine: ROWS)
    monkeypatch.setitem(messages.PINNED, "fakeeng", "0.9.0")
    monkeypatch.setattr(check, "PINNED", messages.PINNED)
    monkeypatch.setattr(check, "PINNED_FILE", tmp_path / "pinned.json")
    _wheel(tmp_path, "1.0.0", BASE)
    _wheel(tmp_path, "2.0.0", NEW)
    return tmp_path


def test_a_module_renders_its_messages_as_the_source_writes_them():
    found = {f.text: f for f in Module("fakeeng/worker.py", BASE).found}
    assert "Available KV cache memory: a docstring, no message." not in found  # a docstring is no message
    assert found["Available KV cache memory: %s GiB"].level == "info"
    assert found["Old line %d carried on"].level == "info"  # implicit concatenation joined
    assert "Blocks: {blocks:,} of the pool" in found  # an f-string and '+': fields as the source writes them
    assert found["Too small ({n!r})"].level == "raise"


def test_two_releases_unchanged_changed_gone_new_and_the_new_logger_calls(fake):
    out: list[str] = []
    failing = check.check("fakeeng", "2.0.0", "1.0.0", fake, out=out.append)
    text = "\n".join(out)
    assert failing == 2, text  # one read message changed, one vanished
    assert "  unchanged  Available KV cache memory: %s GiB" in text
    assert "  unchanged  Blocks: {blocks:,} of the pool" in text
    assert "      old: 'Old line %d carried on'" in text and "      new: 'Old line %d carried on, differently'" in text
    assert "  gone       Too small ({n!r})" in text
    assert "  new        Memory after warmup: %s GiB free  [fakeeng/worker.py; not in 1.0.0]" in text
    assert "historical 1 forms" in text
    calls = text.split("new logger calls in 2.0.0", 1)[1]
    assert "Memory after warmup: %s GiB free" in calls  # mentions memory
    assert "Unrelated news" not in calls  # mentions none of the keywords
    assert "Available KV cache memory" not in calls  # not new
    assert text.splitlines()[-1].endswith("2 read message(s) changed or vanished")


def test_a_moved_message_is_unchanged_and_says_where_it_went(fake):
    _wheel(fake, "3.0.0", BASE, where="fakeeng/v2/worker.py")
    out: list[str] = []
    assert check.check("fakeeng", "3.0.0", "1.0.0", fake, out=out.append) == 1  # a row in neither release is stale
    assert "  unchanged  Available KV cache memory: %s GiB  [fakeeng/v2/worker.py; moved from fakeeng/worker.py]" in out
    assert "  gone       'Memory after warmup': in neither 1.0.0 nor 3.0.0  [a parser]" in out


def test_the_pinned_check_reads_the_recorded_texts(fake, monkeypatch):
    record = {"fakeeng": {"release": "1.0.0", "messages": {m.anchor: {"files": [m.file], "texts": []} for m in ROWS if m.current}}}
    w = Wheel(fake / "fakeeng-1.0.0-py3-none-any.whl")
    for m in ROWS:
        if m.current:
            s = check.seen_in(w, m)
            record["fakeeng"]["messages"][m.anchor] = {"files": s.files, "texts": s.texts}
    (fake / "pinned.json").write_text(json.dumps(record))
    monkeypatch.setitem(messages.PINNED, "fakeeng", "1.0.0")
    out: list[str] = []
    assert check.check("fakeeng", "1.0.0", "1.0.0", fake, out=out.append) == 1  # the message of a later release only
    assert any("gone" in line and "Memory after warmup" in line for line in out)
    assert not any(line.startswith("  changed") for line in out)
    assert not any("new logger calls" in line for line in out)  # the same release: nothing is new


# --------------------------------------------------------------------------------------------
# the project's table


def _covered(engine: str) -> list[str]:
    """What the table knows of ``engine``: the recorded texts of its current rows and the anchors of the others."""
    recorded = json.loads(check.PINNED_FILE.read_text())[engine]["messages"]
    out = [t for m in messages.of(engine) if m.current for t in recorded[m.anchor]["texts"]]
    return out + [m.anchor for m in messages.of(engine) if not m.current] + [c for m in messages.of(engine) for c in m.composes]


@pytest.mark.parametrize(
    ("engine", "markers"),
    [
        ("vllm", vll.MARKERS),
        ("sglang", tuple(m for m in sgl.MESSAGE_STARTS if m != "INFO:")),  # uvicorn's lines are not SGLang's
    ],
)
def test_every_marker_a_parser_reads_has_a_row_of_the_table(engine, markers):
    texts = _covered(engine)
    missing = [m for m in markers if not any(m in t for t in texts)]
    assert not missing, f"{engine}: no row of tests/release/messages.py writes {missing}"


def test_every_current_row_has_its_pinned_text_recorded():
    recorded = json.loads(check.PINNED_FILE.read_text())
    for engine in check.ENGINES:
        assert recorded[engine]["release"] == messages.PINNED[engine]
        rows = recorded[engine]["messages"]
        for m in messages.of(engine):
            if m.current:
                assert rows.get(m.anchor, {}).get("texts"), (engine, m.anchor)
                assert m.file in rows[m.anchor]["files"], (engine, m.anchor, rows[m.anchor]["files"])
        assert set(rows) == {m.anchor for m in messages.of(engine) if m.current}
