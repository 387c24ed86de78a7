"""Packaging that installs: ``python -m build`` makes an sdist and a wheel (the wheel from the
sdist, as PyPI users would get it); the wheel goes into a FRESH venv (no editable install, no
source tree on the path) whose ``replay`` prints exactly the golden exposition and whose
``serve`` answers /metrics with the build's revision. Built and installed once per session."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
import test_serve_support as h

from exporter import __version__

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "demo" / "sglang-mamba-bound.log"
GOLDEN = ROOT / "tests" / "golden" / "demo__sglang-mamba-bound.prom"


def _git_revision() -> str | None:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        return None
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k != "HCE_REVISION"}
    p = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], capture_output=True, text=True, env=env, timeout=600
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


@pytest.fixture(scope="session")
def venv(built, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(d)], check=True, timeout=120)
    # dependencies from the package index (pip's cache makes repeats fast); the project from the wheel only
    p = subprocess.run(
        [str(d / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(built["wheel"])],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return d


def test_wheel_and_sdist_contents(built):
    rev = _git_revision()
    names = zipfile.ZipFile(built["wheel"]).namelist()
    assert built["wheel"].name.startswith(f"hybrid_cache_exporter-{__version__}-")
    for needed in ("exporter/cli/__init__.py", "exporter/sources/tailer.py", "parsers/sglang.py", "dashboards/hybrid-cache.json"):
        assert needed in names, needed
    assert any(n.startswith("exporter/presentation/static/") for n in names), "status page scripts"
    if os.environ.get("HCE_REQUIRE_NATIVE") == "1":
        assert any(re.match(r"exporter/_scan\..*\.so$", n) for n in names), "the C scanner is in the wheel"
    wheel_rev = zipfile.ZipFile(built["wheel"]).read("exporter/_revision.py").decode() if "exporter/_revision.py" in names else ""
    with tarfile.open(built["sdist"]) as t:
        members = t.getnames()
        base = members[0].split("/")[0]
        assert f"{base}/exporter/_scan.c" in members and f"{base}/setup.py" in members
        sdist_rev = t.extractfile(f"{base}/exporter/_revision.py").read().decode() if f"{base}/exporter/_revision.py" in members else ""
    if rev:
        assert f'REVISION = "{rev}"' in wheel_rev and f'REVISION = "{rev}"' in sdist_rev


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HCE_PURE_PYTHON")}
    return subprocess.run([str(venv / "bin" / "hybrid-cache-exporter"), *args], capture_output=True, cwd=cwd, env=env, timeout=120)


def test_installed_wheel_replays_and_serves(venv, tmp_path):
    # the package comes from the venv, not from the source tree
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import exporter; print(exporter.__file__)"], capture_output=True, text=True, cwd=tmp_path
    )
    assert str(venv) in where.stdout and str(ROOT) not in where.stdout, where.stdout + where.stderr

    v = _run(venv, "--version", cwd=tmp_path)
    assert v.returncode == 0 and f"version {__version__} " in v.stdout.decode()
    rev = _git_revision()
    if rev:
        assert f"(revision: {rev})" in v.stdout.decode()

    r = _run(venv, "replay", str(DEMO), cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == GOLDEN.read_text(), "the installed replay differs from the golden exposition"

    log = tmp_path / "server.log"
    shutil.copyfile(DEMO, log)
    port = h.free_port()
    err = open(tmp_path / "serve.err", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [str(venv / "bin" / "hybrid-cache-exporter"), "serve", "--log", f"demo={log}", "--from-beginning",
         "--web.listen-address", f"127.0.0.1:{port}"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
    )  # fmt: skip
    try:
        text = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "serve.err").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    text = resp.read().decode()
                if (
                    h.value(text, "hybrid_cache_decode_batches_total", source="demo") > 0
                    and h.value(text, "hybrid_cache_exporter_read_lag_bytes") == 0
                ):
                    break
            except OSError:
                pass
            time.sleep(0.1)
        golden_decode = h.value(GOLDEN.read_text(), "hybrid_cache_decode_batches_total")
        assert h.value(text, "hybrid_cache_decode_batches_total", source="demo") == golden_decode > 0
        m = re.search(r'^hybrid_cache_exporter_build_info\{[^}]*revision="([^"]+)"[^}]*\} 1\.0$', text, re.M)
        assert m, text[:2000]
        if rev:
            assert m.group(1) == rev
    finally:
        proc.terminate()
        proc.wait(15)
        err.close()


def test_python_m_exporter_runs_the_installed_copy(venv, tmp_path):
    """``python -m exporter`` is the console script (exporter/__main__.py -> exporter.cli.main)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HCE_PURE_PYTHON")}
    py = str(venv / "bin" / "python")
    v = subprocess.run([py, "-m", "exporter", "--version"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert v.returncode == 0 and f"version {__version__} " in v.stdout, v.stderr
    r = subprocess.run([py, "-m", "exporter", "replay", str(DEMO)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout == GOLDEN.read_text(), r.stderr
    r = subprocess.run(
        [py, "-m", "exporter", "report", "--json", str(DEMO)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert r.returncode == 0 and '"mamba_bound"' in r.stdout, r.stderr


def test_installed_copy_draws(venv, tmp_path):
    """The pictures' scripts are package data: the installed ``report --html`` inlines uPlot and
    charts.js, and the installed ``serve`` serves them under /static/."""
    r = _run(venv, "report", "--html", str(DEMO), cwd=tmp_path)
    out = r.stdout.decode()
    assert r.returncode == 0 and "var uPlot=" in out and "window.hceCharts" in out and "mamba-bound" in out, r.stderr.decode()
    port = h.free_port()
    proc = subprocess.Popen(
        [str(venv / "bin" / "hybrid-cache-exporter"), "serve", "--log", str(DEMO), "--from-beginning",
         "--web.listen-address", f"127.0.0.1:{port}"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HCE_PURE_PYTHON")},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/static/uplot.iife.min.js", timeout=5) as resp:
                    assert resp.read().startswith(b"/*! https://github.com/leeoniya/uPlot")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(15)
