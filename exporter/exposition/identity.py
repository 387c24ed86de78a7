"""Which server a series belongs to, in a fleet: labels the exporter adds to what it exposes.

* ``--label KEY=VALUE`` (repeatable): the same labels on every series of the process, for VMs and
  hosts where no service discovery adds them (on Kubernetes use target labels instead:
  docs/fleet.md).
* DaemonSet mode (exporter/sources/kubernetes.py): ``namespace``, ``pod`` and ``container`` of the source
  a series is about, from the kubelet's log path.

Both are added at exposition time by :class:`Labelled`, around the collectors, so the collectors
and their metric contract stay as they are. A label the series already has is never overwritten.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import Metric

from ..catalogues import contract
from .family import Family

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

# Label names the exporter's own series carry (the metric contract), the target labels Prometheus
# sets (job, instance) and the histogram/summary ones. tests/cli/test_flags.py checks that every label in
# the golden expositions and in a live serve is here.
OWN_LABELS = frozenset(label for m in contract.METRICS for label in m.all_labels)
TARGET_LABELS = frozenset({"job", "instance", "le", "quantile"})
KUBERNETES_LABELS = ("namespace", "pod", "container")


def parse_label(arg: str, kubernetes: bool = False) -> tuple[str, str]:
    """``KEY=VALUE`` of ``--label``; raises ValueError with the reason."""
    key, sep, value = arg.partition("=")
    if not sep:
        raise ValueError(f"--label {arg!r}: expected KEY=VALUE")
    if not LABEL_NAME.match(key):
        raise ValueError(f"--label {arg!r}: {key!r} is not a valid Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
    if key.startswith("__"):
        raise ValueError(f"--label {arg!r}: names starting with __ are reserved for Prometheus")
    if key in OWN_LABELS:
        raise ValueError(f"--label {arg!r}: {key!r} is a label of the exporter's own series")
    if key in TARGET_LABELS:
        raise ValueError(f"--label {arg!r}: {key!r} is set by Prometheus (a target label); set it in the scrape config")
    if kubernetes and key in KUBERNETES_LABELS:
        raise ValueError(f"--label {arg!r}: {key!r} comes from the log path in --kubernetes-pods mode")
    return key, value


def parse_labels(args: list[str], kubernetes: bool = False) -> dict[str, str]:
    out: dict[str, str] = {}
    for a in args:
        k, v = parse_label(a, kubernetes)
        if k in out and out[k] != v:
            raise ValueError(f"--label {k} is given twice with different values")
        out[k] = v
    return out


class Labelled:
    """A registry's families with ``constant`` labels on every sample and ``per_source()[source]``
    labels on the samples that have that ``source`` label."""

    def __init__(
        self, registry, constant: dict[str, str] | None = None, per_source: Callable[[], dict[str, dict[str, str]]] | None = None
    ) -> None:
        self.registry = registry
        self.constant = dict(constant or {})
        self.per_source = per_source

    def collect(self) -> Iterator[Metric]:
        # a copy: the DaemonSet's discovery adds and forgets pods while a scrape is written
        by_source = dict(self.per_source()) if self.per_source is not None else {}
        if not self.constant and not by_source:
            yield from self.registry.collect()
            return
        const = self.constant
        for fam in self.registry.collect():
            if isinstance(fam, Family):  # its rows, the labels added as they are written
                yield fam.labelled(const, by_source)
                continue
            out = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            samples = []
            for s in fam.samples:
                extra = by_source.get(s.labels.get("source", ""), None) if by_source else None
                labels = {**const, **extra, **s.labels} if extra else {**const, **s.labels}
                samples.append(s._replace(labels=labels))
            out.samples = samples
            yield out
