"""Dashboards as code: the checked-in JSON is what the grafanalib source renders, every panel
explains itself, every query names only metrics (and labels) the exporter exposes or the recording
rules record, and no query merges two servers (fleet: job/namespace/pod/instance kept everywhere)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dashboards import build, identity
from dashboards.metrics import CONTRACT, OPTIONAL, selectors
from dashboards.rules import recorded

ROOT = Path(__file__).resolve().parents[2]
DASH = ROOT / "dashboards"
DOC = ROOT / "docs" / "dashboards.md"
TARGET_LABELS = set(identity.TARGET)
RECORDED = recorded()
KNOWN = {**CONTRACT, **RECORDED}
SERVER_DASH, FLEET_DASH = "hybrid-cache.json", "hybrid-cache-fleet.json"
# template variables each dashboard must offer (besides the data source)
VARIABLES = {
    SERVER_DASH: ("job", "namespace", "pod", "instance", "engine", "source", "dp_rank"),
    FLEET_DASH: ("namespace", "model"),
}


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


def exprs(names=None) -> list[tuple[str, str]]:
    return [
        (f"{name}: {p['title']}", t["expr"])
        for name in (names or build.DASHBOARDS)
        for p in panels(load(name))
        for t in p.get("targets", [])
    ]


def groupings(expr: str) -> list[set[str]]:
    """The label lists of every ``by (...)`` and ``on (...)`` in ``expr``."""
    return [{x.strip() for x in m.group(1).split(",") if x.strip()} for m in re.finditer(r"\b(?:by|on)\s*\(([^)]*)\)", expr)]


def test_both_dashboards_are_built():
    assert set(build.DASHBOARDS) == {SERVER_DASH, FLEET_DASH}


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
    assert list(tv) == ["datasource", *VARIABLES[name]], "variables (in chain order)"
    for var in VARIABLES[name]:
        assert tv[var]["type"] == "query"
        # All = .*: also matches a label the series lacks (no pod/namespace on a VM)
        assert tv[var]["includeAll"] and tv[var]["multi"] and tv[var]["allValue"] == ".*"
        assert tv[var]["current"]["value"] == ["$__all"], var
        assert tv[var]["datasource"]["uid"] == "${datasource}"
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", tv[var]["query"])
        assert m and m.group(2) == var, tv[var]["query"]
        for metric, labels in selectors(m.group(1)):
            assert metric in CONTRACT, metric
            assert var in CONTRACT[metric] or var in TARGET_LABELS or var == "model" and var in CONTRACT[metric], (var, metric)
            # chained: each variable is narrowed by the ones before it
            before = VARIABLES[name][: VARIABLES[name].index(var)]
            assert labels == set(before), (var, sorted(labels))


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
        assert metric in KNOWN, f"{where}: {metric} is neither a metric the exporter exposes nor a recorded series"
        unknown = labels - KNOWN[metric] - TARGET_LABELS
        assert not unknown, f"{where}: {metric} has no label(s) {sorted(unknown)}"


@pytest.mark.parametrize(("where", "expr"), exprs([SERVER_DASH]))
def test_server_dashboard_queries_honour_every_variable(where, expr):
    """Every selector filters by job/namespace/pod/instance and by engine/source/dp_rank where the metric has them."""
    for metric, labels in selectors(expr):
        for var in (*identity.TARGET_VARS, "engine", "source", "dp_rank"):
            if var in identity.TARGET_VARS or var in CONTRACT[metric]:
                assert var in labels and re.search(rf'\b{var}=~"\${var}"', expr), f"{where}: {metric} ignores ${var}"


@pytest.mark.parametrize(("where", "expr"), exprs([FLEET_DASH]))
def test_fleet_dashboard_queries_honour_namespace_and_model(where, expr):
    sels = selectors(expr)
    for metric, labels in sels:
        assert "namespace" in labels, f"{where}: {metric} ignores $namespace"
    assert any("model" in labels for _, labels in sels), f"{where}: ignores $model"


@pytest.mark.parametrize(("where", "expr"), exprs())
def test_no_query_merges_two_servers(where, expr):
    """Aggregations keep a server's whole identity (the target labels too), or, on the fleet's group panels,
    the (namespace, model) group; joins match on the target labels. This is what broke with two pods
    that both call their log `server`: `max by (engine, source, dp_rank)` showed one of them."""
    for g in groupings(expr):
        if g <= {"namespace", "model", "pool", "rule"}:
            assert FLEET_DASH in where and {"namespace", "model"} <= g, f"{where}: aggregates by {sorted(g)}"
        else:
            assert set(identity.TARGET) <= g, f"{where}: by/on ({', '.join(sorted(g))}) drops {sorted(set(identity.TARGET) - g)}"


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_legends_tell_servers_apart(name):
    """Graph legends name the pod and the target (tables show every label as a column)."""
    for p in panels(load(name)):
        if p["type"] == "table":
            continue
        for t in p["targets"]:
            leg = t["legendFormat"]
            if any(m.startswith("namespace_model") for m, _ in selectors(t["expr"])):
                assert "{{namespace}}" in leg and "{{model}}" in leg, (p["title"], leg)
            else:
                for label in ("namespace", "pod", "instance", "source"):
                    assert "{{" + label + "}}" in leg, (p["title"], leg)


def test_fleet_dashboard_reads_the_recording_rules():
    used = {m for _, e in exprs([FLEET_DASH]) for m, _ in selectors(e)}
    assert {r for r in RECORDED if r.startswith("namespace_model")} <= used, "recorded aggregates no fleet panel shows"
    assert "server:hybrid_cache_binding_pool:code" in used
    assert any(e.startswith("topk(") for _, e in exprs([FLEET_DASH])), "no top-offenders panel"


def test_optional_metrics_are_in_the_contract():
    assert set(OPTIONAL) <= set(CONTRACT)


def test_docs_describe_every_panel_variable_and_rule():
    import yaml

    doc = DOC.read_text()
    for name in build.DASHBOARDS:
        assert name in doc, f"docs/dashboards.md does not say how to import {name}"
        for p in panels(load(name)):
            assert p["title"] in doc, f"docs/dashboards.md does not describe panel {p['title']!r}"
        for var in VARIABLES[name]:
            assert f"**{var}**" in doc, f"docs/dashboards.md does not describe variable {var}"
    for f in ("alerts.yml", "recording.yml"):
        for g in yaml.safe_load((DASH / f).read_text())["groups"]:
            for r in g["rules"]:
                name = r.get("alert") or r["record"]
                assert name in doc, f"docs/dashboards.md does not describe {name}"
    assert "Import" in doc or "import" in doc
    assert "docs/dashboards.md" in (ROOT / "README.md").read_text(), "README.md does not link docs/dashboards.md"
