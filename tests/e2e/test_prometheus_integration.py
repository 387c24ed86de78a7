"""End to end with a real Prometheus and a small fleet: exporters -> scrape -> rules -> HTTP API.

Four ``hybrid-cache-exporter serve`` processes, each tailing one scenario log that it calls
``server`` (like every sidecar of the shipped manifest would), behind one ``prometheus`` that
scrapes them every second and evaluates the shipped recording rules and a copy of the alerts:

    team-a  pod sglang-mamba-0     SGLang, mamba-bound
    team-a  pod sglang-balanced-0  SGLang, balanced pools
    team-b  pod sglang-kv-0        SGLang, KV-bound and retracting
    (VM)    no namespace/pod       vLLM at its request cap (--label cluster=lab)

The pods' ``namespace``/``pod``/``container``/``instance``/``job`` labels are set by the scrape
config's relabelling from per-target meta labels, as a PodMonitor does; the VM has only ``job`` and
``instance`` (and the exporter's own ``--label cluster=lab``). Only those labels tell the four apart.

How the scenario time problem is solved: the fixtures' log timestamps are in the past and the
alerts have ``for:`` durations of minutes, so the test starts the exporters on empty files and then
**writes the fixture lines live**, in chunks, while Prometheus scrapes (counters grow between scrapes
like on a busy server), and evaluates a **copy of the alerts with every ``for:`` shortened to 2s**.

Then, via the HTTP API, for **every panel query of both dashboards** (taken from the generated JSON):
  * with every variable at its All value (``.*``) it returns data (queries built only on
    ``OPTIONAL`` metrics may be empty), every series belongs to exactly one exporter (by its target
    labels, or for the fleet's aggregates by its namespace and model), at least three exporters are
    told apart, and no two series of one query render the same legend;
  * restricted to one exporter (its job/namespace/pod/instance, or its namespace/model, as a user
    picking it in the variables would) it returns exactly that exporter's share of the All result:
    nothing was merged across exporters and nothing is lost.
It also checks the recording rules per server and per namespace/model, that
``HybridCacheMambaBound`` fires for the mamba-bound pod only, and (issue 21.1) that per exporter the alerts
that fire are exactly its live findings' alerts, each description starting with the finding's first
recommendation as the exporter ranks it and naming no value that carries a caveat. Waits are bounded; processes are
killed in ``finally``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from test_serve_support import free_port

from dashboards import identity
from dashboards.metrics import OPTIONAL, metric_names
from dashboards.rules import RECORDING, rules
from exporter.catalogues import rulebook

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "fixtures" / "scenarios"
CHUNKS = 8  # fixture lines are appended in this many chunks ...
CHUNK_PAUSE = 0.5  # ... this many seconds apart (Prometheus scrapes every 1s)
SHORT_FOR = "2s"
SERVER_DASH, FLEET_DASH = "hybrid-cache.json", "hybrid-cache-fleet.json"
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m", "${datasource}": ""}
IDENTITY = identity.TARGET  # cluster, job, namespace, pod, container, instance


@dataclass
class Exporter:
    key: str
    fixture: Path
    job: str
    instance: str
    namespace: str = ""
    pod: str = ""
    container: str = ""
    cluster: str = ""  # set on the VM with --label, as docs/dashboards.md suggests
    port: int = 0
    log: Path = Path()
    model: str = ""  # read back from Prometheus (hybrid_cache_server_info)
    labels: dict = field(default_factory=dict)

    def ident(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in (*IDENTITY, "model")}


def fleet() -> list[Exporter]:
    pod = {"container": "hybrid-cache-exporter"}
    return [
        Exporter(
            "mamba", SCEN / "sglang-mamba-bound.log", "team-a/hybrid-cache-exporter", "10.0.0.1:19833", "team-a", "sglang-mamba-0", **pod
        ),
        Exporter(
            "balanced", SCEN / "sglang-balanced.log", "team-a/hybrid-cache-exporter", "10.0.0.2:19833", "team-a", "sglang-balanced-0", **pod
        ),
        Exporter("kv", SCEN / "sglang-kv-bound.log", "team-b/hybrid-cache-exporter", "10.0.1.1:19833", "team-b", "sglang-kv-0", **pod),
        Exporter("vm", SCEN / "vllm-max-num-seqs.log", "hybrid-cache-exporter", "gpu-7:19833", cluster="lab"),
    ]


in_ci = os.environ.get("CI", "").lower() == "true"


def need(ok: bool, why: str) -> None:
    if not ok:
        if in_ci:
            pytest.fail(why + " (required in CI)")
        pytest.skip(why)


def http_get(url: str, timeout: float = 3.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - localhost only
        return r.read()


def stop_all(procs: list[subprocess.Popen]) -> None:
    """Stop ``procs`` (SIGTERM, SIGKILL after 10 s) and reap them."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)


