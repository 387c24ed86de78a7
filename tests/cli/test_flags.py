"""The flags of the Prometheus exporter conventions on a real ``serve`` process: --version,
build_info, the version on the landing page and in the startup line, --log.level/--log.format
(and the old spellings), --label, repeated --web.listen-address, --web.telemetry-path, and a
--log path that never appears (WARNING, self-metric, landing page, /readyz)."""

from __future__ import annotations

import json
import platform
import re
import subprocess

import pytest
import test_serve_support as h

from exporter import __version__
from exporter.exposition.identity import OWN_LABELS, TARGET_LABELS, parse_label

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$")


def samples(text: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        out.append((m.group(1), dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))))
    return out


def test_version_flag():
    for argv in (["--version"], ["serve", "--version"]):
        p = subprocess.run([str(h.EXE), *argv], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        first = p.stdout.splitlines()[0]
        m = re.fullmatch(r"hybrid-cache-exporter, version (\S+) \(revision: ([0-9a-f]{7,40}|unknown)\)", first)
        assert m and m.group(1) == __version__, p.stdout
        assert f"python version: {platform.python_version()}" in p.stdout


def test_build_info_landing_page_startup_line_and_logfmt(serve, tmp_path):
    log = tmp_path / "s.log"
    h.fsync_append(log, h.lines_blob(0, 3))
    s = serve("--log", str(log), "--from-beginning")
    text = h.wait_count(s, 3)
    info = [lab for name, lab in samples(text) if name == "hybrid_cache_exporter_build_info"]
    assert len(info) == 1
    assert info[0]["version"] == __version__ and info[0]["python_version"] == platform.python_version()
    assert re.fullmatch(r"[0-9a-f]{7,40}|unknown", info[0]["revision"])
    assert re.search(r"^hybrid_cache_exporter_build_info\{.*\} 1\.0$", text, re.M)
    assert __version__ in s.get("/")[1] and info[0]["revision"] in s.get("/")[1]
    # logfmt by default: ts=... level=info logger=... msg="starting ... version=..."
    start = [ln for ln in s.stderr().splitlines() if "starting hybrid-cache-exporter" in ln]
    assert start and re.match(r'^ts=\S+Z level=info logger=hybrid_cache_exporter msg="starting hybrid-cache-exporter version=', start[0])
    assert f"version={__version__}" in start[0] and f"revision={info[0]['revision']}" in start[0]


def test_log_format_json_and_old_log_level_spelling(serve, tmp_path):
    log = tmp_path / "s.log"
    log.touch()
    s = serve("--log", str(log), "--log.format", "json", "--log-level", "debug")
    s.get("/metrics")
    s.stop()
    recs = [json.loads(ln) for ln in s.err_path.read_text().splitlines() if ln.strip()]
    assert {"ts", "level", "logger", "msg"} <= recs[0].keys()
    assert any(r["level"] == "debug" for r in recs), "debug records at --log-level debug"
    assert any(r["msg"] == "stopped" for r in recs)
    # --log.level warn: no info records
    s = serve("--log", str(log), "--log.level", "warn")
    s.get("/metrics")
    s.stop()
    assert "level=info" not in s.err_path.read_text()


def test_labels_on_every_series_and_listen_addresses(serve, tmp_path):
    log = tmp_path / "s.log"
    h.fsync_append(log, h.lines_blob(0, 4))
    p2 = h.free_port()
    s = serve(
        "--log",
        str(log),
        "--from-beginning",
        "--label",
        "cluster=eu-1",
        "--label",
        "node=gpu-7",
        "--web.listen-address",
        f"127.0.0.1:{p2}",
        "--web.telemetry-path",
        "/probe/metrics",
    )
    assert s.get("/metrics")[0] == 404
    s.base = f"http://127.0.0.1:{s.port}"
    code, text = s.get("/probe/metrics")
    assert code == 200
    all_samples = samples(text)
    assert len(all_samples) > 20
    for name, lab in all_samples:
        assert lab.get("cluster") == "eu-1" and lab.get("node") == "gpu-7", name
    # the second address serves the same
    other = h.Serve.__new__(h.Serve)
    other.base = f"http://127.0.0.1:{p2}"
    code, text2 = other.get("/probe/metrics")
    assert code == 200 and 'cluster="eu-1"' in text2
    assert 'href="probe/metrics"' in s.get("/")[1]  # the status page links relatively


@pytest.mark.parametrize(
    "bad",
    ["source=x", "job=x", "instance=x", "__meta=x", "1bad=x", "no-dash=x", "novalue", "rule=x"],
)
def test_bad_labels_exit_2(tmp_path, bad):
    p = subprocess.run(
        [str(h.EXE), "serve", "--log", str(tmp_path / "s.log"), "--listen", f"127.0.0.1:{h.free_port()}", "--label", bad],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2 and "--label" in p.stderr, p.stderr


def test_kubernetes_names_reserved_in_daemonset_mode():
    assert parse_label("namespace=x") == ("namespace", "x")
    with pytest.raises(ValueError, match="kubernetes-pods"):
        parse_label("pod=x", kubernetes=True)


@pytest.mark.parametrize("argv", [["--listen", "::1:80"], ["--web.telemetry-path", "/healthz"], ["--kubernetes-pods", "/nonexistent"]])
def test_bad_web_flags_exit_2(tmp_path, argv):
    p = subprocess.run([str(h.EXE), "serve", "--log", str(tmp_path / "s.log"), *argv], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr


def test_every_label_the_exporter_uses_is_reserved(serve, tmp_path):
    """OWN_LABELS (what --label may not use) covers every label in the golden expositions and in a
    live serve with all self-metrics."""
    names: set[str] = set()
    for g in sorted((h.ROOT / "tests" / "golden").glob("*.prom")):
        for _, lab in samples(g.read_text()):
            names |= lab.keys()
    log = tmp_path / "s.log"
    h.fsync_append(log, (h.ROOT / "fixtures" / "demo" / "sglang-mamba-bound.log").read_bytes())
    s = serve("--log", str(log), "--log", str(tmp_path / "never.log"), "--from-beginning", "--source-missing-after", "0")
    for _, lab in samples(s.metrics()):
        names |= lab.keys()
    assert names, "no labels read"
    assert names - {"__name__"} <= OWN_LABELS | TARGET_LABELS, names - OWN_LABELS


def test_missing_path_warns_and_shows(serve, tmp_path):
    log = tmp_path / "typo.log"
    s = serve("--log", f"srv={log}", "--source-missing-after", "0.5")
    h.wait_for(lambda: h.value(s.metrics(), "hybrid_cache_exporter_source_missing", source="srv") == 1, what="source_missing 1")
    warn = [ln for ln in s.stderr().splitlines() if "level=warn" in ln and "does not exist after" in ln]
    assert len(warn) == 1 and str(log) in warn[0]
    code, body = s.get("/readyz")
    assert code == 503 and "not there after" in body
    page = s.get("/")[1]
    assert "missing" in page and str(log) in page
    s.get("/metrics")
    assert len([ln for ln in s.stderr().splitlines() if "does not exist after" in ln]) == 1, "warned once"
    h.fsync_append(log, h.lines_blob(0, 2))
    h.wait_for(lambda: h.value(s.metrics(), "hybrid_cache_exporter_source_missing", source="srv") == 0, what="source_missing 0")
    h.wait_for(lambda: s.get("/readyz")[0] == 200, what="ready once the file is there")


def test_missing_glob_and_not_yet_missing(serve, tmp_path):
    s = serve("--log", str(tmp_path / "logs" / "*.log"), "--log", f"late={tmp_path / 'late.log'}", "--source-missing-after", "3600")
    text = s.metrics()
    # within --source-missing-after: 0, the series exists (alerts need no absent())
    assert h.value(text, "hybrid_cache_exporter_source_missing", source="late") == 0
    assert re.search(r'^hybrid_cache_exporter_source_missing\{source=".*\*\.log"\} 0\.0$', text, re.M)
    assert s.get("/readyz")[0] == 200


def test_flag_spellings_parse():
    """--flag=value as the Go exporters write it, the old spellings, repeated addresses."""
    from exporter.cli import build_parser

    ns = build_parser().parse_args(
        ["serve", "--log", "x", "--log.level=WARN", "--log.format=JSON", "--web.listen-address=[::1]:1", "--listen", ":2",
         "--web.telemetry-path=/m", "--web.config.file=w.yml"]
    )  # fmt: skip
    assert (ns.log_level, ns.log_format, ns.listen, ns.telemetry_path, ns.web_config) == ("warn", "json", ["[::1]:1", ":2"], "/m", "w.yml")
    assert build_parser().parse_args(["serve", "--log", "x", "--log-level", "debug"]).log_level == "debug"
    assert build_parser().parse_args(["serve", "--log", "x"]).listen is None  # the face fills in :19833
