"""The exporter's public metric contract as the dashboards and alert rules see it.

The contract itself is ``exporter/catalogues/contract.py`` (one entry per family: name, type, help, labels,
source line); this module only re-exports it in the shape the dashboard tests use. Dashboards and
alert rules may only query names listed here (``tests/dashboards/test_dashboards.py`` and
``tests/dashboards/test_alerts.py`` parse every PromQL expression and check). The value is the set of
labels each family carries (besides the target labels of ``dashboards/identity.py``).

``OPTIONAL`` lists the metrics that legitimately have no series on an SGLang hybrid deployment
(they depend on the engine, the model family or a server flag); the real-Prometheus integration
test, which runs SGLang hybrid-GDN scenarios, does not require panel targets built only on them to
return data.
"""

from __future__ import annotations

import re

from exporter.catalogues.contract import METRICS

CONTRACT: dict[str, frozenset[str]] = {m.name: frozenset(m.all_labels) for m in METRICS}

# series Prometheus itself synthesises per target; alert rules may use them, dashboards do not
SYNTHETIC = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})

# metric -> why a given deployment may have no series for it
OPTIONAL: dict[str, str] = {m.name: m.absent or f"{'/'.join(m.engines)} only" for m in METRICS if m.absent or "sglang" not in m.engines}


# ------------------------------------------------------------------------------ PromQL helpers
# Enough of PromQL to list the series an expression selects; used by the tests of the dashboards
# and the alert rules (no Python PromQL parser is a dependency).

_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}")
_IDENT = re.compile(r"(?<![a-zA-Z0-9_:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![a-zA-Z0-9_:])(?!\s*\()")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*,?')


def selectors(expr: str) -> list[tuple[str, frozenset[str]]]:
    """``(metric name, label names matched)`` for every vector selector in ``expr``."""
    out: list[tuple[str, frozenset[str]]] = []
    body = _GROUPING.sub(" ", expr)

    def take(m: re.Match) -> str:
        name, inner = m.group(1), m.group(2)
        labels = frozenset(x.group(1) for x in _MATCHER.finditer(inner))
        if name and name not in _KEYWORDS:
            out.append((name, labels))
        return " "

    body = _SELECTOR.sub(take, body)
    body = _RANGE.sub(" ", _STRING.sub('""', body))
    for m in _IDENT.finditer(body):
        if m.group(1) not in _KEYWORDS:
            out.append((m.group(1), frozenset()))
    return out


def metric_names(expr: str) -> set[str]:
    """Every metric name ``expr`` selects."""
    return {name for name, _ in selectors(expr)}
