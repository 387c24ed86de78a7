"""Alert and recording rules: promtool check + promtool unit tests, coverage of every alert and every
recorded series, metadata, naming (level:metric:operations), and that every expression (and every
annotation query) names only metrics the exporter exposes (or the recording rules record)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from dashboards import identity
from dashboards.metrics import CONTRACT, SYNTHETIC, selectors
from dashboards.rules import RECORDING, advice_template, recorded, rules
from exporter.catalogues import rulebook

ROOT = Path(__file__).resolve().parents[2]
DASH = ROOT / "dashboards"
ALERTS = DASH / "alerts.yml"
RULE_FILES = [p for p in (ALERTS, DASH / "recording.yml") if p.exists()]
TEST_FILES = sorted((DASH / "tests").glob("*.yml"))
RUNBOOK = ROOT / "docs" / "runbook.md"
RUNBOOK_URL = "https://github.com/hybrid-cache-exporter/hybrid-cache-exporter/blob/main/docs/runbook.md#"
TARGET_LABELS = set(identity.TARGET)
RECORDED = recorded()


def promtool() -> str:
    """Path of promtool; skip without it, except in CI (CI=true) where its absence is a failure."""
    path = shutil.which("promtool")
    if path:
        return path
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("promtool is required in CI (apt-get install prometheus / make tools)")
    pytest.skip("promtool not installed")


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_check_rules():
    out = subprocess.run(
        [promtool(), "check", "rules", "--lint=all", "--lint-fatal", *map(str, RULE_FILES)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests():
    assert TEST_FILES, "no promtool unit tests under dashboards/tests/"
    out = subprocess.run([promtool(), "test", "rules", *map(str, TEST_FILES)], capture_output=True, text=True, timeout=120, cwd=DASH)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_is_unit_tested_firing_and_silent():
    firing: set[str] = set()
    silent: set[str] = set()
    for f in TEST_FILES:
        for t in yaml.safe_load(f.read_text())["tests"]:
            for a in t.get("alert_rule_test", []):
                (firing if a.get("exp_alerts") else silent).add(a["alertname"])
    names = {r["alert"] for r in alert_rules()}
    assert names - firing == set(), "alerts without a firing test"
    assert names - silent == set(), "alerts without a not-firing test"
    assert (firing | silent) - names == set(), "tests for alerts that do not exist"


def test_required_alerts_present():
    names = {r["alert"] for r in alert_rules()}
    for required in (
        "HybridCacheMambaBound",
        "HybridCacheKVBound",
        "HybridCacheMambaCappedAtStartup",
        "HybridCacheRequestCapBound",
        "HybridCacheRetractionStorm",
        "HybridCacheFormatDrift",
        "HybridCacheLogStale",
        "HybridCacheExporterDown",
        "HybridCacheEngineDied",  # the on-call person's: an engine that died, a stalled server with requests held
        "HybridCacheServerStalled",
    ):
        assert required in names


def test_alert_metadata_and_runbook_anchors():
    runbook = RUNBOOK.read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#{1,6} (.+)$", runbook, re.M)}
    seen = set()
    for r in alert_rules():
        name = r["alert"]
        assert name not in seen, f"duplicate alert {name}"
        seen.add(name)
        assert r["labels"]["severity"] in {"critical", "warning", "info"}, name
        ann = r["annotations"]
        assert ann.get("summary") and ann.get("description"), name
        url = ann["runbook_url"]
        assert url.startswith(RUNBOOK_URL), url
        assert url[len(RUNBOOK_URL) :] in anchors, f"{name}: runbook anchor {url} missing in docs/runbook.md"
        assert url[len(RUNBOOK_URL) :] == name.lower()


def test_the_alerts_of_the_rule_catalogue_name_its_first_recommendation():
    """Each alert of a diagnosis rule (exporter/catalogues/rulebook.py) follows its finding and ends its description with the
    finding's rank-1 recommendation (dashboards/rules.py::advice_template): no flag or value spelled by hand, which
    could contradict another alert's or break a request (issue 21.1/21.2)."""
    by_alert = {r.alert: r.id for r in rulebook.RULES if r.alert}
    seen = set()
    for r in alert_rules():
        rule = by_alert.get(r["alert"])
        if rule is None:
            continue
        seen.add(r["alert"])
        desc = r["annotations"]["description"]
        tail = advice_template(rule)
        assert desc.endswith(tail), r["alert"]
        assert not re.search(r"--[a-z]|SGLANG_", desc[: -len(tail)]), f"{r['alert']}: a flag spelled by hand"
        assert f'hybrid_cache_finding{{rule="{rule}"}}' in r["expr"], r["alert"]
    assert seen == set(by_alert)


