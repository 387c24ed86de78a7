"""Deployment examples parse, wire the log through a shared volume, use port 19833, pass exporter
flags the real CLI accepts, and ship exactly the promtool-tested alert rules."""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
PORT = 19833
TEE = re.compile(r"2>&1 \| tee (?:-a )?(\S+)")


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def by_kind(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}"
    return found[0]


def rule_groups() -> list[dict]:
    out = []
    for f in (ROOT / "dashboards" / "recording.yml", ROOT / "dashboards" / "alerts.yml"):
        if f.exists():
            out += yaml.safe_load(f.read_text())["groups"]
    return out


def check_exporter_args(args: list[str]) -> None:
    """The real CLI parser accepts the arguments and they serve on 19833."""
    from exporter.cli import build_parser

    try:
        ns = build_parser().parse_args(args)
    except SystemExit as e:  # argparse error
        if "serve" in args and not importlib.util.find_spec("exporter.serve"):
            pytest.skip("serve subcommand not available yet")
        raise AssertionError(f"exporter rejects {args}") from e
    assert ns.command == "serve"
    assert [a.rsplit(":", 1)[1] for a in ns.listen or [f":{PORT}"]] == [str(PORT)]
    assert ns.log


def volumes(entries: list[str]) -> dict[str, str]:
    return {v.split(":")[0]: v.split(":")[1] for v in entries}


@pytest.mark.parametrize(
    "path", sorted([*K8S.glob("*.yaml"), *DEPLOY.glob("*.yml"), *(DEPLOY / "grafana").glob("*.yml")]), ids=lambda p: p.name
)
def test_yaml_parses(path):
    assert load_all(path)


def test_prometheusrule_is_built_from_alerts_yml():
    rule = by_kind(load_all(K8S / "prometheusrule.yaml"), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == rule_groups()
    spec = importlib.util.spec_from_file_location("build_prometheusrule", DEPLOY / "build_prometheusrule.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--check"]) == 0, "stale: run `make dashboards`"


def test_kubernetes_sidecar_shares_the_log():
    docs = load_all(K8S / "sglang-hybrid-cache.yaml")
    dep = by_kind(docs, "Deployment")
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    cs = {c["name"]: c for c in spec["containers"]}
    server, exporter = cs["sglang"], cs["hybrid-cache-exporter"]
    script = " ".join(server.get("command", []) + server.get("args", []))
    m = TEE.search(script)
    assert m, "server output must be tee'd into the shared log"
    log_path = m.group(1)
    assert "pipefail" in script

    empty_dirs = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    mounts = {c: {vm["name"]: vm["mountPath"] for vm in cs[c].get("volumeMounts", [])} for c in cs}
    shared = [v for v in empty_dirs if v in mounts["sglang"] and v in mounts["hybrid-cache-exporter"]]
    assert shared, "no emptyDir mounted in both containers"
    assert any(log_path.startswith(mounts["sglang"][v] + "/") for v in shared)
    assert any(log_path.startswith(mounts["hybrid-cache-exporter"][v] + "/") for v in shared)

    args = exporter.get("args", [])
    assert any(log_path in a for a in args), "exporter must tail the tee'd file"
    check_exporter_args(args)
    assert {"name": "metrics", "containerPort": PORT} in exporter["ports"]

    labels = pod["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    svc = by_kind(docs, "Service")
    assert svc["spec"]["selector"].items() <= labels.items()
    assert any(p["port"] == PORT and p["targetPort"] in ("metrics", PORT) for p in svc["spec"]["ports"])
    pm = by_kind(docs, "PodMonitor")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert [e["port"] for e in pm["spec"]["podMetricsEndpoints"]] == ["metrics"]
    # HybridCacheExporterDown matches up{job=~".*hybrid-cache-exporter.*"}; the PodMonitor job is <ns>/<name>
    assert "hybrid-cache-exporter" in pm["metadata"]["name"]


def test_docker_compose():
    c = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    svcs = c["services"]
    exp = svcs["hybrid-cache-exporter"]
    check_exporter_args(exp["command"])
    assert f"{PORT}:{PORT}" in exp["ports"]
    m = TEE.search(" ".join(svcs["sglang"]["command"]))
    assert m
    vol, srv_vol = volumes(exp["volumes"]), volumes(svcs["sglang"]["volumes"])
    shared = set(vol) & set(srv_vol) & set(c["volumes"])
    assert shared and any(m.group(1).startswith(srv_vol[v] + "/") for v in shared)
    assert any(m.group(1).replace(srv_vol[v], vol[v], 1) in " ".join(exp["command"]) for v in shared)
    # every bind-mounted file exists, and Prometheus/Grafana get the shipped rules and dashboard
    mounts = {}
    for name in ("prometheus", "grafana"):
        for src, dst in volumes(svcs[name]["volumes"]).items():
            path = (DEPLOY / src).resolve()
            assert path.exists(), src
            mounts[path] = dst
    assert ROOT / "dashboards" / "alerts.yml" in mounts
    assert ROOT / "dashboards" / "hybrid-cache.json" in mounts
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert mounts[ROOT / "dashboards" / "alerts.yml"] in prom["rule_files"]
    targets = [t for sc in prom["scrape_configs"] for s in sc["static_configs"] for t in s["targets"]]
    assert f"hybrid-cache-exporter:{PORT}" in targets


def test_prometheus_config_is_valid(tmp_path):
    if not shutil.which("promtool"):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("promtool is required in CI")
        pytest.skip("promtool not installed")
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    prom["rule_files"] = [str(ROOT / "dashboards" / "alerts.yml")]
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(prom))
    out = subprocess.run(["promtool", "check", "config", str(cfg)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_systemd_unit():
    path = DEPLOY / "systemd" / "hybrid-cache-exporter.service"
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read_string(path.read_text())
    env = dict(line[len("Environment=") :].split("=", 1) for line in path.read_text().splitlines() if line.startswith("Environment="))
    argv = shlex.split(re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], unit["Service"]["ExecStart"]))
    assert argv[0].endswith("hybrid-cache-exporter")
    check_exporter_args(argv[1:])
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_dockerfile_exposes_default_port():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(rf"^EXPOSE {PORT}$", text, re.M)
    for src in re.findall(r"^COPY (?!--from)(\S+)", text, re.M):
        assert (ROOT / src).exists(), src
