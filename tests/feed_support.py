"""The three ways lines enter a pipeline, for tests that must hold on each: ``feed_text`` (a read's
text, the tailer's path), ``feed_lines`` (a list of lines, the bulk path) and ``feed`` one line at
a time (stdin, the wrapped-line joins)."""

from __future__ import annotations

PATHS = ("lines", "text", "one-by-one")


def feed(pipe, path: str, lines: list[str], source: str = "s") -> None:
    """``lines`` into ``pipe`` for ``source`` by ``path`` (one of PATHS)."""
    if path == "lines":
        pipe.feed_lines(source, lines)
    elif path == "text":
        pipe.feed_text(source, "\n".join(lines) + "\n")
    elif path == "one-by-one":
        for ln in lines:
            pipe.feed(source, ln)
    else:
        raise ValueError(f"unknown path {path!r}; one of {PATHS}")