def test_fallbacks_only_where_no_finding_is_exported():
    """A raw-gauge fallback applies to a server without the rule's finding series (``unless on(...) finding``):
    with the series, the alert is the finding (tests/dashboards/test_alert_scenarios.py proves it on every scenario)."""
    for r in alert_rules():
        expr = r["expr"]
        m = re.search(r'hybrid_cache_finding\{rule="(\w+)"\}\[5m\]\) == 1\s+or', expr)
        if m:
            assert re.search(rf'unless on \([^)]*\) hybrid_cache_finding\{{rule="{m.group(1)}"\}}\s*\)', expr), r["alert"]


def _exprs() -> list[tuple[str, str]]:
    out = []
    for r in alert_rules():
        out.append((r["alert"], r["expr"]))
        for text in r["annotations"].values():
            out += [(r["alert"] + " annotation", q) for q in re.findall(r"`([^`]*)`", text) if "{" in q]
    return out


def _recording_exprs() -> list[tuple[str, str]]:
    return [(r["record"], r["expr"]) for r in rules(RECORDING)]


@pytest.mark.parametrize(("where", "expr"), _exprs() + _recording_exprs())
def test_rules_use_only_exported_metrics(where, expr):
    sels = selectors(expr)
    assert sels, where
    known = {**CONTRACT, **RECORDED}
    for name, labels in sels:
        assert name in known or name in SYNTHETIC, f"{where}: {name} is not a metric the exporter exposes"
        if name in known:
            unknown = labels - known[name] - TARGET_LABELS
            assert not unknown, f"{where}: {name} has no label(s) {sorted(unknown)}"


def test_recording_rule_names_and_coverage():
    """level:metric:operations names; the level lists the labels the result keeps; every recorded
    series has a promtool expectation."""
    tested = set()
    for f in TEST_FILES:
        for t in yaml.safe_load(f.read_text())["tests"]:
            for e in t.get("promql_expr_test", []):
                tested |= {name for name, _ in selectors(e["expr"])}
    for r in rules(RECORDING):
        name = r["record"]
        assert re.fullmatch(r"[a-z_]+:hybrid_cache_[a-z_]+:[a-z0-9_]+", name), name
        assert name in tested, f"{name} has no promql_expr_test in dashboards/tests/"
        level = name.split(":")[0]
        if level != "server":
            by = re.search(r"\b(?:count|sum|avg|max|min) by \(([^)]*)\)", r["expr"])
            assert by and {x.strip() for x in by.group(1).split(",")} == RECORDED[name], (name, r["expr"])


@pytest.mark.parametrize(("where", "expr"), _exprs() + _recording_exprs())
def test_joins_keep_the_target_labels(where, expr):
    """A join on (instance, job, engine, source) alone would match two pods of a DaemonSet exporter or
    many-to-many; every on(...) that names a server keeps all target labels."""
    for m in re.finditer(r"\bon\s*\(([^)]*)\)", expr):
        labels = {x.strip() for x in m.group(1).split(",")}
        assert set(identity.TARGET) <= labels, f"{where}: on ({m.group(1)}) drops {sorted(set(identity.TARGET) - labels)}"


def test_selector_parser():
    got = selectors('sum by (a) (rate(foo_total{x="1", y=~"$v"}[5m])) / bar * on(a) group_left(c) max_over_time(baz[1h]) and time() > 3')
    assert got == [("foo_total", frozenset({"x", "y"})), ("bar", frozenset()), ("baz", frozenset())]
