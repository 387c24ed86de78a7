"""The metric contract (exporter/catalogues/contract.py) is what the exporter emits, no more and no less.

Every family the collector emits on every fixture is in the contract with that type, help and
label set, and from an engine the contract names; every family of the contract is emitted by some
fixture (or, for the serve-only families, by a real ``serve`` on a fixture); no module but the
contract spells a metric name; the generated reference page is current.
"""

from __future__ import annotations

import ast
import glob
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import exposition, new_pipeline, replay
from exporter.catalogues import contract as C
from exporter.reading.offline import replay_files

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted(glob.glob(str(ROOT / "fixtures" / "**" / "*.log"), recursive=True))
# a draft model's KV pool: no fixture log has a speculative run with a separate draft pool
DRAFT_LINE = (
    "[2026-01-01 00:00:00 TP0] Post-capture KV sizing: draft KV cache allocated. dtype: bfloat16, #tokens: 81920, KV size: 1.25 GB\n"
)


def _families(text: str) -> dict[str, list]:
    """sample name -> [(family type, help, labels of the sample), ...]"""
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((fam.type, fam.documentation, s.labels))
    return out


def _check(name: str, seen: list, where: str) -> None:
    m = C.BY_NAME.get(name)
    assert m is not None, f"{where}: {name} is emitted but not in exporter/catalogues/contract.py"
    for typ, doc, labels in seen:
        # the text format reads an info family back as a gauge
        assert typ == (C.GAUGE if m.type == C.INFO else m.type), f"{where}: {name} is a {typ}, the contract says {m.type}"
        assert doc == m.help, f"{where}: {name} help differs from the contract"
        assert set(labels) == set(m.all_labels), f"{where}: {name} labels {sorted(labels)} != contract {sorted(m.all_labels)}"
        if "engine" in labels:
            assert labels["engine"] in m.engines, f"{where}: {name} from {labels['engine']}, the contract says {m.engines} only"


def test_contract_is_well_formed():
    assert len({m.name for m in C.METRICS}) == len(C.METRICS)
    for m in C.METRICS:
        assert m.type in (C.GAUGE, C.COUNTER, C.INFO) and m.help and m.source and m.group
        assert m.name.endswith("_total") == (m.type == C.COUNTER), m.name
        assert m.name.endswith("_info") or m.type != C.INFO, m.name
        assert m.name.startswith(C.PREFIX) or m.group == "process", m.name
        assert set(m.engines) <= {"sglang", "vllm"} and m.engines
        if m.group in ("runtime", "capacity", "counters") and m in C.RUNTIME + C.CAPACITY + C.COUNTERS:
            assert m.key, m.name
    assert all(m.event_field for m in C.RUNTIME)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(Path(p).relative_to(ROOT / "fixtures")))
def test_every_emitted_family_is_in_the_contract(path):
    pipe, _ = replay([path], None, None, None)
    for name, seen in _families(exposition(pipe).decode()).items():
        _check(name, seen, Path(path).name)


LOG_LABELS = {label for m in C.LOG_METRICS for label in m.all_labels}


def test_every_label_of_the_log_has_a_bound_and_every_bound_a_label():
    """Issue 29, item 2: each label of the log's families has its bound in the contract, and the
    contract bounds no label the log's families do not have."""
    assert set(C.LABEL) == LOG_LABELS
    assert len(C.LABEL) == len(C.LABELS)
    for lab in C.LABELS:
        assert 0 < lab.max_len <= 255 and lab.about, lab.name
    assert {label for label, _ in C.SERVER_INFO_KEYS} | {"version"} == set(C.SERVER_INFO.info_labels)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(Path(p).relative_to(ROOT / "fixtures")))
def test_every_label_value_is_within_its_bound(path):
    """Issue 29, item 2: no label value of any fixture's exposition is longer than the contract
    allows or has characters no engine writes there (a list's repr, glued text)."""
    pipe, _ = replay([path], None, None, None)
    for fam in text_string_to_metric_families(exposition(pipe).decode()):
        for s in fam.samples:
            for name, value in s.labels.items():
                assert C.LABEL[name].admits(value), f"{Path(path).name}: {s.name}{{{name}={value!r}}} is out of the label's bound"


