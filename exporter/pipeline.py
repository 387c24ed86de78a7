"""The one-way flow: lines -> parsers -> per-source state -> observers (the rules).

:class:`Pipeline` is what ``replay``, ``serve`` and ``report`` feed: the sampler
(:mod:`exporter.sampler`: the hot path of busy SGLang logs, the 10-s sample buckets, the pending
lines, the learned line shapes of each source, the idle commit on the ingest tick) in front of the
plain pipeline (:mod:`exporter.flow`: one line -> one event -> the state -> the observers). All
three commands therefore reach the same state from the same lines, and a scrape only reads it
(``Sampler.gauges_of``; the rules run on the ingest side, never in a scrape).

Observers are passed in by whoever builds the pipeline (``exporter/app.py``); ``observers`` is
the flow's list, so they run in that order after every applied event.
"""

from __future__ import annotations

from collections.abc import Iterable

from .flow import Flow, Observer
from .sampler import IDLE_SAMPLE_SECONDS, Sampler
from .state import DEFAULT_MAX_DP_RANKS


class Pipeline(Sampler):
    """A :class:`~exporter.sampler.Sampler` in front of a new :class:`~exporter.flow.Flow`."""

    def __init__(self, engine: str | None = None, observers: Iterable[Observer] = (), max_dp_ranks: int = DEFAULT_MAX_DP_RANKS) -> None:
        super().__init__(Flow(engine, observers, max_dp_ranks))


__all__ = ["IDLE_SAMPLE_SECONDS", "Observer", "Pipeline"]
