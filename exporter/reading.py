"""Whole files into a pipeline: the reading side of ``replay`` and ``report``.

The tailer (``sources/tailer.py``) follows files that grow; this module reads files that are
complete, in large binary blocks so the pipeline's scanner sees many lines at once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator

from .lines import LineSplitter
from .pipeline import Pipeline

CHUNK = 1 << 20


def source_name(path: str) -> str:
    """Default ``source`` label: the file name without directory and extension."""
    if path == "-":
        return "stdin"
    base = os.path.basename(path.rstrip("/"))
    stem = os.path.splitext(base)[0]  # 'v0.5.10.log' -> 'v0.5.10', not 'v0'
    return stem or base or path


def read_blocks(path: str, splitter: LineSplitter | None = None) -> Iterator[str]:
    """The lines of a file (or ``-`` for stdin) as blocks of text, one per large binary read, each
    line ending in ``\\n`` (a last line without one is flushed on its own at EOF)."""
    sp = splitter or LineSplitter()
    f = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    try:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            text = sp.feed_text(chunk)
            if text:
                yield text
        last = sp.flush()
        if last is not None:
            yield last + "\n"
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def read_chunks(path: str, splitter: LineSplitter | None = None) -> Iterator[list[str]]:
    """The lines of a file (or ``-`` for stdin), a list per large binary read."""
    for text in read_blocks(path, splitter):
        yield text[:-1].split("\n")


def read_lines(path: str) -> Iterator[str]:
    """All lines of a file (or ``-`` for stdin)."""
    for lines in read_chunks(path):
        yield from lines


def replay_files(pipe: Pipeline, paths: Iterable[str], source: str | None, err=sys.stderr) -> int:
    """Feed whole files into ``pipe``; unreadable ones are reported on ``err`` and skipped (the
    other files still count). Returns the number of files that could not be read."""
    failed = 0
    for path in paths:
        name = source or source_name(path)
        pipe.source(name)
        if path != "-" and os.path.isdir(path):
            print(f"hybrid-cache-exporter: {path}: is a directory, skipped", file=err)
            failed += 1
            continue
        try:
            feed_text = pipe.feed_text
            for text in read_blocks(path):
                feed_text(name, text)
        except OSError as e:
            print(f"hybrid-cache-exporter: {path}: cannot read: {e.strerror or e}", file=err)
            failed += 1
    return failed


__all__ = ["CHUNK", "read_blocks", "read_chunks", "read_lines", "replay_files", "source_name"]
