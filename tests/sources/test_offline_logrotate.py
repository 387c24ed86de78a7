"""Offline generations made by the real `logrotate` (Debian's binary): a log written in pieces
(cut anywhere, even inside a line) and rotated after each piece with `copytruncate`, `compress`,
`delaycompress` (numbered), or `dateext`; every file left in the directory, given to the real
`replay` in a shuffled order, gives the exposition of the whole log."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WHOLE = (ROOT / "fixtures/scenarios/sglang-mamba-bound.log").read_bytes()


def logrotate() -> str:
    p = shutil.which("logrotate") or ("/usr/sbin/logrotate" if os.path.exists("/usr/sbin/logrotate") else None)
    if p is None:
        if os.environ.get("CI"):
            pytest.fail("logrotate missing in CI: `make tools` installs it")
        pytest.skip("logrotate not installed")
    return p


def replay(*paths: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exporter", "replay", *paths], cwd=ROOT, capture_output=True, timeout=120)


@pytest.mark.parametrize(
    ("options", "pieces", "pause"),
    [
        ("rotate 10\ncompress\ndelaycompress\ncopytruncate", 6, 0.0),
        ("rotate 10\ncompress\ncopytruncate\ndateext\ndateformat -%Y%m%d-%s", 3, 1.05),
    ],
    ids=["numbered-compress-delaycompress", "dateext"],
)
def test_generations_made_by_logrotate_replay_like_the_whole_log(tmp_path, options: str, pieces: int, pause: float) -> None:
    tool = logrotate()
    want = tmp_path / "whole"
    want.mkdir()
    (want / "server.log").write_bytes(WHOLE)
    ref = replay(str(want / "server.log"))
    assert ref.returncode == 0, ref.stderr

    d = tmp_path / "logs"
    d.mkdir()
    log = d / "server.log"
    conf = tmp_path / "rotate.conf"
    conf.write_text(f"{log} {{\n{options}\nmissingok\nnotifempty\n}}\n")
    rnd = random.Random(pieces)
    cuts = sorted(rnd.sample(range(1, len(WHOLE)), pieces - 1))  # anywhere, also inside a line
    bounds = [0, *cuts, len(WHOLE)]
    for i in range(pieces):
        with open(log, "ab") as f:
            f.write(WHOLE[bounds[i] : bounds[i + 1]])
        if i < pieces - 1:
            r = subprocess.run([tool, "-f", "-s", str(tmp_path / "state"), str(conf)], capture_output=True, timeout=60)
            assert r.returncode == 0, r.stderr
            if pause:
                time.sleep(pause)  # dateext names carry the second
    files = sorted(str(p) for p in d.iterdir())
    assert len(files) == pieces, files
    assert any(f.endswith(".gz") for f in files)
    for order in (files, files[::-1], rnd.sample(files, len(files))):
        got = replay(*order)
        assert got.returncode == 0, got.stderr
        assert got.stdout == ref.stdout, order