def test_every_family_of_the_log_is_emitted_by_some_fixture():
    emitted: set[str] = set()
    for path in FIXTURES:
        pipe, _ = replay([path], None, None, None)
        emitted |= set(_families(exposition(pipe).decode()))
    pipe = new_pipeline()
    replay_files(pipe, [str(ROOT / "fixtures" / "sglang" / "v0.5.19.log")], None)
    pipe.feed_text("v0.5.19", DRAFT_LINE)
    pipe.finish()
    text = exposition(pipe).decode()
    for name, seen in _families(text).items():
        _check(name, seen, "draft line")
    emitted |= set(_families(text))
    # a source over its --max-dp-ranks: a second DP rank beyond a limit of 1
    pipe = new_pipeline(max_dp_ranks=1)
    replay_files(pipe, [str(ROOT / "fixtures" / "sglang" / "dp-attention.log")], None)
    pipe.finish()
    text = exposition(pipe).decode()
    for name, seen in _families(text).items():
        _check(name, seen, "dp-attention.log, --max-dp-ranks 1")
    emitted |= set(_families(text))
    missing = sorted(m.name for m in C.LOG_METRICS if m.name not in emitted)
    assert not missing, f"in the contract but never emitted: {missing}"


def test_serve_emits_exactly_its_families(tmp_path):
    """A real Service (tailer, self-metrics, process collector, HTTP) on a fixture."""
    from exporter.serve import ServeConfig, Service

    log = tmp_path / "demo.log"
    log.write_bytes((ROOT / "fixtures" / "demo" / "sglang-mamba-bound.log").read_bytes())
    svc = Service(ServeConfig(listen="127.0.0.1:0", files=[("demo", str(log))], from_beginning=True, positions=str(tmp_path / "pos.json")))
    svc.start()
    try:
        port = svc.server.server_address[1]
        done = threading.Event()
        text = ""
        for _ in range(200):  # bounded: the fixture is read in well under a second
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                text = r.read().decode()
            if "hybrid_cache_finding{" in text and 'hybrid_cache_exporter_read_lag_bytes{source="demo"} 0.0' in text:
                done.set()
                break
            done.wait(0.05)
        assert done.is_set(), "serve did not read the fixture"
        fams = _families(text)
        for name, seen in fams.items():
            _check(name, seen, "serve")
        missing = sorted(m.name for m in C.SELF + C.PROCESS if m.name not in fams and not m.absent)
        assert not missing, f"serve does not emit {missing}"
        # name[] filtering (public prometheus_client API in web.py)
        url = f"http://127.0.0.1:{port}/metrics?name[]={C.FINDING.name}&name[]={C.SOURCE_UP.name}"
        with urllib.request.urlopen(url, timeout=10) as r:
            assert set(_families(r.read().decode())) == {C.FINDING.name, C.SOURCE_UP.name}
    finally:
        svc.stop()


def _string_constants(path: Path):
    """String literals of a module that are not docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def test_no_metric_name_outside_the_contract():
    """Collectors, state and web read names from the contract; none spells one. (The dashboards
    package writes PromQL, which names metrics by nature; tests/dashboards/test_dashboards.py and
    tests/dashboards/test_alerts.py check every name it queries against the contract.)"""
    bad = []
    for pkg in ("exporter", "parsers"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.name == "contract.py" or "tests" in path.parts:
                continue
            for line, value in _string_constants(path):
                # 'hybrid_cache_exporter' alone (or dotted) is the logger namespace, not a metric
                if [n for n in re.findall(r"hybrid_cache_[a-z0-9_]*", value) if n != "hybrid_cache_exporter"]:
                    bad.append(f"{path.relative_to(ROOT)}:{line}: {value[:80]!r}")
    assert not bad, "metric names outside exporter/catalogues/contract.py:\n" + "\n".join(bad)


def test_reference_page_is_current():
    """docs/metrics.md is generated from the contract (`make docs`)."""
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_metrics.py"), "--check"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