def wait_for(what: str, fn, timeout: float, procs: list[subprocess.Popen], interval: float = 0.25):
    """Poll ``fn`` until it returns a truthy value; fail fast when one of ``procs`` died."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"{what}: {p.args[0]} exited with {p.returncode}")
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - keep polling on connection errors
            last_exc = e
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc})" if last_exc else ""))


def exporter_cmd() -> list[str]:
    script = Path(sys.executable).with_name("hybrid-cache-exporter")
    if script.exists():
        return [str(script)]
    found = shutil.which("hybrid-cache-exporter")
    return [found] if found else [sys.executable, "-m", "exporter"]


def shortened_alerts(dst: Path) -> None:
    doc = yaml.safe_load((ROOT / "dashboards" / "alerts.yml").read_text())
    for g in doc["groups"]:
        for r in g["rules"]:
            if "for" in r:
                r["for"] = SHORT_FOR
    dst.write_text(yaml.safe_dump(doc, sort_keys=False))


def scrape_config(exporters: list[Exporter]) -> dict:
    """One job; per-target meta labels relabelled into the target labels, like a PodMonitor's generated
    relabel_configs (an empty meta label sets nothing: the VM gets no namespace/pod/container)."""
    targets = []
    for e in exporters:
        meta = {"__meta_job": e.job, "__meta_instance": e.instance}
        meta.update({f"__meta_{k}": getattr(e, k) for k in ("namespace", "pod", "container") if getattr(e, k)})
        targets.append({"targets": [f"127.0.0.1:{e.port}"], "labels": meta})
    relabel = [
        {"source_labels": [f"__meta_{k}"], "regex": "(.+)", "target_label": k, "replacement": "$1", "action": "replace"}
        for k in ("job", "instance", "namespace", "pod", "container")
    ]
    return {"job_name": "fleet", "static_configs": targets, "relabel_configs": relabel}


def panel_targets(name: str) -> list[dict]:
    d = json.loads((ROOT / "dashboards" / name).read_text())
    out = []
    for p in d["panels"]:
        for t in p.get("targets", []):
            expr = t["expr"]
            for k, v in GRAFANA_VARS.items():
                expr = expr.replace(k, v)
            out.append({"title": p["title"], "type": p["type"], "expr": expr, "legend": t.get("legendFormat", "")})
    return out


def variables(name: str) -> list[str]:
    d = json.loads((ROOT / "dashboards" / name).read_text())
    return [v["name"] for v in d["templating"]["list"] if v["type"] == "query"]


def substitute(expr: str, values: dict[str, str]) -> str:
    """What Grafana sends: ``$var`` replaced by the regex-escaped value (or ``.*`` for All); longest names first."""
    for var in sorted(values, key=len, reverse=True):
        expr = expr.replace(f"${var}", values[var])
    return expr


def promql_regex(value: str) -> str:
    return re.escape(value).replace("\\", "\\\\")


def render_legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


class Prom:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def api(self, path: str, **params) -> dict:
        q = urllib.parse.urlencode(params)
        body = json.loads(http_get(f"{self.base}/api/v1/{path}" + (f"?{q}" if q else "")))
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list:
        return self.api("query", query=expr)["result"]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["alerts"]


def owners(series: dict, exporters: list[Exporter]) -> list[Exporter]:
    """The exporters a result series can come from. A series lacking ``namespace`` comes from a target
    without one (every query keeps it); the other identity labels and ``model`` must match where present."""
    out = []
    for e in exporters:
        if series.get("namespace", "") != e.namespace:
            continue
        if all(series[k] == v for k, v in e.ident().items() if k in series and k != "namespace"):
            out.append(e)
    return out


def base_metrics(expr: str) -> set[str]:
    """The exporter metrics ``expr`` reads, through the recording rules it uses."""
    recorded = {r["record"]: r["expr"] for r in rules(RECORDING)}
    out: set[str] = set()
    for name in metric_names(expr):
        out |= base_metrics(recorded[name]) if name in recorded else {name}
    return out


def check_dashboard(prom: Prom, name: str, exporters: list[Exporter]) -> tuple[list[str], list[str]]:
    """Problems and skipped (optional, empty) queries of one dashboard; see the module docstring."""
    problems, skipped = [], []
    all_values = {v: ".*" for v in variables(name)}
    for t in panel_targets(name):
        where = f"{name}: {t['title']}: {t['expr'][:160]}"
        res = prom.query(substitute(t["expr"], all_values))
        if not res:
            names = base_metrics(t["expr"])
            (skipped if names and names <= set(OPTIONAL) else problems).append(f"no data: {where}")
            continue
        labelsets = [s["metric"] for s in res]
        told = set()
        for s in labelsets:
            who = owners(s, exporters)
            if len(who) != 1:
                problems.append(f"series {s} belongs to {[e.key for e in who]} (not exactly one exporter): {where}")
            told |= {e.key for e in who}
            if name == SERVER_DASH and "instance" not in s:
                problems.append(f"series {s} has no instance: {where}")
        if len(told) < 3 and not base_metrics(t["expr"]) & set(OPTIONAL):
            problems.append(f"only {sorted(told)} told apart: {where}")
        if t["type"] != "table":
            legends = [render_legend(t["legend"], s) for s in labelsets]
            if len(set(legends)) != len(legends):
                problems.append(f"legends collide {sorted(legends)}: {where}")
        # one exporter selected in the variables -> exactly its share of the All result
        union = []
        for e in exporters:
            pick = dict(all_values)
            if name == SERVER_DASH:
                pick.update({k: promql_regex(getattr(e, k)) for k in ("job", "namespace", "pod", "instance")})
            else:
                pick.update({"namespace": promql_regex(e.namespace), "model": promql_regex(e.model)})
            mine = [s["metric"] for s in prom.query(substitute(t["expr"], pick))]
            if any(owners(s, exporters) != [e] for s in mine):
                problems.append(f"{e.key} selected, other exporters' series returned: {where}")
            union += mine
        key = lambda s: sorted(s.items())  # noqa: E731
        if sorted(map(key, union)) != sorted(map(key, labelsets)):
            problems.append(f"per-exporter results do not add up to the All result: {where}")
    return problems, skipped


def test_fleet_dashboards_recording_rules_and_alerts_against_real_prometheus(tmp_path):
    need(shutil.which("prometheus") is not None, "prometheus not installed (apt-get install prometheus)")
    exporters = fleet()
    for e in exporters:
        need(e.fixture.exists(), f"fixture {e.fixture} missing")
        e.port, e.log = free_port(), tmp_path / f"{e.key}.log"
        e.log.write_bytes(b"")
    prom_port = free_port()
    alerts = tmp_path / "alerts.yml"
    shortened_alerts(alerts)
    (tmp_path / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
                "rule_files": [str(ROOT / "dashboards" / "recording.yml"), str(alerts)],
                "scrape_configs": [scrape_config(exporters)],
            }
        )
    )

    procs: list[subprocess.Popen] = []
    errs = []
    try:
        for e in exporters:
            errs.append(open(tmp_path / f"exporter-{e.key}.err", "wb"))  # noqa: SIM115
            cmd = exporter_cmd() + ["serve", "--web.listen-address", f"127.0.0.1:{e.port}", "--from-beginning", "--log", f"server={e.log}"]
            cmd += ["--label", f"cluster={e.cluster}"] if e.cluster else []
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errs[-1]))
        errs.append(open(tmp_path / "prometheus.err", "wb"))  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                    "--log.level=warn",
                ],
                stdout=subprocess.DEVNULL,
                stderr=errs[-1],
            )
        )
        prom = Prom(prom_port)
        for e in exporters:
            wait_for(
                f"exporter {e.key} /metrics",
                lambda e=e: b"hybrid_cache_exporter" in http_get(f"http://127.0.0.1:{e.port}/metrics"),
                20,
                procs,
            )
        wait_for("prometheus ready", lambda: http_get(f"{prom.base}/-/ready"), 20, procs)
        wait_for("every target scraped", lambda: len([s for s in prom.query("up == 1")]) == len(exporters), 15, procs)

        # the target labels came out as a PodMonitor would set them
        ups = {s["metric"]["instance"]: s["metric"] for s in prom.query("up")}
        for e in exporters:
            got = ups[e.instance]
            target = [k for k in IDENTITY if k != "cluster"]  # cluster comes from the exporter (--label), not the target
            assert {k: got.get(k, "") for k in target} == {k: getattr(e, k) for k in target}, got

        # write the scenarios live, like servers printing them
        chunks = {}
        for e in exporters:
            lines = e.fixture.read_bytes().splitlines(keepends=True)
            n = -(-len(lines) // CHUNKS)
            chunks[e.key] = [b"".join(lines[i : i + n]) for i in range(0, len(lines), n)]
        for i in range(CHUNKS):
            for e in exporters:
                if i < len(chunks[e.key]):
                    with open(e.log, "ab") as f:
                        f.write(chunks[e.key][i])
            time.sleep(CHUNK_PAUSE)

        def caught_up() -> bool:
            lag = prom.query("max(hybrid_cache_exporter_read_lag_bytes)")
            parsed = prom.query('count(sum by (instance) (hybrid_cache_exporter_lines_total{outcome="parsed"}) > 0)')
            rec = prom.query("count(server:hybrid_cache_binding_pool:code)")
            n = len(exporters)
            return (
                bool(lag and parsed and rec)
                and float(lag[0]["value"][1]) == 0
                and int(parsed[0]["value"][1]) == n
                and int(rec[0]["value"][1]) == n
            )

        wait_for("exporters to read every scenario and the recording rules to see them", caught_up, 30, procs)
        # the fixtures all name their source `server`: only the target labels tell them apart
        assert {s["metric"]["source"] for s in prom.query("hybrid_cache_server_info")} == {"server"}
        for s in prom.query("hybrid_cache_server_info"):
            e = next(x for x in exporters if x.instance == s["metric"]["instance"])
            e.model = s["metric"].get("model", "")
        assert [s["metric"]["instance"] for s in prom.query('hybrid_cache_server_info{cluster="lab"}')] == ["gpu-7:19833"]
        groups = {(e.namespace, e.model) for e in exporters}
        assert len(groups) == len(exporters), f"the fleet layout needs one exporter per namespace/model: {groups}"

        def mamba_firing() -> bool:
            return any(
                a["labels"]["alertname"] == "HybridCacheMambaBound"
                and a["labels"].get("pod") == "sglang-mamba-0"
                and a["state"] == "firing"
                for a in prom.alerts()
            )

        wait_for("HybridCacheMambaBound firing for the mamba-bound pod", mamba_firing, 25, procs)
        time.sleep(3)  # > for (2s) + an evaluation: an alert for another pod would be firing by now

        # ---- alerts name the right pod
        alerts_now = prom.alerts()
        mb = [a for a in alerts_now if a["labels"]["alertname"] == "HybridCacheMambaBound"]
        assert {(a["labels"].get("namespace"), a["labels"].get("pod")) for a in mb} == {("team-a", "sglang-mamba-0")}, mb
        firing = next(a for a in mb if a["state"] == "firing")
        assert firing["labels"]["severity"] == "warning" and firing["labels"]["job"] == "team-a/hybrid-cache-exporter"
        assert firing["annotations"]["summary"].startswith("team-a/sglang-mamba-0 server dp0:"), firing["annotations"]
        assert firing["annotations"]["runbook_url"].endswith("runbook.md#hybridcachemambabound")
        assert not [a for a in alerts_now if a["labels"].get("pod") == "sglang-balanced-0" and a["labels"]["alertname"].endswith("Bound")]

        # ---- issue 21.1: per exporter, the alerts of the rule catalogue that fire are its live findings' alerts,
        # both directions; each description starts with the finding's rank-1 flag as the exporter exports it
        # (switches and environment variables as a command line has them) and never names a caveated value
        def expected_alerts() -> dict[str, set[str]]:
            out = {}
            for e in exporters:
                text = http_get(f"http://127.0.0.1:{e.port}/metrics").decode()
                live = set(re.findall(r'hybrid_cache_finding\{[^}]*rule="(\w+)"[^}]*\} 1\.0', text))
                out[e.key] = {rulebook.BY_ID[r].alert for r in live if rulebook.BY_ID[r].alert}
            return out

        want_alerts = expected_alerts()
        assert want_alerts == {
            "mamba": {"HybridCacheMambaBound", "HybridCacheMambaCappedAtStartup"},
            "balanced": set(),
            "kv": {"HybridCacheKVBound", "HybridCacheRetractionStorm"},
            "vm": {"HybridCacheRequestCapBound"},
        }, want_alerts
        catalogue = {r.alert for r in rulebook.RULES if r.alert}

        def firing_alerts() -> dict[str, set[str]]:
            got: dict[str, set[str]] = {e.key: set() for e in exporters}
            for a in prom.alerts():
                if a["state"] == "firing" and a["labels"]["alertname"] in catalogue:
                    got[by_instance[a["labels"]["instance"]].key].add(a["labels"]["alertname"])
            return got

        by_instance = {e.instance: e for e in exporters}
        wait_for("the alerts of every live finding firing", lambda: firing_alerts() == want_alerts, 30, procs)
        time.sleep(3)  # > for (2s) + an evaluation: a contradicting alert would be firing by now
        assert firing_alerts() == want_alerts
        for a in prom.alerts():
            if a["labels"]["alertname"] not in catalogue:
                continue
            e = by_instance[a["labels"]["instance"]]
            rule = next(r.id for r in rulebook.RULES if r.alert == a["labels"]["alertname"])
            rep = json.loads(
                subprocess.run(
                    exporter_cmd() + ["report", "--json", str(e.fixture)], capture_output=True, text=True, timeout=120, check=True
                ).stdout
            )
            recs = rep["sources"][0]["servers"][0]["status"]["recommendations"]
            first = [d["flag"] for d in recs if d["ranks"].get(rule) == 1]
            desc = a["annotations"]["description"]
            if first:
                assert f"Start here: {first[0]}" in desc, (a["labels"]["alertname"], first, desc)
            else:
                assert "recommends no flag" in desc, desc
            for d in recs:
                if not d["rank"]:
                    assert d["flag"] not in desc, (d["flag"], desc)  # a caveated value is never in an alert
        mamba_desc = next(a for a in prom.alerts() if a["labels"]["alertname"] == "HybridCacheMambaBound")["annotations"]["description"]
        assert "Start here: SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 (3 more, in order" in mamba_desc, mamba_desc
        assert "--mamba-full-memory-ratio 7.5" not in mamba_desc and "--enable-unified-memory true" not in mamba_desc

        # ---- recording rules: every rule evaluates without error (a many-to-many join would not) ...
        evaluated = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
        assert {r["name"] for r in evaluated if r["type"] == "recording"} == {r["record"] for r in rules(RECORDING)}
        assert all(r["health"] == "ok" for r in evaluated), [(r["name"], r.get("lastError")) for r in evaluated if r["health"] != "ok"]
        # ... per server, then per namespace/model
        by_inst = {e.instance: e for e in exporters}
        codes = {by_inst[s["metric"]["instance"]].key: float(s["value"][1]) for s in prom.query("server:hybrid_cache_binding_pool:code")}
        assert codes == {"mamba": 1, "balanced": 0, "kv": 2, "vm": 3}, codes
        for s in prom.query("server:hybrid_cache_binding_pool:code"):
            assert s["metric"]["model"] == by_inst[s["metric"]["instance"]].model
        pools = {
            (s["metric"].get("namespace", ""), s["metric"]["model"], s["metric"]["pool"])
            for s in prom.query("namespace_model_pool:hybrid_cache_servers:count")
        }
        want = {"mamba": "mamba", "balanced": "none", "kv": "kv", "vm": "request_cap"}
        assert pools == {(e.namespace, e.model, want[e.key]) for e in exporters}, pools
        running = {
            (s["metric"].get("namespace", ""), s["metric"]["model"]): float(s["value"][1])
            for s in prom.query("namespace_model:hybrid_cache_running_requests:sum")
        }
        for e in exporters:
            raw = prom.query(f'sum(hybrid_cache_running_requests{{instance="{e.instance}"}})')
            assert running[(e.namespace, e.model)] == float(raw[0]["value"][1]), (e.key, running)

        # ---- every panel query of both dashboards tells the exporters apart
        problems, skipped = [], []
        for name in (SERVER_DASH, FLEET_DASH):
            p, s = check_dashboard(prom, name, exporters)
            problems += p
            skipped += s
        assert not problems, "\n".join(problems)
        if skipped:
            print("optional panel queries without data on these scenarios:\n  " + "\n  ".join(skipped))
    finally:
        stop_all(procs)
        for f in errs:
            f.close()
            tail = Path(f.name).read_bytes()[-2000:].decode(errors="replace").strip()
            if tail:  # shown by pytest only when the test fails
                print(f"--- {Path(f.name).name} (tail)\n{tail}")
