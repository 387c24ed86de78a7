"""The three ways lines enter a pipeline, for tests that must hold on each: ``feed_text`` (a read's
text, the tailer's path), ``feed_lines`` (a list of lines, the bulk path) and ``feed`` one line at
a time (stdin, the wrapped-line joins); ``chunks`` mixes the first two in random chunks (serve's
reads); :func:`use_scanner` picks the bulk scanner (the C extension or its pure-Python twin)."""

from __future__ import annotations

import random

PATHS = ("lines", "text", "one-by-one")
SCANNERS = ("native", "python")


def use_scanner(monkeypatch, which: str) -> None:
    """Make the pipeline's bulk path use the C scanner (``native``: fails where it is not built) or the pure one."""
    import pytest

    import exporter.state.pipeline as pipeline_mod
    from exporter.state import scan as scan_mod

    if which == "native":
        if scan_mod.native is None:
            pytest.fail("the C extension exporter._scan is not built (make venv builds it)")
        fn, text_fn = scan_mod.native.scan, scan_mod.native.scan_text
    else:
        fn, text_fn = scan_mod.scan_py, scan_mod.scan_text_py
    monkeypatch.setattr(pipeline_mod, "scan", fn)
    monkeypatch.setattr(pipeline_mod, "scan_text", text_fn)


def feed(pipe, path: str, lines: list[str], source: str = "s", seed: int = 0) -> None:
    """``lines`` into ``pipe`` for ``source`` by ``path`` (one of PATHS, or ``chunks``)."""
    if path == "chunks":
        rnd = random.Random(seed)
        i = 0
        while i < len(lines):
            n = rnd.choice([1, 5, 33, 200, 2000])
            feed(pipe, rnd.choice(["lines", "text"]), lines[i : i + n], source)
            i += n
    elif path == "lines":
        pipe.feed_lines(source, lines)
    elif path == "text":
        pipe.feed_text(source, "\n".join(lines) + "\n")
    elif path == "one-by-one":
        for ln in lines:
            pipe.feed(source, ln)
    else:
        raise ValueError(f"unknown path {path!r}; one of {PATHS}")
