"""The shipped rule files (``alerts.yml``, ``recording.yml``) as data, for the tests and the builders.

The recorded series' labels follow from their names (``level:metric:operations``): ``server:`` keeps a
server's identity (``identity.SERVER``) and adds ``model``; ``namespace_model_pool:`` keeps namespace,
model and pool; and so on. The dashboards may query recorded series like exporter metrics.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .identity import SERVER

HERE = Path(__file__).resolve().parent
ALERTS = HERE / "alerts.yml"
RECORDING = HERE / "recording.yml"


def rules(path: Path) -> list[dict]:
    return [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def level_labels(record: str) -> frozenset[str]:
    """Labels a recorded series carries, from the level part of its name."""
    level = record.split(":", 1)[0]
    if level == "server":
        return frozenset((*SERVER, "model"))
    return frozenset(level.split("_"))


def recorded() -> dict[str, frozenset[str]]:
    """``{record name: labels}`` for every recording rule."""
    return {r["record"]: level_labels(r["record"]) for r in rules(RECORDING) if "record" in r}


# the identity labels the annotation queries of an alert select a server by (the alert's own labels)
_SELECT = 'namespace="%s",pod="%s",instance="%s",source="%s",dp_rank="%s"'
_ARGS = "$labels.namespace $labels.pod $labels.instance $labels.source $labels.dp_rank"
# a recommendation's flag as a command line has it: a switch alone (value "true": exporter/advice/flags.py's switches),
# an environment variable as NAME=value, else "--flag value" (report.flag_text does the same)
FLAG_TEXT = (
    '{{ if eq .Labels.value "true" }}{{ .Labels.flag }}'
    '{{ else if match "^[A-Z][A-Z0-9_]*$" .Labels.flag }}{{ .Labels.flag }}={{ .Labels.value }}'
    "{{ else }}{{ .Labels.flag }} {{ .Labels.value }}{{ end }}"
)


def advice_template(rule: str) -> str:
    """The end of a pool alert's description: the finding's first recommendation (``rank="1"``, the documented
    order: docs/rules.md#the-order) and how many more there are. A recommendation with a caveat is never exported,
    so never here; without one the text says so and points to the runbook. ``tests/dashboards/test_alerts.py``
    checks every alert of the rule catalogue carries exactly this."""
    sel = f'rule="{rule}",{_SELECT}'
    return (
        f'{{{{ range query (printf `hybrid_cache_recommendation_info{{{sel},rank="1"}}` {_ARGS}) }}}}'
        f"Start here: {FLAG_TEXT}"
        f"{{{{ end }}}}"
        f"{{{{ with query (printf `count(hybrid_cache_recommendation_info{{{sel}}}) - 1 > 0` {_ARGS}) }}}}"
        " ({{ . | first | value }} more, in order, on the exporter's status page and in `hybrid-cache-exporter report`)"
        "{{ end }}"
        f"{{{{ if not (query (printf `hybrid_cache_recommendation_info{{{sel}}}` {_ARGS})) }}}}"
        "The exporter recommends no flag it can check against this server's log: see the runbook."
        "{{ end }}"
    )
