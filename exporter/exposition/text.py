"""The exposition ``serve`` writes: our families from their rows, any other by prometheus_client.

:func:`encode` writes what the prometheus_client encoder chosen for the request (text 0.0.4 or
OpenMetrics, by ``choose_encoder``) writes of the same families, byte for byte: ours from their
rows (:class:`exporter.exposition.family.Family`), any other family (the process collector's) by
prometheus_client itself, family by family (:func:`chunks`: so ``/metrics`` compresses a family at a
time, never holding the whole text). A request for an escaping that changes names (``dots``,
``values``) is encoded by prometheus_client whole, from the families' ``samples`` (made from the rows
when asked, as the other readers do). tests/collector/test_exposition.py checks the two against each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import exposition as client
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics

from .family import Family, NotPlain, Scrape

# the escapings (Accept: ...; escaping=) that leave the contract's names as they are, in both formats
_PLAIN_ESCAPINGS = ("underscores", "allow-utf-8")
_EOF = b"# EOF\n"


class _One:
    """A collector of one family (prometheus_client's encoder writes it)."""

    def __init__(self, fam: Metric) -> None:
        self.fam = fam

    def collect(self) -> Iterator[Metric]:
        yield self.fam


def chunks(registry, encoder: Callable = client.generate_latest) -> Iterator[bytes]:
    """What ``encoder`` (prometheus_client's ``generate_latest``, its OpenMetrics one, or either
    with the keywords ``choose_encoder`` gives them) writes of ``registry.collect()``, a family at
    a time: the same bytes, with our families written from their rows."""
    func = getattr(encoder, "func", encoder)
    keywords = getattr(encoder, "keywords", None) or {}
    if func is openmetrics.generate_latest:
        om = True
    elif func is client.generate_latest:
        om = False
    else:  # pragma: no cover - an encoder this module does not know
        yield encoder(registry)
        return
    if keywords.get("escaping", "underscores") not in _PLAIN_ESCAPINGS:
        yield encoder(registry)  # names escaped: prometheus_client writes it all, from the samples
        return
    scrape = Scrape()
    for fam in registry.collect():
        if isinstance(fam, Family):
            try:
                yield fam.text(om, scrape).encode("utf-8")
                continue
            except NotPlain:
                pass
        part = encoder(_One(fam))
        yield part[: -len(_EOF)] if om and part.endswith(_EOF) else part
    if om:
        yield _EOF


def encode(registry, encoder: Callable = client.generate_latest) -> bytes:
    """:func:`chunks` joined: what ``encoder(registry)`` returns."""
    return b"".join(chunks(registry, encoder))


__all__ = ["Family", "chunks", "encode"]
