"""The DaemonSet identity story with the real Prometheus: one exporter in --kubernetes-pods mode
reads two inference pods' kubelet logs; Prometheus scrapes it as the shipped PodMonitor does
(target labels of the exporter's own pod, honor_labels: true, the node relabelled in). The
series carry the inference pods' namespace/pod/container, `up` the exporter's, and the fleet
recording rules (their joins on the identity labels) give one row per inference pod."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import test_serve_support as h
import yaml

ROOT = h.ROOT
CRI = "2026-08-14T08:17:{s:02d}.000000000Z stderr F {line}\n"


def cri(path) -> bytes:
    lines = path.read_text().splitlines()
    return "".join(CRI.format(s=i % 60, line=ln) for i, ln in enumerate(lines)).encode()


def query(port: int, expr: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


def test_daemonset_labels_through_real_prometheus(tmp_path):
    if shutil.which("prometheus") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("prometheus is required in CI")
        pytest.skip("prometheus not installed")
    pods = tmp_path / "pods"
    for ns, pod, fixture in (("team-a", "sglang-mamba-0", "sglang-mamba-bound"), ("team-b", "sglang-kv-0", "sglang-kv-bound")):
        d = pods / f"{ns}_{pod}_5f0c8a2e-0000-4000-8000-{abs(hash(pod)) % 10**12:012d}" / "sglang"
        d.mkdir(parents=True)
        (d / "0.log").write_bytes(cri(ROOT / "fixtures" / "scenarios" / f"{fixture}.log"))
    exp = h.Serve(tmp_path, "--kubernetes-pods", str(pods), "--from-beginning")
    prom_port = h.free_port()
    cfg = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(ROOT / "dashboards" / "recording.yml")],
        "scrape_configs": [
            {
                # what prometheus-operator generates for deploy/kustomize/daemonset's PodMonitor
                "job_name": "podMonitor/monitoring/hybrid-cache-exporter-daemonset/0",
                "honor_labels": True,
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{exp.port}"],
                        "labels": {
                            "__meta_kubernetes_namespace": "monitoring",
                            "__meta_kubernetes_pod_name": "hybrid-cache-exporter-x7k2p",
                            "__meta_kubernetes_pod_container_name": "hybrid-cache-exporter",
                            "__meta_kubernetes_pod_node_name": "gpu-node-3",
                        },
                    }
                ],
                "relabel_configs": [
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                    {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
                    {"target_label": "job", "replacement": "monitoring/hybrid-cache-exporter-daemonset"},
                    {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},  # the PodMonitor's relabeling
                ],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    err = open(tmp_path / "prometheus.err", "wb")  # noqa: SIM115
    prom = subprocess.Popen(
        ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=err,
    )  # fmt: skip
    try:
        exp.wait_up()
        golden = ROOT / "tests" / "golden"
        expected = sum(h.value((golden / f"scenarios__{f}.prom").read_text(), h.DECODE) for f in ("sglang-mamba-bound", "sglang-kv-bound"))
        h.wait_count(exp, int(expected), timeout=30)

        def rows(expr: str) -> list:
            assert prom.poll() is None, (tmp_path / "prometheus.err").read_text()
            try:
                return query(prom_port, expr)
            except OSError:
                return []

        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len(rows("server:hybrid_cache_binding_pool:code")) < 2:
            time.sleep(0.5)
        # the exporter's own target
        [up] = rows("up")
        assert up["metric"]["pod"] == "hybrid-cache-exporter-x7k2p" and up["metric"]["node"] == "gpu-node-3"
        # the inference pods' series: their namespace/pod/container, not the exporter's, and no exported_*
        decode = {
            (r["metric"]["namespace"], r["metric"]["pod"], r["metric"]["container"]) for r in rows("hybrid_cache_decode_batches_total")
        }
        assert decode == {("team-a", "sglang-mamba-0", "sglang"), ("team-b", "sglang-kv-0", "sglang")}
        assert not rows('{__name__=~"hybrid_cache_.+", exported_pod!=""}')
        assert all(r["metric"]["node"] == "gpu-node-3" for r in rows("hybrid_cache_mamba_usage_ratio"))
        # the fleet recording rules tell the two pods apart (one row each, with its model)
        binding = {r["metric"]["pod"]: r["metric"] for r in rows("server:hybrid_cache_binding_pool:code")}
        assert set(binding) == {"sglang-mamba-0", "sglang-kv-0"}, binding
        assert all(m.get("model") for m in binding.values())
        # series without a source (the exporter's own) keep the exporter's pod
        [build] = rows("hybrid_cache_exporter_build_info")
        assert build["metric"]["pod"] == "hybrid-cache-exporter-x7k2p"
    finally:
        prom.terminate()
        try:
            prom.wait(15)
        except subprocess.TimeoutExpired:
            prom.kill()
        err.close()
        exp.kill()
