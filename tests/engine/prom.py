"""A real Prometheus beside the sidecar, with the project's recording rules and alerts (their ``for:`` shortened to
the suite's time scale, as tests/e2e does), scraping the sidecar every second. No tests here."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import harness as h
import yaml

SHORT_FOR = "2s"


class Prometheus:
    def __init__(self, workdir: Path, name: str, target_port: int) -> None:
        self.dir = workdir / f"prometheus-{name}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = h.free_port()
        alerts = yaml.safe_load((h.ROOT / "dashboards" / "alerts.yml").read_text())
        for g in alerts["groups"]:
            for r in g["rules"]:
                if "for" in r:
                    r["for"] = SHORT_FOR
        (self.dir / "alerts.yml").write_text(yaml.safe_dump(alerts, sort_keys=False))
        cfg = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(h.ROOT / "dashboards" / "recording.yml"), str(self.dir / "alerts.yml")],
            "scrape_configs": [
                {
                    "job_name": "hybrid-cache-exporter",
                    "static_configs": [{"targets": [f"127.0.0.1:{target_port}"], "labels": {"instance": name}}],
                }
            ],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        self.err = open(self.dir / "prometheus.err", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.err,
            start_new_session=True,
        )
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"prometheus exited:\n{(self.dir / 'prometheus.err').read_text()[-2000:]}"
            with contextlib.suppress(OSError), urllib.request.urlopen(self.base + "/-/ready", timeout=2):
                return
            time.sleep(0.2)
        raise AssertionError("prometheus did not get ready")

    def api(self, path: str, **params) -> dict:
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.base}/api/v1/{path}" + (f"?{q}" if q else ""), timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["alerts"]

    def firing(self) -> set[str]:
        return {a["labels"]["alertname"] for a in self.alerts() if a["state"] == "firing"}

    def query(self, expr: str) -> list:
        return self.api("query", query=expr)["result"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.err.close()
