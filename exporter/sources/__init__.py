"""Log sources for ``serve``: tailed files (with rotation, truncation and positions) and stdin.

The names load lazily, so ``exporter.reading`` can use ``sources.container`` without importing
the tailers (and, through them, the pipeline) first.
"""

from __future__ import annotations

import importlib

_WHERE = {"Positions": ".positions", "StdinSource": ".stdin", "Manager": ".tailer", "Tailer": ".tailer"}

__all__ = ["Manager", "Positions", "StdinSource", "Tailer"]


def __getattr__(name: str):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(mod, __name__), name)
