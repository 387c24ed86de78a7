"""Composition root: the one place that wires pipeline, observers and collectors.

The command line (``exporter/cli/``) parses arguments and prints; everything it runs is built
here (and, for the long-running ``serve``, in ``exporter/serve.py``, which adds the tailers and
the web server) from plain values: no ``argparse.Namespace`` below the face. Only the face
imports these two modules (tests/design/test_layers.py checks), so the layers below know no wiring.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from .advice.recommend import observe
from .diagnosis.history import REPORT_ROWS, History
from .diagnosis.rules import Rules, RulesConfig
from .exposition.collector import HybridCacheCollector
from .exposition.family import write
from .reading.offline import replay_files
from .state.pipeline import Pipeline
from .state.store import DEFAULT_MAX_DP_RANKS


def new_pipeline(
    engine: str | None = None,
    config: RulesConfig | None = None,
    max_dp_ranks: int = DEFAULT_MAX_DP_RANKS,
    history: History | None = None,
) -> Pipeline:
    """A pipeline observed by the diagnosis rules (``config`` None = built-in thresholds), the
    recommendations observing them, and ``history`` after the rules (its samples see their
    verdicts); ``max_dp_ranks``: distinct dp_rank values kept per source (``--max-dp-ranks``)."""
    rules = observe(Rules(config))
    return Pipeline(engine, [rules] if history is None else [rules, history], max_dp_ranks, rules.config.quiet_seconds)


def timelines() -> History:
    """The timelines ``report --html`` draws: each server's whole log, compacting (:mod:`exporter.diagnosis.history`)."""
    return History(REPORT_ROWS, compact=True)


def exposition(pipe: Pipeline) -> bytes:
    """The text exposition of ``pipe``, as ``/metrics`` serves it in text 0.0.4 (no process collector: ``replay``
    writes it without loading prometheus_client, exporter/exposition/family.py)."""
    return write(HybridCacheCollector(pipe).collect())


def replay(
    paths: Iterable[str],
    source: str | None,
    engine: str | None,
    config: RulesConfig | None,
    err=sys.stderr,
    history: History | None = None,
    max_dp_ranks: int = DEFAULT_MAX_DP_RANKS,
) -> tuple[Pipeline, int]:
    """Read complete files through a new pipeline; returns it finished, and the count of files
    that could not be read (reported on ``err``). ``history``: also keep each server's timeline
    there (``report --html``: :func:`timelines`)."""
    pipe = new_pipeline(engine, config, max_dp_ranks, history)
    failed = replay_files(pipe, paths, source, err)
    pipe.finish()  # the files are complete: their last batch lines are samples too
    return pipe, failed


__all__ = ["exposition", "new_pipeline", "replay", "timelines"]
