"""``--engine auto`` leaves other engines' lines alone (issue 20, item 4; docs/formats/README.md#other-engines):
lmdeploy's metrics line wears SGLang's header and has vLLM's 'SpecDecoding metrics:' in its middle,
TGI prints tracing's header (and JSON with --json-output), llama.cpp's server its own prefixes. A
replay of them exports nothing but the line counts: no engine, no gauge, no finding, every line
ignored. fixtures/other-engines/ holds lines of their real header shapes (lmdeploy/utils.py's
'%(asctime)s - %(name)s - %(levelname)s - %(filename)s:%(lineno)d - %(message)s' and
lmdeploy/metrics/loggers.py's '[%Y-%m-%d %H:%M:%S DP{n}] ' print, read in lmdeploy 0.18.0)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from exporter.app import exposition, replay

ROOT = Path(__file__).resolve().parents[2]
OTHER = sorted((ROOT / "fixtures" / "other-engines").glob("*.log"))


@pytest.mark.parametrize("log", OTHER, ids=lambda p: p.stem)
def test_another_engines_log_gives_no_numbers(log: Path) -> None:
    pipe, _ = replay([str(log)], None, None, None)
    src = pipe.sources[log.stem]
    assert src.engine is None and src.servers == {}
    assert src.lines["parsed"] == 0 and src.lines["unrecognized"] == 0 and src.lines["ignored"] > 5
    families = {ln.split(b"{")[0] for ln in exposition(pipe).splitlines() if not ln.startswith(b"#")}
    assert families == {b"hybrid_cache_exporter_lines_total"}


def test_the_lmdeploy_lookalike_line_next_to_an_sglang_server() -> None:
    """In an SGLang source, lmdeploy's line is an SGLang header whose message SGLang never prints:
    ignored, and the vLLM marker in its middle is not a message start."""
    from parsers import parse_line

    line = next(ln for ln in (ROOT / "fixtures/other-engines/lmdeploy.log").read_text().splitlines() if "SpecDecoding" in ln)
    for engine in (None, "sglang"):
        r = parse_line(line, engine)
        assert r.outcome == "ignored" and r.event is None


def test_replay_says_when_a_file_has_no_engine_line() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", *(str(p.relative_to(ROOT)) for p in OTHER)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    # lmdeploy's too: its metrics line wears SGLang's header, which is not a header of a quiet SGLang log
    assert len(OTHER) == 3 and r.stderr.count("no SGLang or vLLM log line in it") == 3, r.stderr
    for p in OTHER:
        one = subprocess.run([sys.executable, "-m", "exporter", "replay", str(p)], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert one.returncode == 1 and "no SGLang or vLLM log line in it" in one.stderr, (p.name, one.stderr)


def test_an_sglang_log_with_only_quiet_lines_is_still_a_log(tmp_path) -> None:
    """The rule the lookalike must not break: a piece of an SGLang log with only its access lines is a quiet log (exit 0)."""
    log = tmp_path / "quiet.log"
    log.write_text('[2026-03-02 08:01:44] INFO:     127.0.0.1:52344 - "GET /health HTTP/1.1" 200 OK\n' * 3)
    r = subprocess.run([sys.executable, "-m", "exporter", "replay", str(log)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
