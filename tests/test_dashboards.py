"""Dashboards as code: the checked-in JSON is what the grafanalib source renders, every panel
explains itself, and every query names only metrics (and labels) the exporter exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dashboards import build
from dashboards.metrics import CONTRACT, OPTIONAL, selectors

ROOT = Path(__file__).resolve().parents[1]
DASH = ROOT / "dashboards"
DOC = ROOT / "README.md"
TARGET_LABELS = {"job", "instance"}


def load(name: str) -> dict:
    return json.loads((DASH / name).read_text())


def panels(d: dict) -> list[dict]:
    out = []
    for p in d["panels"]:
        if p.get("type") == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def exprs() -> list[tuple[str, str]]:
    return [(f"{name}: {p['title']}", t["expr"]) for name in build.DASHBOARDS for p in panels(load(name)) for t in p.get("targets", [])]


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_json_is_up_to_date(name):
    assert (DASH / name).read_text() == build.render(build.DASHBOARDS[name]), "stale JSON: run `make dashboards`"


def test_build_check_mode(tmp_path):
    assert build.main(["--check"]) == 0
    assert build.main(["--check", "--out-dir", str(tmp_path)]) == 1  # nothing there yet -> stale
    assert build.main(["--out-dir", str(tmp_path)]) == 0
    assert build.main(["--check", "--out-dir", str(tmp_path)]) == 0


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_panels_describe_what_to_look_for(name):
    d = load(name)
    ps = panels(d)
    assert len(ps) >= 8
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    titles = [p["title"] for p in ps]
    assert len(titles) == len(set(titles)), "duplicate panel titles"
    for p in ps:
        assert len(p.get("description", "")) >= 60, f"{p['title']}: description missing or too short"
        assert p["targets"], p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        for t in p["targets"]:
            assert t["expr"].strip(), p["title"]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_template_variables(name):
    tv = {v["name"]: v for v in load(name)["templating"]["list"]}
    assert tv["datasource"]["type"] == "datasource" and tv["datasource"]["query"] == "prometheus"
    for var in ("engine", "source", "dp_rank"):
        assert tv[var]["type"] == "query"
        assert tv[var]["includeAll"] and tv[var]["multi"] and tv[var]["allValue"] == ".*"
        assert tv[var]["datasource"]["uid"] == "${datasource}"
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", tv[var]["query"])
        assert m and m.group(2) == var, tv[var]["query"]
        for metric, _ in selectors(m.group(1)):
            assert metric in CONTRACT and var in CONTRACT[metric]


def test_required_views_present():
    """The issue's checklist, by metric: each view is backed by at least one panel."""
    used = {m for _, e in exprs() for m, _ in selectors(e)}
    for m in (
        "hybrid_cache_kv_usage_ratio",
        "hybrid_cache_mamba_usage_ratio",
        "hybrid_cache_finding",
        "hybrid_cache_running_requests",
        "hybrid_cache_max_running_requests",
        "hybrid_cache_queued_requests",
        "hybrid_cache_kv_capacity_tokens",
        "hybrid_cache_mamba_capacity_slots",
        "hybrid_cache_mamba_slots_per_request",
        "hybrid_cache_mamba_state_bytes",
        "hybrid_cache_max_concurrency",
        "hybrid_cache_generation_throughput_tokens_per_second",
        "hybrid_cache_spec_accept_length",
        "hybrid_cache_preempted_requests_total",
        "hybrid_cache_recommendation_info",
        "hybrid_cache_exporter_lines_total",
        "hybrid_cache_exporter_read_lag_bytes",
        "hybrid_cache_exporter_rotations_total",
        "hybrid_cache_last_line_timestamp_seconds",
    ):
        assert m in used, f"no panel queries {m}"
    assert any("time() - hybrid_cache_last_line_timestamp_seconds" in e for _, e in exprs())


@pytest.mark.parametrize(("where", "expr"), exprs())
def test_queries_use_only_exported_metrics(where, expr):
    sels = selectors(expr)
    assert sels, where
    for metric, labels in sels:
        assert metric in CONTRACT, f"{where}: {metric} is not a metric the exporter exposes"
        unknown = labels - CONTRACT[metric] - TARGET_LABELS
        assert not unknown, f"{where}: {metric} has no label(s) {sorted(unknown)}"
        if labels:  # every selector honours the template variables that apply to it
            for var in ("engine", "source", "dp_rank"):
                if var in CONTRACT[metric]:
                    assert re.search(rf'{var}=~"\${var}"', expr), f"{where}: {metric} ignores ${var}"


def test_optional_metrics_are_in_the_contract():
    assert set(OPTIONAL) <= set(CONTRACT)


def test_docs_describe_every_panel_and_alert():
    import yaml

    doc = DOC.read_text()
    for name in build.DASHBOARDS:
        assert name in doc, f"README.md does not say how to import {name}"
        for p in panels(load(name)):
            assert p["title"] in doc, f"README.md does not describe panel {p['title']!r}"
    for g in yaml.safe_load((DASH / "alerts.yml").read_text())["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                assert r["alert"] in doc, f"README.md does not describe alert {r['alert']}"
    assert "Import" in doc or "import" in doc
