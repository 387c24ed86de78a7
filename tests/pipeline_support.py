"""What the pipeline's tests share besides feed_support.py (the ways lines enter a pipeline, the
scanner a test runs with): a busy server's log from the benchmark's generator, feeding a pipeline
in random chunks of given sizes the way ``serve`` and ``replay`` do, damaging lines at random."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHUNKS = (1, 7, 33, 64, 200, 1000, 5000)


def generated_log(out: Path, lines: int, rate: float | None = None) -> list[str]:
    """``lines`` lines of a busy SGLang server's log (bench/gen.py, seeded) written to ``out``."""
    cmd = [sys.executable, str(ROOT / "bench" / "gen.py"), "--lines", str(lines), "--out", str(out), "--no-truth"]
    if rate is not None:
        cmd += ["--rate", str(rate)]
    subprocess.run(cmd, check=True, timeout=120)
    return out.read_text(encoding="utf-8").split("\n")[:-1]


def feed_some(pipe, rnd: random.Random, lines: list[str], source: str = "s") -> None:
    """Feed a chunk as a list (serve's tailers) or as one block of text (replay), at random."""
    if rnd.random() < 0.5:
        pipe.feed_lines(source, lines)
    else:
        pipe.feed_text(source, "".join(line + "\n" for line in lines))


def feed_in_chunks(pipe, rnd: random.Random, lines: list[str], sizes: Sequence[int] = CHUNKS, source: str = "s") -> None:
    """Feed ``lines`` in chunks of random sizes, each as a list or as a block (:func:`feed_some`)."""
    i = 0
    while i < len(lines):
        n = rnd.choice(sizes)
        feed_some(pipe, rnd, lines[i : i + n], source)
        i += n


def damaged(rnd: random.Random, line: str, alphabet: Sequence[str], edits: Sequence[int] = (0, 0, 1, 2), cut: bool = True) -> str:
    """``line`` with a random number (from ``edits``) of random edits: a character deleted, a piece
    of ``alphabet`` inserted, and (``cut``) the line cut there, or else a character replaced."""
    for _ in range(rnd.choice(edits)):
        at = rnd.randrange(len(line) + 1)
        op = rnd.randrange(3)
        if op == 0:
            line = line[:at] + line[at + 1 :]
        elif op == 1:
            line = line[:at] + rnd.choice(alphabet) + line[at:]
        elif cut:
            line = line[:at]
        else:
            line = line[:at] + rnd.choice(alphabet) + line[at + 1 :]
    return line
