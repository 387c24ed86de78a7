"""End to end with a real Prometheus: exporter -> scrape -> rules -> HTTP API.

One ``hybrid-cache-exporter serve`` tails several scenario logs (one ``--log NAME=PATH`` each);
one ``prometheus`` scrapes it every second and evaluates a copy of ``dashboards/alerts.yml``.

How the scenario time problem is solved: the fixtures' log timestamps are in the past and the
alerts have ``for:`` durations of minutes, so the test
  * starts the exporter on empty files and then **writes the fixture lines live**, in chunks,
    while Prometheus scrapes: the counters grow between scrapes like on a busy server (the pool
    alerts require decode/stats lines in the last 10 minutes, i.e. a growing counter), and the
    exporter's rules evaluate on the lines' own log time exactly as in production;
  * evaluates a **copy of the rules with every ``for:`` shortened to 2s** (range windows such as
    ``[5m]``/``[10m]`` stay: they simply cover the whole test).

Then it asserts, via the HTTP API, that every dashboard panel query (expressions taken from the
generated JSON, template variables replaced by ``.*``) returns data, and that
``HybridCacheMambaBound`` reaches ``firing`` for the mamba-bound scenario and never appears for the
balanced one. Waits are bounded; processes are killed in ``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from dashboards import build
from dashboards.metrics import OPTIONAL, metric_names

ROOT = Path(__file__).resolve().parents[1]
SCEN = ROOT / "fixtures" / "scenarios"
# source label -> fixture; the first two are required, the others widen panel coverage (vLLM, retractions)
SCENARIOS = {
    "mamba": SCEN / "sglang-mamba-bound.log",
    "balanced": SCEN / "sglang-balanced.log",
    "kv": SCEN / "sglang-kv-bound.log",
    "vllm": SCEN / "vllm-max-num-seqs.log",
}
REQUIRED = ("mamba", "balanced")
CHUNKS = 8  # fixture lines are appended in this many chunks ...
CHUNK_PAUSE = 0.6  # ... this many seconds apart (Prometheus scrapes every 1s)
SHORT_FOR = "2s"
VARS = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
    "${datasource}": "",
    "$engine": ".*",
    "$source": ".*",
    "$dp_rank": ".*",
}

in_ci = os.environ.get("CI", "").lower() == "true"


def need(ok: bool, why: str) -> None:
    if not ok:
        if in_ci:
            pytest.fail(why + " (required in CI)")
        pytest.skip(why)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 3.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - localhost only
        return r.read()


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


def shortened_rules(dst: Path) -> None:
    doc = yaml.safe_load((ROOT / "dashboards" / "alerts.yml").read_text())
    for g in doc["groups"]:
        for r in g["rules"]:
            if "for" in r:
                r["for"] = SHORT_FOR
    dst.write_text(yaml.safe_dump(doc, sort_keys=False))


def panel_targets() -> list[tuple[str, str]]:
    out = []
    for name in build.DASHBOARDS:
        d = json.loads((ROOT / "dashboards" / name).read_text())
        for p in d["panels"]:
            for t in p.get("targets", []):
                expr = t["expr"]
                for k, v in VARS.items():
                    expr = expr.replace(k, v)
                out.append((p["title"], expr))
    return out


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


def test_dashboards_and_alerts_against_real_prometheus(tmp_path):
    need(shutil.which("prometheus") is not None, "prometheus not installed (apt-get install prometheus)")
    for name in REQUIRED:
        need(SCENARIOS[name].exists(), f"fixture {SCENARIOS[name]} missing")
    scenarios = {k: v for k, v in SCENARIOS.items() if v.exists()}

    logs = {name: tmp_path / f"{name}.log" for name in scenarios}
    for p in logs.values():
        p.write_bytes(b"")
    exp_port, prom_port = free_port(), free_port()
    rules = tmp_path / "rules.yml"
    shortened_rules(rules)
    (tmp_path / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [{"job_name": "hybrid-cache-exporter", "static_configs": [{"targets": [f"127.0.0.1:{exp_port}"]}]}],
            }
        )
    )

    procs: list[subprocess.Popen] = []
    errs = [open(tmp_path / "exporter.err", "wb"), open(tmp_path / "prometheus.err", "wb")]  # noqa: SIM115
    try:
        cmd = exporter_cmd() + ["serve", "--listen", f"127.0.0.1:{exp_port}", "--from-beginning"]
        for name, p in logs.items():
            cmd += ["--log", f"{name}={p}"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errs[0]))
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
                stderr=errs[1],
            )
        )
        prom = Prom(prom_port)
        wait_for("exporter /metrics", lambda: b"hybrid_cache_exporter" in http_get(f"http://127.0.0.1:{exp_port}/metrics"), 20, procs)
        wait_for("prometheus ready", lambda: http_get(f"{prom.base}/-/ready"), 20, procs)
        wait_for("first successful scrape", lambda: any(s["value"][1] == "1" for s in prom.query("up")), 15, procs)

        # write the scenarios live, like a server printing them
        chunks = {}
        for name, src in scenarios.items():
            lines = src.read_bytes().splitlines(keepends=True)
            n = -(-len(lines) // CHUNKS)
            chunks[name] = [b"".join(lines[i : i + n]) for i in range(0, len(lines), n)]
        for i in range(CHUNKS):
            for name, parts in chunks.items():
                if i < len(parts):
                    with open(logs[name], "ab") as f:
                        f.write(parts[i])
            time.sleep(CHUNK_PAUSE)

        # the exporter caught up and Prometheus has the final state
        def caught_up() -> bool:
            lag = prom.query("max(hybrid_cache_exporter_read_lag_bytes)")
            parsed = prom.query('sum by (source) (hybrid_cache_exporter_lines_total{outcome="parsed"}) > 0')
            return bool(lag) and float(lag[0]["value"][1]) == 0 and len(parsed) == len(scenarios)

        wait_for("exporter to read every scenario", caught_up, 20, procs)

        def mamba_firing() -> bool:
            return any(
                a["labels"]["alertname"] == "HybridCacheMambaBound" and a["labels"].get("source") == "mamba" and a["state"] == "firing"
                for a in prom.alerts()
            )

        wait_for("HybridCacheMambaBound firing for the mamba-bound scenario", mamba_firing, 25, procs)
        time.sleep(3)  # > for (2s) + an evaluation: a balanced alert would be firing by now

        alerts = prom.alerts()
        mb = [a for a in alerts if a["labels"]["alertname"] == "HybridCacheMambaBound"]
        assert {a["labels"]["source"] for a in mb} == {"mamba"}, mb
        firing = next(a for a in mb if a["state"] == "firing")
        assert firing["labels"]["severity"] == "warning" and firing["labels"]["job"] == "hybrid-cache-exporter"
        assert "--mamba-full-memory-ratio=" in firing["annotations"]["description"], firing["annotations"]
        assert firing["annotations"]["runbook_url"].endswith("runbook.md#hybridcachemambabound")
        assert not [a for a in alerts if a["labels"].get("source") == "balanced" and a["labels"]["alertname"].endswith("Bound")], alerts

        # every dashboard query returns data (targets built only on optional metrics may be empty)
        empty, skipped = [], []
        for title, expr in panel_targets():
            if prom.query(expr):
                continue
            names = metric_names(expr)
            (skipped if names and names <= set(OPTIONAL) else empty).append(f"{title}: {expr}")
        assert not empty, "panel queries without data:\n" + "\n".join(empty)
        if skipped:
            print("optional panel queries without data on these scenarios:\n  " + "\n  ".join(skipped))
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        for f in errs:
            f.close()
            tail = Path(f.name).read_bytes()[-2000:].decode(errors="replace").strip()
            if tail:  # shown by pytest only when the test fails
                print(f"--- {Path(f.name).name} (tail)\n{tail}")
