"""What tells one server apart from another in a fleet, for the dashboards and the rules.

The exporter's own labels (``engine``, ``source``, ``dp_rank``) name a log stream and a DP rank
*inside* one exporter; every sidecar may well call its stream ``server``. What tells pods apart are
the **target labels** Prometheus attaches at scrape time: ``job`` and ``instance`` always,
``namespace``/``pod``/``container`` from a PodMonitor or ServiceMonitor (or from the exporter's
DaemonSet mode, or ``--label`` on a VM). Every aggregation in the dashboards and the recording
rules keeps all of them (``by``/``on`` lists below), so two servers never collapse into one
series; labels a deployment does not have (a VM has no ``pod``) are simply absent, which PromQL
groups and regex matchers (``pod=~".*"``) treat as the empty string.
"""

from __future__ import annotations

from exporter.catalogues import contract

# labels that identify a scraped exporter: the scrape target's (container: a PodMonitor's default
# target label) and `cluster`, which a multi-cluster setup (external labels, Thanos/Mimir, or
# `--label cluster=...`) adds, since pod IPs and names repeat across clusters
TARGET = ("cluster", "job", "namespace", "pod", "container", "instance")
# ... of those, the ones the per-server dashboard offers as template variables
TARGET_VARS = ("job", "namespace", "pod", "instance")
# one engine process (a DP rank of one log stream of one exporter); the exporter's own labels come
# from the metric contract
SERVER = (*TARGET, *contract.SERVER)
# one log stream of one exporter (server_info, restarts)
SOURCE = (*TARGET, *contract.ENGINE_SOURCE)
STREAM = (*TARGET, *contract.SOURCE)  # self-metrics carry no engine label


def by(labels: tuple[str, ...], *extra: str) -> str:
    """``"a, b, c"`` for ``by (...)`` / ``on (...)``."""
    return ", ".join((*labels, *extra))


def regex_sel(names: tuple[str, ...] | list[str]) -> str:
    """``name=~"$name", ...``: Grafana replaces ``$name`` by the selected values or the All value ``.*``,
    which also matches a label the series does not have."""
    return ", ".join(f'{n}=~"${n}"' for n in names)
