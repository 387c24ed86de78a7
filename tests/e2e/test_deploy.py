"""Deployment examples parse, wire the log through a shared volume, use port 19833, pass exporter
flags the real CLI accepts, and ship exactly the promtool-tested alert rules."""

from __future__ import annotations

import configparser
import copy
import functools
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
KUSTOMIZE = DEPLOY / "kustomize"
SIDECAR = KUSTOMIZE / "sidecar" / "sglang-hybrid-cache.yaml"
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
    assert ns.log or ns.kubernetes_pods


def volumes(entries: list[str]) -> dict[str, str]:
    return {v.split(":")[0]: v.split(":")[1] for v in entries}


@pytest.mark.parametrize(
    "path",
    sorted([*K8S.glob("*.yaml"), *KUSTOMIZE.glob("*/*.yaml"), *DEPLOY.glob("*.yml"), *(DEPLOY / "grafana").glob("*.yml")]),
    ids=lambda p: f"{p.parent.name}/{p.name}",
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
    docs = load_all(SIDECAR)
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


COMPOSES = [DEPLOY / "docker-compose.yml", DEPLOY / "demo" / "docker-compose.yml"]


def bind_mounts(compose: Path, svc: dict) -> dict[Path, str]:
    """Host file -> container path of a service's bind mounts (relative to the compose file)."""
    out = {}
    for v in svc.get("volumes", []):
        src, dst = v.split(":")[:2]
        if src.startswith("."):
            out[(compose.parent / src).resolve()] = dst
    return out


@pytest.mark.parametrize("compose", COMPOSES, ids=lambda p: p.parent.name)
def test_docker_compose(compose, tmp_path):
    c = yaml.safe_load(compose.read_text())
    svcs = c["services"]
    exp = svcs["hybrid-cache-exporter"]
    check_exporter_args(exp["command"])
    assert f"{PORT}:{PORT}" in exp["ports"]
    assert exp["build"]["dockerfile"] == "deploy/Dockerfile" and (compose.parent / exp["build"]["context"]).resolve() == ROOT
    # the log reaches the exporter through a named volume: tee'd by the server, or appended by the demo writer
    writer = svcs.get("sglang") or svcs["writer"]
    script = " ".join(writer["command"])
    m = TEE.search(script) or re.search(r"--dst (\S+)", script)
    assert m, script
    vol, srv_vol = volumes(exp["volumes"]), volumes(writer["volumes"])
    shared = set(vol) & set(srv_vol) & set(c["volumes"])
    assert shared and any(m.group(1).startswith(srv_vol[v] + "/") for v in shared)
    assert any(m.group(1).replace(srv_vol[v], vol[v], 1) in " ".join(exp["command"]) for v in shared)
    # every bind-mounted file exists
    mounts: dict[str, dict[Path, str]] = {}
    for name, svc in svcs.items():
        mounts[name] = bind_mounts(compose, svc)
        for src in mounts[name]:
            assert src.exists(), f"{name}: {src}"
    # Prometheus: its config (promtool, with the rule files it names) scrapes the exporter and loads every shipped rule file
    prom_mounts = {dst: src for src, dst in mounts["prometheus"].items()}
    prom = yaml.safe_load(prom_mounts["/etc/prometheus/prometheus.yml"].read_text())
    shipped_rules = {ROOT / "dashboards" / f for f in ("recording.yml", "alerts.yml") if (ROOT / "dashboards" / f).exists()}
    assert {prom_mounts[r] for r in prom["rule_files"]} == shipped_rules
    targets = [t for sc in prom["scrape_configs"] for s in sc["static_configs"] for t in s["targets"]]
    assert f"hybrid-cache-exporter:{PORT}" in targets
    # Grafana: the provisioned datasource is the compose's Prometheus; every shipped dashboard is in the provider's folder
    g = {dst: src for src, dst in mounts["grafana"].items()}
    ds = yaml.safe_load(g["/etc/grafana/provisioning/datasources/hybrid-cache.yml"].read_text())
    assert ds["apiVersion"] == 1 and ds["datasources"][0]["type"] == "prometheus"
    assert ds["datasources"][0]["url"] == "http://prometheus:9090" and "9090:9090" in svcs["prometheus"]["ports"]
    prov = yaml.safe_load(g["/etc/grafana/provisioning/dashboards/hybrid-cache.yml"].read_text())
    assert prov["apiVersion"] == 1
    folder = prov["providers"][0]["options"]["path"]
    in_folder = {src for dst, src in g.items() if dst.startswith(folder + "/")}
    assert in_folder == set((ROOT / "dashboards").glob("*.json"))
    for f in in_folder:
        json.loads(f.read_text())
    # promtool checks the config and, through it, the rule files it loads
    prom["rule_files"] = [str(prom_mounts[r]) for r in prom["rule_files"]]
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(prom))
    out = subprocess.run([_need("promtool"), "check", "config", str(cfg)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr and "rules found" in out.stdout + out.stderr


def test_demo_writer_replays_into_a_live_exporter(tmp_path):
    """The demo's writer (deploy/demo/replay.py) appending the demo log while serve tails it gives
    what replay gives for the file (the golden exposition's values)."""
    import test_serve_support as h

    log = tmp_path / "server.log"
    log.touch()
    s = h.Serve(tmp_path, "--log", f"demo={log}", "--engine", "sglang", "--from-beginning")
    try:
        s.wait_up()
        demo = ROOT / "fixtures" / "demo" / "sglang-mamba-bound.log"
        w = subprocess.run(
            [sys.executable, str(DEPLOY / "demo" / "replay.py"), "--src", str(demo), "--dst", str(log),
             "--lines-per-second", "0", "--loops", "1"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert w.returncode == 0, w.stderr
        golden = (ROOT / "tests" / "golden" / "demo__sglang-mamba-bound.prom").read_text()
        n = h.value(golden, h.DECODE)
        assert n > 0
        text = h.wait_count(s, int(n), source="demo")
        assert h.value(text, "hybrid_cache_mamba_capacity_slots", source="demo") == h.value(golden, "hybrid_cache_mamba_capacity_slots") > 0
    finally:
        s.kill()


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
    """What can be checked without Docker (it does not run on the CI machine): the inputs exist,
    the wheel is built from this project with the revision argument, the runtime is non-root, and
    the default command is accepted by the real CLI."""
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(rf"^EXPOSE {PORT}$", text, re.M)
    for src in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for part in src.split():
            assert (ROOT / part).exists(), part
    copied = {p for line in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M) for p in line.split()}
    import tomllib

    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert {p.split(".")[0] for p in packages} | {"pyproject.toml", "setup.py", "README.md"} <= copied
    assert re.search(r"^ARG HCE_REVISION", text, re.M) and "ENV HCE_REVISION=${HCE_REVISION}" in text
    user = re.findall(r"^USER (\S+)$", text, re.M)
    assert user and not user[-1].startswith(("0", "root"))
    entry = json.loads(re.search(r"^ENTRYPOINT (.+)$", text, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD (.+)$", text, re.M).group(1))
    assert entry == ["hybrid-cache-exporter"]
    check_exporter_args(cmd)


# --- Kustomize: rendered by the real kubectl, validated offline --------------------------------

KINDS_WITH_SCHEMAS = {"Deployment", "DaemonSet", "Service", "ConfigMap"}
# prometheus-operator CRDs: kubernetes-validate has no schema for them; they are validated against
# the operator's CRD schemas as generated models (cloudcoil-models-prometheus-operator: types), with
# unknown fields refused here (the models accept extras), and their rule groups by promtool
PODMONITOR_ENDPOINT_KEYS = {"port", "path", "interval", "scrapeTimeout", "honorLabels", "relabelings", "metricRelabelings", "scheme"}


def crd_models():
    try:
        from cloudcoil.models.prometheus_operator import v1
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("cloudcoil-models-prometheus-operator (test extra) is required in CI")
        pytest.skip("cloudcoil-models-prometheus-operator not installed")
    return v1


def _models_in(annotation) -> list:
    """The pydantic model classes an annotation holds (Optional[X], List[X], Dict[str, X], ...)."""
    import typing

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models_in(a)]


def unknown_fields(model, data, path: str = "") -> list[str]:
    """Keys of ``data`` that ``model`` (a CRD model) has no field for, recursively."""
    if isinstance(data, list):
        return [u for i, d in enumerate(data) for u in unknown_fields(model, d, f"{path}[{i}]")]
    if not isinstance(data, dict):
        return []
    by_key = {}
    for name, f in model.model_fields.items():
        by_key[f.alias or name] = f
        by_key[name] = f
    out = []
    for k, v in data.items():
        f = by_key.get(k)
        if f is None:
            out.append(f"{path}.{k}")
            continue
        for sub in _models_in(f.annotation)[:1]:
            out += unknown_fields(sub, v, f"{path}.{k}")
    return out


def validate_crd(doc: dict) -> None:
    """Types by the operator's schema (pydantic raises), unknown fields by :func:`unknown_fields`."""
    model = getattr(crd_models(), doc["kind"])
    model.model_validate(doc)
    bad = unknown_fields(model, doc)
    assert not bad, f"{doc['kind']} {doc['metadata']['name']}: fields the CRD does not have: {bad}"


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{tool} is required in CI")
        pytest.skip(f"{tool} not installed")
    return path


@functools.cache
def rendered(base: str) -> tuple[dict, ...]:
    out = subprocess.run([_need("kubectl"), "kustomize", str(KUSTOMIZE / base)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def exporter_container(pod_spec: dict) -> dict:
    [c] = [c for c in pod_spec["containers"] if c["image"].split("/")[-1].startswith("hybrid-cache-exporter:")]
    return c


def test_offline_validation_catches_a_bad_field():
    """The offline validation is strict: an unknown or mistyped field fails (so the test below can)."""
    import kubernetes_validate as kv

    dep = copy.deepcopy(next(d for d in rendered("sidecar") if d["kind"] == "Deployment"))
    dep["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kv.ValidationError):
        kv.validate(dep, kv.latest_version(), strict=True)
    # and so is the CRD check: a misspelt field, a wrong type
    pm = copy.deepcopy(next(d for d in rendered("daemonset") if d["kind"] == "PodMonitor"))
    validate_crd(pm)
    pm["spec"]["podMetricsEndpoints"][0]["honourLabels"] = True
    with pytest.raises(AssertionError, match="honourLabels"):
        validate_crd(pm)
    pm = copy.deepcopy(next(d for d in rendered("daemonset") if d["kind"] == "PodMonitor"))
    pm["spec"]["podMetricsEndpoints"][0]["honorLabels"] = "yes please"
    with pytest.raises(ValueError):  # pydantic.ValidationError
        validate_crd(pm)
    rule = copy.deepcopy(next(d for d in rendered("daemonset") if d["kind"] == "PrometheusRule"))
    rule["spec"]["groups"][0]["rules"][0]["expression"] = "up"
    with pytest.raises(AssertionError, match="expression"):
        validate_crd(rule)


@pytest.mark.parametrize("base", ["sidecar", "daemonset"])
def test_kustomize_renders_and_validates(base, tmp_path):
    import kubernetes_validate as kv

    docs = rendered(base)
    kinds = sorted(d["kind"] for d in docs)
    assert {"PodMonitor", "PrometheusRule", "ConfigMap"} <= set(kinds), kinds
    version = kv.latest_version()
    for d in docs:
        if d["kind"] in KINDS_WITH_SCHEMAS:
            kv.validate(d, version, strict=True)  # raises ValidationError with the path of the bad field
        else:
            assert d["kind"] in ("PodMonitor", "PrometheusRule"), d["kind"]
            assert d["apiVersion"] == "monitoring.coreos.com/v1"
            assert set(d) == {"apiVersion", "kind", "metadata", "spec"}
            validate_crd(d)

    # PodMonitor: selects the exporter's pods and names its port
    pm = by_kind(list(docs), "PodMonitor")
    assert set(pm["spec"]) <= {"selector", "podMetricsEndpoints", "podTargetLabels", "namespaceSelector", "jobLabel"}
    for ep in pm["spec"]["podMetricsEndpoints"]:
        assert set(ep) <= PODMONITOR_ENDPOINT_KEYS, ep
        assert ep["port"] == "metrics"
    workload = next(d for d in docs if d["kind"] in ("Deployment", "DaemonSet"))
    pod = workload["spec"]["template"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    c = exporter_container(pod["spec"])
    assert {"name": "metrics", "containerPort": PORT} in c["ports"]
    check_exporter_args(c["args"])

    # PrometheusRule: the shipped groups, and promtool accepts them
    rule = by_kind(list(docs), "PrometheusRule")
    assert rule["spec"]["groups"] == rule_groups()
    rules_file = tmp_path / "rules.yml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    out = subprocess.run([_need("promtool"), "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr

    # the dashboards, as ConfigMaps the Grafana sidecar loads, equal to the shipped JSON
    maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    shipped = {f.name: f.read_text() for f in (ROOT / "dashboards").glob("*.json")}
    got = {}
    for m in maps.values():
        assert m["metadata"]["labels"]["grafana_dashboard"] == "1"
        got.update(m["data"])
    assert got == shipped, "a dashboard is missing from deploy/kustomize/common (configMapGenerator) or stale (make dashboards)"
    for text in got.values():
        json.loads(text)


@pytest.mark.parametrize("base", ["sidecar", "daemonset"])
def test_kustomize_exporter_is_hardened(base):
    workload = next(d for d in rendered(base) if d["kind"] in ("Deployment", "DaemonSet"))
    spec = workload["spec"]["template"]["spec"]
    c = exporter_container(spec)
    sc, psc = c.get("securityContext", {}), spec.get("securityContext", {})
    assert sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True
    assert sc.get("runAsUser", psc.get("runAsUser", 0)) != 0
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
    assert sc.get("seccompProfile", psc.get("seccompProfile")) == {"type": "RuntimeDefault"}
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= c["resources"][kind].keys()
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    for m in c.get("volumeMounts", []):
        vol = next(v for v in spec["volumes"] if v["name"] == m["name"])
        if "hostPath" in vol:
            assert m.get("readOnly") is True, "host paths are mounted read-only"


def test_sidecar_never_takes_the_server_out_of_its_service():
    """A pod is Ready only when all its containers are: the sidecar has no readiness probe that can
    fail for log reasons (/readyz), only liveness on /healthz."""
    dep = next(d for d in rendered("sidecar") if d["kind"] == "Deployment")
    c = exporter_container(dep["spec"]["template"]["spec"])
    probe = c.get("readinessProbe")
    assert probe is None or probe["httpGet"]["path"] == "/healthz"
    # and the server keeps its own readiness
    server = next(x for x in dep["spec"]["template"]["spec"]["containers"] if x is not c)
    assert server["readinessProbe"]["httpGet"]["path"] == "/health"
    # the documented sidecar snippets say the same
    for doc in (ROOT / "README.md", ROOT / "docs" / "serve.md", ROOT / "docs" / "fleet.md"):
        if doc.exists():
            assert "readinessProbe: {httpGet: {path: /readyz" not in doc.read_text(), doc


def test_daemonset_reads_the_kubelet_logs():
    from exporter.cli import build_parser

    docs = rendered("daemonset")
    ds = by_kind(list(docs), "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    c = exporter_container(spec)
    ns = build_parser().parse_args(c["args"])
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert any(host[n] == "/var/log/pods" and mounts[n] == ns.kubernetes_pods for n in host)
    assert ns.positions and any(ns.positions.startswith(p + "/") for p in mounts.values())
    assert ns.kubernetes_include and ns.kubernetes_max_sources >= 1
    inc = re.compile(ns.kubernetes_include)
    assert inc.search("infer/qwen3-next-0/sglang") and inc.search("infer/llm-0/vllm-server")
    assert not inc.search("infer/qwen3-next-0/istio-proxy") and not inc.search("sglang/sglang-0/log-shipper")
    assert spec["automountServiceAccountToken"] is False
    pm = by_kind(list(docs), "PodMonitor")
    # the series' namespace/pod/container are the inference pod's, from the log path
    assert all(ep.get("honorLabels") is True for ep in pm["spec"]["podMetricsEndpoints"])


def test_runbook_names_the_manifest_container():
    dep = next(d for d in rendered("sidecar") if d["kind"] == "Deployment")
    names = {c["name"] for c in dep["spec"]["template"]["spec"]["containers"]}
    text = (ROOT / "docs" / "runbook.md").read_text()
    for m in re.finditer(r"kubectl logs \S+ -c (\S+?)[`)\s]", text):
        assert m.group(1) in names, f"runbook names container {m.group(1)!r}; the manifest has {sorted(names)}"
