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
