"""The rule catalogue (exporter/catalogues/rulebook.py) against everything that names a rule, both ways: its section in
docs/rules.md names exactly its flags, its alert's section in docs/runbook.md fixes it with exactly those flags,
its alert in dashboards/alerts.yml follows its finding, its scenario log fires it, its flags are the flag
catalogue's, and the tables derived from it are the ones the readers use."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exporter.advice import flags
from exporter.app import replay
from exporter.catalogues import rulebook
from exporter.diagnosis import history, memory, rules
from exporter.presentation import drawing, render, report
from parsers import events as ev

ROOT = Path(__file__).resolve().parents[2]
RULES_MD = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
ALERTS = [r for g in yaml.safe_load((ROOT / "dashboards" / "alerts.yml").read_text())["groups"] for r in g["rules"] if "alert" in r]
FLAG = re.compile(r"--[a-z][a-z-]+[a-z]|SGLANG_[A-Z_]+[A-Z]")
NOT_FLAGS = {"--rules-config"}  # options of the exporter itself


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    m = re.search(rf"^(#+) {re.escape(heading)}\s*$", text, re.M)
    assert m, f"no section {heading!r}"
    level = len(m.group(1))
    rest = text[m.end() :]
    nxt = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: nxt.start()] if nxt else rest


def _flags(text: str) -> set[str]:
    return set(FLAG.findall(text)) - NOT_FLAGS


def _actions(r: rulebook.Rule, expand: bool) -> set[str]:
    out = set()
    for names in r.actions.values():
        for n in names:
            if n != rulebook.POOL_SIDE:
                out.add(n)
            elif expand:  # the flags of either side (the storm is answered on the side of the pool that runs out)
                out |= set(rulebook.BY_ID["mamba_bound"].actions[rulebook.SGLANG]) | set(
                    rulebook.BY_ID["kv_bound"].actions[rulebook.SGLANG]
                )
    return out


def test_the_catalogue_is_well_formed():
    assert (rulebook.SGLANG, rulebook.VLLM) == (ev.SGLANG, ev.VLLM)
    for r in rulebook.RULES:
        assert r.kind in rulebook.KINDS and r.title and r.words and r.says
        assert r.pool in (None, "mamba", "kv", "requests")
        assert (r.shade is None) == (r.kind == rulebook.STARTUP), r.id  # a fact of the boot is said in words
        assert not r.strip or r.shade, r.id
        assert bool(r.alert) != bool(r.no_alert), f"{r.id}: an alert, or why none"
        assert set(r.actions) <= {rulebook.SGLANG, rulebook.VLLM}
    assert len(set(r.telling for r in rulebook.RULES)) == len(rulebook.RULES)
    # every rule's sentence takes the fields report.server_status gives it
    fields = dict.fromkeys(("kv", "mamba", "gap", "mamba_while", "load", "pools", "retracted", "vllm_state", "detail"), "x")
    for r in rulebook.RULES:
        for engine in (None, rulebook.SGLANG, rulebook.VLLM):
            r.says_for(engine).format_map(fields)


def test_the_readers_tables_are_the_catalogues():
    assert rules.RULE_IDS == rulebook.RULE_IDS and rules.SUSTAINED_RULES == rulebook.SUSTAINED_RULES
    assert history.SHADED_RULES == rulebook.SHADED_RULES
    assert list(drawing.RULE_WORDS) == list(rulebook.HEADLINE_ORDER) and drawing.SHADES == rulebook.SHADES
    assert set(render.BINDING_LABELS) == set(report.BINDING_WORDS) == set(rulebook.BINDING)
    m = memory.ServerMemory()
    m.fill({}, 5)
    assert set(m.hyst) == set(rulebook.SUSTAINED_RULES) | set(rulebook.WINDOWED_RULES)
    assert set(m.evidence) == set(m.episodes) == set(rulebook.RULE_IDS) and set(m.binding_seconds) == set(rulebook.BINDING)
    # the sustained rules' pools, in the order of a sample's conditions, are the binding categories
    assert rulebook.BINDING[:-1] == tuple(rulebook.BY_ID[r].pool for r in rulebook.SUSTAINED_RULES)


@pytest.mark.parametrize("rule", rulebook.RULES, ids=lambda r: r.id)
def test_each_rule_has_its_section_in_rules_md_naming_exactly_its_flags(rule):
    sec = _section(RULES_MD, f"`{rule.id}`")
    assert _flags(sec) == _actions(rule, expand=False), rule.id
    if rule.alert:
        assert rule.alert in sec and (rule.scenario in sec or not rule.scenario)


@pytest.mark.parametrize("rule", [r for r in rulebook.RULES if r.alert], ids=lambda r: r.id)
def test_the_runbook_fixes_its_alert_with_exactly_its_flags(rule):
    sec = _section(RUNBOOK, rule.alert)
    fix = sec[sec.index("**Fix.**") :]
    assert _flags(fix) == _actions(rule, expand=True), rule.id


@pytest.mark.parametrize("rule", [r for r in rulebook.RULES if r.alert], ids=lambda r: r.id)
def test_each_rule_has_an_alert_that_follows_its_finding(rule):
    (alert,) = [a for a in ALERTS if a["alert"] == rule.alert]
    assert f'hybrid_cache_finding{{rule="{rule.id}"}}' in alert["expr"]


def test_every_alert_on_a_finding_is_a_rules():
    named = {r.alert for r in rulebook.RULES}
    for a in ALERTS:
        for rid in re.findall(r'hybrid_cache_finding\{rule="(\w+)"\}', a["expr"]):
            assert rulebook.BY_ID[rid].alert == a["alert"], (a["alert"], rid)
    assert {a["alert"] for a in ALERTS if "hybrid_cache_finding" in a["expr"]} == named - {None}


@pytest.mark.parametrize("rule", rulebook.RULES, ids=lambda r: r.id)
def test_each_rule_fires_on_its_scenario(rule):
    path = ROOT / "fixtures" / "scenarios" / rule.scenario
    assert path.exists(), rule.scenario
    pipe, failed = replay([str(path)], None, None, None)
    assert not failed
    assert any(s.findings.get(rule.id) for src in pipe.sources.values() for s in src.servers.values()), rule.id


def test_the_flags_of_the_rules_are_the_flag_catalogues_both_ways():
    named: dict[str, set[str]] = {}
    for r in rulebook.RULES:
        for engine, names in r.actions.items():
            for n in names:
                if n == rulebook.POOL_SIDE:
                    continue
                e = flags.entry(n)
                assert e is not None, n
                assert engine in e.engines, (r.id, engine, n)
                named.setdefault(engine, set()).add(e.flag)
    for e in flags.CATALOGUE:
        if e.candidate is not None:
            for engine in e.engines:
                assert e.flag in named.get(engine, set()), f"{e.flag} ({engine}) answers no rule"


def test_the_derived_scenarios_are_current():
    r = subprocess.run([sys.executable, str(ROOT / "fixtures" / "scenarios" / "derive.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
