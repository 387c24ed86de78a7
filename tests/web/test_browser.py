"""The pictures in a real browser: Debian's chromium, headless, renders

* the status page of a live ``serve`` tailing a mamba-bound and a balanced scenario log, and
* an HTML report file of the same logs (``report --html``, opened from disk, offline),

and the test checks what a person would see: the DOM after the scripts ran (``--dump-dom``)
holds the diagnosis text and one drawn chart (uPlot canvas) per server and no external URL; the
screenshot is not blank and shows the finding's shading (its colour over white) only when a
finding fired. chromium runs with networking features off and its own profile directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from PIL import Image
from test_serve_support import free_port

from exporter.catalogues.rulebook import SHADES

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "fixtures" / "scenarios"
MAMBA = SCEN / "sglang-mamba-bound.log"
BALANCED = SCEN / "sglang-balanced.log"
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//(?!127\.0\.0\.1|localhost)""", re.I)


def _over_white(rgba: str) -> tuple[int, int, int]:
    *rgb, a = (float(x) for x in re.findall(r"[\d.]+", rgba))
    return tuple(round(255 * (1 - a) + c * a) for c in rgb)


SHADE_RGB = _over_white(SHADES["mamba_bound"])  # mamba_bound's shading over the white plot

in_ci = os.environ.get("CI", "").lower() == "true"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def need(ok: bool, why: str) -> None:
    if not ok:
        if in_ci:
            pytest.fail(why + " (required in CI)")
        pytest.skip(why)


def chromium(tmp: Path, url: str, *what: str, size: str = "1280,1600", budget_ms: int = 5000) -> subprocess.CompletedProcess:
    need(CHROMIUM is not None, "chromium not installed (make tools)")
    profile = tmp / "profile"
    profile.mkdir(exist_ok=True)
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={size}",
        f"--virtual-time-budget={budget_ms}",  # let the scripts run (and draw) before the dump / screenshot
        *what,
        url,
    ]
    env = dict(os.environ, HOME=str(tmp))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    return r


def dump_dom(tmp: Path, url: str, budget_ms: int = 5000) -> str:
    return chromium(tmp, url, "--dump-dom", budget_ms=budget_ms).stdout


def screenshot(tmp: Path, url: str, name: str, size: str = "1280,1600") -> Path:
    out = tmp / name
    chromium(tmp, url, f"--screenshot={out}", size=size)
    assert out.is_file() and out.stat().st_size > 1000
    return out


# ---------------------------------------------------------------------------------------------
def near(px: tuple[int, int, int], rgb: tuple[int, int, int], tol: int = 4) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(px, rgb, strict=True))


def picture_colours(path: Path) -> dict[tuple[int, int, int], int]:
    """The screenshot's colours and how many pixels have each, alpha dropped (Pillow decodes the PNG: a
    decoder of ours in Python took ~8 s a picture)."""
    with Image.open(path) as im:
        assert im.format == "PNG", im.format
        rgb = im.convert("RGB")
        n = rgb.width * rgb.height
        return {colour: count for count, colour in rgb.getcolors(maxcolors=n)}


def check_picture(path: Path, shaded: bool) -> None:
    colours = picture_colours(path)
    common = max(colours.values()) / sum(colours.values())
    assert len(colours) > 200 and common < 0.9, (len(colours), common)  # not blank: text, bars, lines
    shade = sum(n for rgb, n in colours.items() if near(rgb, SHADE_RGB))
    if shaded:
        assert shade > 5000, shade  # the finding's interval is shaded behind the lines
    else:
        assert shade < 200, shade


def sections(dom: str) -> dict[str, str]:
    """Server sections of a page by source name."""
    out = {}
    for part in dom.split('<section class="server" id="s-')[1:]:
        for name in ("sglang-mamba-bound", "sglang-balanced"):
            if part.startswith(name):
                out[name] = part.split("</section>", 1)[0]
    return out


