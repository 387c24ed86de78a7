"""The alerts agree with the findings (issue 21.1): a ``promtool test rules`` case generated from every scenario log.

Each scenario log is fed to the exporter line by line; at every minute of log time the exposition is taken (what
a scrape would see then), so the series are the exporter's own. After the last line the server is held in its
final state for 20 more minutes (gauges as they were, counters going up at their last minute's rate), long enough
for every ``for:`` and ``max_over_time`` window. At the end, the alerts of the rule catalogue that fire must be
exactly the alerts of the findings the exporter reports live, both directions, on every scenario.

A second case per scenario drops the ``hybrid_cache_finding`` series (an exporter without its rules): the raw-gauge
fallbacks alone may fire no alert whose finding the exporter does not report (the request-cap fallback on a
mamba-capped server did). The alerts' annotations are left out of the generated cases (a copy of the rules without
them): their text is tested in dashboards/tests/alerts_test.yml and against a real Prometheus in tests/e2e.

And no two alerts that fire on one server recommend different values for one flag (the exporter computes one value
per flag per server; the descriptions show the exporter's values only)."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from test_alerts import ALERTS, promtool

from exporter.app import exposition, new_pipeline
from exporter.catalogues import rulebook
from exporter.reading.reader import read_lines

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "fixtures" / "scenarios"
SCENARIOS = sorted(p.name for p in SCEN.glob("*.log"))
TARGET = {"job": "hybrid-cache-exporter", "instance": "gpu-0:19833"}
HOLD_MINUTES = 20
# the series an alert reads (the rest of an exposition only makes the test file longer)
READ = (
    "hybrid_cache_finding",
    "hybrid_cache_recommendation_info",
    "hybrid_cache_mamba_usage_ratio",
    "hybrid_cache_kv_usage_ratio",
    "hybrid_cache_queued_requests",
    "hybrid_cache_running_requests",
    "hybrid_cache_max_running_requests",
    "hybrid_cache_requested_max_running_requests",
    "hybrid_cache_mamba_capacity_slots",
    "hybrid_cache_mamba_slots_per_request",
    "hybrid_cache_decode_batches_total",
    "hybrid_cache_stats_lines_total",
    "hybrid_cache_preempted_requests_total",
)


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in READ:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@cache
def scrapes(name: str) -> tuple[list[dict], dict[str, int], list[tuple[str, str, str]]]:
    """The exposition at every minute of the log's time (fed line by line), the findings live at the end (rule ->
    1) and the exported recommendations at the end ``(rule, flag, value)``."""
    pipe = new_pipeline()
    src = name.rsplit(".", 1)[0]
    out: list[dict] = []
    start = None
    for line in read_lines(str(SCEN / name)):
        pipe.feed(src, line)
        ts = pipe.sources[src].last_ts
        if ts is None:
            continue
        if start is None:
            start = ts
        while start + 60 * len(out) <= ts:
            out.append(_samples(exposition(pipe).decode()))
    pipe.finish()
    out.append(_samples(exposition(pipe).decode()))
    live, recs = {}, []
    for (n, labels), v in out[-1].items():
        d = dict(labels)
        if n == "hybrid_cache_finding" and v == 1:
            live[d["rule"]] = 1
        elif n == "hybrid_cache_recommendation_info":
            recs.append((d["rule"], d["flag"], d["value"]))
    return out, live, recs


def _fmt(v: float | None) -> str:
    return "_" if v is None else repr(float(v))


def series(name: str, with_findings: bool) -> list[dict]:
    """promtool input series: the scrapes, then HOLD_MINUTES of the final state."""
    snaps = scrapes(name)[0]
    keys = sorted({k for s in snaps for k in s})
    out = []
    for key in keys:
        n, labels = key
        if n == "hybrid_cache_finding" and not with_findings:
            continue
        vals = [s.get(key) for s in snaps]
        last = vals[-1]
        step = 0.0
        if n.endswith("_total") and last is not None:
            prev = next((v for v in reversed(vals[:-1]) if v is not None), last)
            step = max(0.0, last - prev) or 1.0  # the server keeps printing as it did
        vals += [None if last is None else last + step * (i + 1) for i in range(HOLD_MINUTES)]
        sel = ",".join(f'{k}="{v}"' for k, v in sorted({**dict(labels), **TARGET}.items()))
        out.append({"series": f"{n}{{{sel}}}", "values": " ".join(_fmt(v) for v in vals)})
    return out


def catalogue_alerts() -> dict[str, dict]:
    """The alerts of the rule catalogue as dashboards/alerts.yml has them (alert name -> rule)."""
    rules = {r["alert"]: r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"] if "alert" in r}
    return {r.alert: rules[r.alert] for r in rulebook.RULES if r.alert}


def expected(name: str, with_findings: bool) -> list[dict]:
    snaps, live, _ = scrapes(name)
    minutes = len(snaps) + HOLD_MINUTES - 1
    src = name.rsplit(".", 1)[0]
    engine = next(dict(k[1])["engine"] for s in snaps for k in s if "engine" in dict(k[1]))
    tests = []
    for alert, rule in catalogue_alerts().items():
        fires = rulebook.BY_ID[next(r.id for r in rulebook.RULES if r.alert == alert)].id in live
        exp = []
        if fires and with_findings:
            exp = [{"exp_labels": {**rule["labels"], **TARGET, "engine": engine, "source": src, "dp_rank": "0"}}]
        tests.append({"eval_time": f"{minutes}m", "alertname": alert, "exp_alerts": exp})
    return tests


def _rules_without_annotations(tmp: Path) -> Path:
    doc = yaml.safe_load(ALERTS.read_text())
    for g in doc["groups"]:
        for r in g["rules"]:
            r.pop("annotations", None)
    p = tmp / "alerts.yml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def test_every_scenario_fires_the_alerts_of_its_findings(tmp_path):
    """With the exporter's series, the alerts that fire are the live findings' alerts, both directions."""
    rules = _rules_without_annotations(tmp_path)
    cases = [
        {"name": f"{n}: alerts = findings", "interval": "1m", "input_series": series(n, True), "alert_rule_test": expected(n, True)}
        for n in SCENARIOS
    ]
    (tmp_path / "scenarios_test.yml").write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": cases}))
    r = subprocess.run([promtool(), "test", "rules", "scenarios_test.yml"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]


def test_the_raw_fallbacks_fire_no_alert_without_its_finding(tmp_path):
    """Without the finding series, no fallback fires for a finding the exporter does not report: each alert that
    fires (promtool's 'got') is one of the live findings'. The case expects none and reads what promtool got."""
    rules = _rules_without_annotations(tmp_path)
    bad = []
    for n in SCENARIOS:
        _, live, _ = scrapes(n)
        allowed = {r.alert for r in rulebook.RULES if r.id in live}
        case = {"name": n, "interval": "1m", "input_series": series(n, False), "alert_rule_test": expected(n, False)}
        f = tmp_path / f"{n}.yml"
        f.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [case]}))
        out = subprocess.run([promtool(), "test", "rules", f.name], capture_output=True, text=True, timeout=120, cwd=tmp_path).stdout
        fired = {line.split(",", 1)[0].split("alertname: ", 1)[1] for line in out.splitlines() if "alertname: " in line}
        if fired - allowed:
            bad.append((n, sorted(fired - allowed)))
    assert not bad, bad


@pytest.mark.parametrize("name", SCENARIOS)
def test_firing_alerts_on_one_server_agree_on_every_flag(name):
    _, live, recs = scrapes(name)
    values: dict[str, set[str]] = {}
    for rule, flag, value in recs:
        assert rule in live, (rule, flag)  # a recommendation only for a live finding (its alert fires)
        values.setdefault(flag, set()).add(value)
    assert all(len(v) == 1 for v in values.values()), values


def test_every_rule_of_the_catalogue_is_tested_by_a_scenario():
    live = set().union(*(scrapes(n)[1] for n in SCENARIOS))
    assert {r.id for r in rulebook.RULES if r.alert} <= live