def check_dom(dom: str, charts_per_server: int) -> None:
    assert not EXTERNAL.search(dom), EXTERNAL.search(dom)
    secs = sections(dom)
    assert set(secs) == {"sglang-mamba-bound", "sglang-balanced"}
    mb, bal = secs["sglang-mamba-bound"], secs["sglang-balanced"]
    assert "mamba-bound" in mb and "The mamba state pool limits concurrency" in mb
    assert "--mamba-ssm-dtype bfloat16" in mb and "Start here:" in mb
    assert "no finding" in bal and "mamba-bound" not in bal and "KV-bound" not in bal
    for s in (mb, bal):  # uPlot made one canvas per chart: the script ran and drew
        assert s.count("<canvas") == charts_per_server, s.count("<canvas")
        assert 'class="uplot' in s


# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def serving(tmp_path: Path, logs: list[str], *ready: str):
    """A real ``serve`` of ``logs`` from the beginning; yields the page's URL once ``/`` shows
    every text of ``ready`` (60 s at most), stops the server after."""
    port = free_port()
    args = [a for log in logs for a in ("--log", log)]
    cmd = [sys.executable, "-m", "exporter", "serve", *args, "--from-beginning", "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    body = r.read().decode()
                if all(text in body for text in ready):
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, f"serve did not show {ready} in 60 s"
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def live(tmp_path):
    logs = [f"sglang-mamba-bound={MAMBA}", f"sglang-balanced={BALANCED}"]
    with serving(tmp_path, logs, "mamba-bound, mamba-capped", "sglang-balanced") as url:
        yield url


def test_status_page_in_chromium(live, tmp_path):
    # 12 s of virtual time: the page refreshes itself (status.json every 5 s) at least once, and
    # after that the panels and the charts are still whole
    dom = dump_dom(tmp_path, live, budget_ms=12000)
    check_dom(dom, charts_per_server=1)
    assert re.search(r'id="hce-updated">updated \d\d:\d\d:\d\d, refreshes every 5 s<', dom), "the page did not refresh"
    assert "Sources" in dom and "sglang-mamba-bound.log" in dom
    check_picture(screenshot(tmp_path, live, "status.png", size="1280,1700"), shaded=True)
    # the legend, not hovered, shows the newest values (before: "-" until hovered)
    for name, sec in sections(dom).items():
        values = re.findall(r'<td class="u-value">([^<]*)</td>', sec)
        assert len(values) == 6 and "-" not in values, (name, values)
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", values[0]) and values[1].endswith("%"), (name, values)
    # a replayed log's lines are old: the servers have gone quiet, their findings greyed (issue 21.8)
    assert 'class="badge quiet"' in dom and "it has gone quiet" in dom


def test_status_page_of_a_balanced_log_shows_no_finding(tmp_path):
    with serving(tmp_path, [str(BALANCED)], "no finding") as url:
        check_picture(screenshot(tmp_path, url, "balanced.png", size="1280,900"), shaded=False)


def test_html_report_in_chromium(tmp_path):
    html = subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--html", str(MAMBA), str(BALANCED)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    ).stdout
    path = tmp_path / "incident.html"
    path.write_text(html, encoding="utf-8")
    url = path.as_uri()
    dom = dump_dom(tmp_path, url)
    check_dom(dom, charts_per_server=2)  # the timeline and the usage distributions
    assert "What if: the recommended flags" in dom and "max_running_requests is capped to 16" in dom
    check_picture(screenshot(tmp_path, url, "report.png", size="1280,1800"), shaded=True)


MERGE_PAGE = """<!DOCTYPE html><html><body><pre id="out"></pre>
<script>{uplot}</script><script>{charts}</script><script>
var M = window.hceCharts.merge;
var old = {{t: [10, 20, 30, 40], kv: [1, 2, 3, 4], mamba: [1, 2, 3, 4], running: [1, 2, 3, 4], queued: [0, 0, 0, 0], cap: [9, 9, 9, 9], spans: []}};
/* the server's ring now starts at 20, row 40 grew, 50 is new */
var d = {{since: 40, first: 20, t: [40, 50], kv: [5, 6], mamba: [5, 6], running: [5, 6], queued: [1, 1], cap: [9, 9], spans: [[40, 60, "red", "mamba_bound", 0]]}};
var r = M(old, d);
var full = M(old, {{t: [1], kv: [1], mamba: [1], running: [1], queued: [1], cap: [1], spans: []}});
document.getElementById("out").textContent = JSON.stringify({{t: r.t, kv: r.kv, spans: r.spans.length, full: full.t}});
</script></body></html>"""


def test_refresh_merge_in_chromium(tmp_path):
    """The status page's refresh appends the new rows to what the browser has (charts.js merge)."""
    import json

    from exporter.presentation.drawing import static

    page = tmp_path / "merge.html"
    page.write_text(MERGE_PAGE.format(uplot=static("uplot.iife.min.js").decode(), charts=static("charts.js").decode()), encoding="utf-8")
    dom = dump_dom(tmp_path, page.as_uri())
    got = json.loads(re.search(r'<pre id="out">(.*?)</pre>', dom).group(1))
    assert got == {"t": [20, 30, 40, 50], "kv": [2, 3, 5, 6], "spans": 1, "full": [1]}


AXIS_PAGE = """<!DOCTYPE html><html><body><div data-chart="short"></div><div data-chart="long"></div><pre id="out"></pre>
<script type="application/json" id="hce-data">{data}</script>
<script>{uplot}</script><script>{charts}</script><script>
setTimeout(function () {{
  var c = window.hceCharts.charts, out = {{}};
  Object.keys(c).forEach(function (k) {{
    var u = c[k], cells = u.root.querySelectorAll(".u-legend .u-value");
    out[k] = {{ticks: u.axes[0]._values, legend: Array.prototype.map.call(cells, function (e) {{ return e.textContent; }})}};
  }});
  document.getElementById("out").textContent = JSON.stringify(out);
}}, 500);
</script></body></html>"""


def _timeline(t0: int, rows: int) -> dict:
    return {
        "t": [t0 + 10 * i for i in range(rows)],
        "kv": [round(0.1 + 0.5 * i / rows, 3) for i in range(rows)],
        "mamba": [0.8] * (rows - 1) + [None],  # the newest row without a mamba value: the newest one is shown
        "running": list(range(rows)),
        "queued": [0] * rows,
        "cap": [16] + [None] * (rows - 1),  # logged once
        "spans": [],
        "bucket": 10,
    }


def test_time_axis_and_legend_in_chromium(tmp_path):
    """The timeline's time axis in a real browser: a span of 80 s has ticks 10 s apart, each its
    own label (before: "08:18" three times, "08:19" six, in log time); 1 h 40 min has minutes. Its
    legend, not hovered, holds each line's newest value (before: "-" until hovered)."""
    import json

    from exporter.presentation.drawing import static

    t0 = 1786090710  # 2026-08-07 08:18:30 in log time (written as UTC)
    data = {"charts": {"short": _timeline(t0, 9), "long": _timeline(t0, 600)}, "refresh": 0}
    page = tmp_path / "axis.html"
    page.write_text(
        AXIS_PAGE.format(data=json.dumps(data), uplot=static("uplot.iife.min.js").decode(), charts=static("charts.js").decode()),
        encoding="utf-8",
    )
    dom = dump_dom(tmp_path, page.as_uri())
    got = json.loads(re.search(r'<pre id="out">(.*?)</pre>', dom).group(1))
    short, long = got["timeline:short"], got["timeline:long"]
    assert short["ticks"][0] == "2026-08-07 08:18:30" and short["ticks"][1:3] == ["08:18:40", "08:18:50"], short
    assert len(short["ticks"]) >= 5 and len(set(short["ticks"])) == len(short["ticks"]), short
    assert all(re.fullmatch(r"\d\d:\d\d", v) for v in long["ticks"][1:]) and len(set(long["ticks"])) == len(long["ticks"]), long
    assert short["legend"] == ["2026-08-07 08:19:50", "54%", "80%", "16", "8", "0"], short
    assert long["legend"][0] == "2026-08-07 09:58:20" and long["legend"][1:] == ["60%", "80%", "16", "599", "0"], long
