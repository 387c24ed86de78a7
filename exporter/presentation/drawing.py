"""The one piece of code that draws: HTML panels and chart data for the status page (``/``) and
for ``report --html``.

Charts are drawn in the browser by uPlot (vendored in ``exporter/presentation/static``, MIT, 51 KB minified;
docs/status-page.md says why) from JSON this module writes; ``static/charts.js`` is the only
chart code and both pages use it. The text around the charts (diagnosis, usage now, findings,
recommendations, capacity) is rendered here, in Python, so it is in the HTML without JavaScript
and the status page's refresh swaps in the same fragments.

Nothing refers to the network: the status page loads its scripts from the exporter itself by
relative URLs (``static/...``, ``status.json``: correct behind ``kubectl port-forward`` and
API-server proxies alike), the report inlines them.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import re
from functools import cache
from html import escape
from importlib import resources

from parsers import clock as logclock

from ..catalogues import rulebook
from ..catalogues.rulebook import SHADED_RULES
from ..diagnosis.history import BUCKET_SECONDS as BUCKET
from ..diagnosis.history import Timeline

STATIC_TYPES = {
    "uplot.iife.min.js": "text/javascript; charset=utf-8",
    "uplot.min.css": "text/css; charset=utf-8",
    "charts.js": "text/javascript; charset=utf-8",
    "LICENSE.uplot": "text/plain; charset=utf-8",
}
SCRIPTS = ("uplot.iife.min.js", "charts.js")
# a finding in short words (headlines, legends), most telling first; the shading of its interval on the timeline,
# event findings as a band along the top (they overlap the sustained ones): the rule catalogue's
RULE_WORDS = {r: rulebook.WORDS[r] for r in rulebook.HEADLINE_ORDER}
SHADES = rulebook.SHADES
STRIP_RULES = rulebook.STRIP_RULES

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#f4f5f7}
header.top{background:#1d2733;color:#fff;padding:10px 20px}header.top h1{font-size:18px;margin:0;display:inline}
header.top a{color:#9cc8ff;margin-left:14px}header.top .ver{color:#bbb;margin-left:14px;font-size:12px}header.top .upd{float:right;color:#bbb;font-size:12px;margin-top:4px}
main{padding:12px 20px;max-width:1400px}
section.server{background:#fff;border:1px solid #dde;border-radius:6px;margin:0 0 18px;padding:12px 16px}
section.server h2{font-size:16px;margin:0 0 6px;font-weight:600}section.server h2 .eng{color:#777;font-weight:400;font-size:13px}
.badge{display:inline-block;padding:3px 10px;border-radius:12px;font-weight:700;font-size:15px;margin:2px 0 6px}
.badge.firing{background:#d62728;color:#fff}.badge.ok{background:#2ca02c;color:#fff}.badge.quiet{background:#9a9a9a;color:#fff}.badge.life{background:#e8e8e8;color:#333;margin-left:6px}.badge.life.dead{background:#7f0000;color:#fff}.badge.life.stalled{background:#ff7f0e;color:#fff}
ul.findings.grey{color:#8a8a8a}ul.findings.grey code{color:#8a8a8a}p.quiet-note{color:#6a6a6a;font-style:italic}.start{font-size:13px}
p.words{margin:4px 0}
.now{display:flex;flex-wrap:wrap;gap:6px 28px;margin:8px 0}.meter{display:flex;align-items:center;gap:8px}
.meter .bar{width:180px;height:14px;background:#e6e8eb;border-radius:3px;overflow:hidden}.meter .bar i{display:block;height:100%}
.meter .bar i.kv{background:#1f77b4}.meter .bar i.mamba{background:#d62728}.meter b{min-width:3em}
ul.findings{margin:4px 0 8px;padding-left:20px}ul.findings li{margin:2px 0}
.legend span{display:inline-block;margin-right:14px;font-size:12px}.legend i{display:inline-block;width:14px;height:10px;margin-right:4px;vertical-align:middle;border:1px solid #ccc}
.chart{margin:6px 0;min-height:40px}
table{border-collapse:collapse;margin:6px 0;font-size:13px}td,th{border:1px solid #dde;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f1f4}code{font-size:12.5px;background:#f0f1f4;padding:1px 4px;border-radius:3px}
pre.evidence{font-size:11.5px;background:#f7f7f9;border:1px solid #e3e3e8;padding:6px;overflow-x:auto;white-space:pre}
.cols{display:flex;flex-wrap:wrap;gap:0 28px}.muted{color:#777}
h3{font-size:14px;margin:12px 0 4px}
"""


@cache
def static(name: str) -> bytes:
    """A vendored asset of the package (``exporter/presentation/static``); KeyError if not one of ours."""
    if name not in STATIC_TYPES:
        raise KeyError(name)
    return resources.files("exporter.presentation").joinpath("static", name).read_bytes()


def clock(ts: float) -> float:
    """Log time as "clock seconds": the wall-clock time the log printed (in the zone ``--log.timezone``
    names, the one its zone-less headers were read in), written as UTC, so the chart's axis shows the
    log's own times (charts.js reads them in UTC)."""
    return calendar.timegm(logclock.wall(ts)) + (ts % 1.0)


def slug(source: str, dp_rank: str) -> str:
    """A stable HTML id for one server."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", source).strip("-")[:40] or "src"
    return f"{base}-dp{re.sub(r'[^0-9A-Za-z]', '', dp_rank)}-{hashlib.sha1(source.encode()).hexdigest()[:6]}"


# --------------------------------------------------------------------------------------------
# chart data


def _ints(col: list) -> list:
    return [None if v is None else int(v) for v in col]


def chart_data(tl: Timeline | None, since: float | None = None) -> dict:
    """The timeline of one server as the arrays charts.js draws (x in clock seconds), plus the
    finding spans ``[x0, x1, colour, rule, strip]`` over the whole ring. ``since`` (clock
    seconds): only rows from there on (``"since"`` is set in the result: the browser appends)."""
    if tl is None or not len(tl):
        return {"t": [], "kv": [], "mamba": [], "running": [], "queued": [], "cap": [], "spans": [], "bucket": BUCKET}
    t, (kv, mamba, running, queued, cap), bits = tl.columns()
    # log time -> clock seconds: one zone offset for the whole window unless it spans a DST change
    off0, off1 = clock(t[0]) - t[0], clock(t[-1]) - t[-1]
    x = [v + off0 for v in t] if off0 == off1 else [clock(v) for v in t]
    x = [int(v) if v.is_integer() else v for v in x]  # bucket starts are whole seconds: shorter JSON
    width = tl.bucket
    spans: list[list] = []
    for k, rule in enumerate(SHADED_RULES):
        mask, start = 1 << k, None
        for i, b in enumerate(bits):
            if b & mask:
                if start is None:
                    start = x[i]
            elif start is not None:
                spans.append([start, x[i], SHADES[rule], rule, 1 if rule in STRIP_RULES else 0])
                start = None
        if start is not None:
            spans.append([start, x[-1] + width, SHADES[rule], rule, 1 if rule in STRIP_RULES else 0])
    k = 0
    if since is not None:
        k = len(x)
        while k and x[k - 1] >= since:
            k -= 1
    out = {
        "t": x[k:],
        "kv": kv[k:],
        "mamba": mamba[k:],
        "running": _ints(running[k:]),
        "queued": _ints(queued[k:]),
        "cap": _ints(cap[k:]),
        "spans": spans,
        "bucket": width,
        "first": x[0],
    }
    if since is not None:
        out["since"] = since
    return out


def histogram_data(hist: dict) -> dict:
    """Share of log time per usage decile of each pool (the report's distributions)."""
    out: dict = {"x": [round(i / 10 + 0.05, 2) for i in range(10)], "kv": [None] * 10, "mamba": [None] * 10}
    for pool in ("kv", "mamba"):
        bins = hist.get(pool) or []
        tot_s = sum(b["seconds"] for b in bins)
        tot_n = sum(b["samples"] for b in bins)
        vals = []
        for b in bins[:10]:
            frac = (b["seconds"] / tot_s) if tot_s else (b["samples"] / tot_n if tot_n else 0.0)
            vals.append(round(frac, 4))
        if vals:
            out[pool] = vals + [None] * (10 - len(vals))
    return out


# --------------------------------------------------------------------------------------------
# HTML fragments


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def _int(v: float | None) -> str:
    return "-" if v is None else f"{int(v):,}"


def _meter(label: str, cls: str, v: float | None) -> str:
    if v is None:  # e.g. vLLM logs no mamba usage
        return f'<div class="meter"><span>{label}</span><span class="muted">not logged</span></div>'
    w = max(0.0, min(1.0, v)) * 100
    return (
        f'<div class="meter"><span>{label}</span><div class="bar"><i class="{cls}" style="width:{w:.0f}%"></i></div><b>{_pct(v)}</b></div>'
    )


def legend(spans: list) -> str:
    rules = [r for r in SHADED_RULES if any(s[3] == r for s in spans)]
    if not rules:
        return ""
    items = "".join(f'<span><i style="background:{SHADES[r]}"></i>{escape(RULE_WORDS[r])}</span>' for r in rules)
    return f'<div class="legend">shaded: {items}</div>'


def diagnosis_html(st: dict, spans: list, when: str = "now") -> str:
    """Headline, the server's state (idle, stalled, stopped, dead: since when, why), the diagnosis in words, usage
    now, running vs cap vs queued, how old the last line is, the findings with since-when and where to start, and
    the shading legend of the chart below. The findings of a server that is not serving (``report.life_of``: its
    log's state, or on a live page the age of its last line where the log cannot tell) are greyed: they are what
    it said last, not the state now."""
    n = st["now"]
    life = st.get("life") or {}
    quiet = st.get("quiet")
    cls = "quiet" if quiet and st["firing"] else "firing" if st["firing"] else "ok"
    out = [f'<div class="badge {cls}">{escape(st["headline"])}</div>']
    state = life.get("state")
    if state:
        out.append(f'<div class="badge life {escape(state)}">{escape(state)}</div>')
    last = " The findings below are what it said last." if st["firing"] else ""
    if life.get("by") == "log":
        out.append(f'<p class="words quiet-note">{escape(life["sentence"])}{last}</p>')
    elif quiet:
        told = f" Its log last said {state}." if state else ""
        out.append(
            f'<p class="words quiet-note">No line from this server for {escape(_dur(st["age_seconds"]))}: it has gone quiet (idle, stopped '
            f"or dead, or its log stopped being written).{escape(told)}{last}</p>"
        )
    elif state:
        out.append(f'<p class="words life">{escape(life["sentence"])}</p>')
    out += [f'<p class="words">{escape(w)}</p>' for w in st["words"]]
    cap = "" if n["cap"] is None else f" / cap {_int(n['cap'])}"
    age = f" ({_dur(st['age_seconds'])} ago)" if st.get("age_seconds") is not None else ""
    out.append(
        '<div class="now">'
        + _meter("KV", "kv", n["kv"])
        + _meter("mamba", "mamba", n["mamba"])
        + f'<div class="meter">running <b>{_int(n["running"])}{cap}</b> &middot; queued <b>{_int(n["queued"])}</b></div>'
        + f'<div class="meter muted">{escape(when)}: {escape(st["at"])}{escape(age)}</div></div>'
    )
    if st["findings"]:
        items = []
        for f in st["findings"]:
            since = f" since {escape(f['since'])}" if f["since"] else ""
            dur = f" ({_dur(f['for_seconds'])} of log time)" if f["for_seconds"] else ""
            sh = f.get("start_here")
            start = (
                f'<br><span class="start">Start here: <code>{escape(sh["flag"])}</code> &mdash; {escape(sh["effect"])}</span>' if sh else ""
            )
            items.append(f"<li><b>{escape(f['label'])}</b>{since}{dur}: {escape(f['title'].split(': ', 1)[-1])}{start}</li>")
        out.append(f'<ul class="findings{" grey" if quiet else ""}">' + "".join(items) + "</ul>")
    out.append(legend(spans))
    return "".join(out)


def _dur(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def advice_scope(st: dict) -> str:
    """The words beside the recommendations' heading. The report's are for every finding of the log
    (docs/rules.md#report): when none is live at its end, they say so (advice for the next such incident)."""
    scope = "" if st.get("firing") else "for the findings of this log, none live at its end; "
    return f"{scope}each flag once; start with the first of each finding, one change at a time"


def actions_html(st: dict, facts: list[tuple[str, str]]) -> str:
    """The recommended flags in the documented order (each once, its rank under each finding), those with a
    caveat apart, the before/after of the last restart, vLLM's shared pool, and the capacity facts."""
    out = []
    recs = st["recommendations"]
    ranked = [r for r in recs if r["rank"]]
    if ranked:
        rows = "".join(
            f"<tr><td>{i}</td><td><code>{escape(r['flag'])}</code></td><td>{escape(r['effect'])}</td>"
            f"<td>{escape(r['why'] + ''.join('; assumes ' + a for a in r['assumes']))}</td><td>{escape(r['risk'])}</td>"
            f"<td>{escape(', '.join(RULE_WORDS.get(x, x) + ' #' + str(r['ranks'][x]) for x in r['rules'] if x in r['ranks']))}</td></tr>"
            for i, r in enumerate(ranked, 1)
        )
        out.append(
            f'<h3>Recommended flags <span class="muted">({escape(advice_scope(st))})</span></h3>'
            "<table><tr><th>#</th><th>flag</th><th>expected effect</th><th>why</th><th>risk</th><th>for (rank)</th></tr>"
            + rows
            + "</table>"
        )
    held = [r for r in recs if not r["rank"]]
    if held:
        rows = "".join(
            f"<tr><td><code>{escape(r['flag'])}</code></td><td>{escape(r['effect'])}</td><td>{escape('; '.join(r['caveats']))}</td></tr>"
            for r in held
        )
        out.append(
            '<h3>Not to apply as they are <span class="muted">(never in an alert)</span></h3>'
            "<table><tr><th>flag</th><th>expected effect</th><th>caveat</th></tr>" + rows + "</table>"
        )
    if recs and st.get("balanced_ratio"):
        out.append(f"<p>Balanced <code>--mamba-full-memory-ratio</code> for the observed usage: <b>{st['balanced_ratio']:g}</b></p>")
    out.append(before_after_html(st.get("before_after")))
    out.append(pool_html(st.get("vllm_pool_words") or []))
    if facts:
        mc = st.get("model_check_words")
        note = f'<p class="muted">{escape(mc[0].upper() + mc[1:])}.</p>' if mc else ""
        out.append(
            "<h3>Capacity</h3><table>" + "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in facts) + "</table>" + note
        )
    return "".join(out)


def _pct1(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def before_after_html(ba: dict | None) -> str:
    """The last restart: the settings that changed, pools and cap before / after / predicted, binding, queueing."""
    if not ba:
        return ""
    changed = (
        "; ".join(
            f"{c['setting']} {c['before'] if c['before'] is not None else 'unset'} → {c['after'] if c['after'] is not None else 'unset'}"
            for c in ba["changed"]
        )
        or "no logged setting (see the notes)"
    )
    rows = "".join(
        f"<tr><td>{escape(r['what'])}</td><td>{_int(r['before'])}</td><td>{_int(r['after'])}</td>"
        f"<td>{_int(r.get('predicted')) if 'predicted' in r else ''}{escape(' (' + r['verdict'] + ')' if r.get('verdict') else '')}</td></tr>"
        for r in ba["pools"]
    )
    b, a = ba["before"], ba["after"]
    bind = ""
    if b["binding"] and a["binding"]:
        bind = (
            "".join(
                f"<tr><td>{escape(rulebook.BINDING_WORDS.get(k, (k,))[0])} binds</td><td>{_pct1(b['binding'].get(k))}</td><td>{_pct1(a['binding'].get(k))}</td><td></td></tr>"
                for k in b["binding"]
            )
            + f"<tr><td>requests waiting</td><td>{_pct1(b['queued'])}</td><td>{_pct1(a['queued'])}</td><td></td></tr>"
        )
    notes = "".join(f"<li>{escape(n)}</li>" for n in ba["notes"])
    preds = "".join(
        f"<li>predicted for <code>{escape(p['flag'])} {escape(p['value'])}</code>: {escape(p['effect'])}</li>" for p in ba["predictions"]
    )
    return (
        f'<h3>Before and after the restart <span class="muted">({ba["boots"]} boots in the log)</span></h3>'
        f"<p>Changed: {escape(changed)}</p>"
        "<table><tr><th></th><th>before</th><th>after</th><th>predicted from the first boot's log</th></tr>"
        + rows
        + bind
        + "</table>"
        + (f"<ul>{preds}{notes}</ul>" if preds or notes else "")
    )


def pool_html(words: list[str]) -> str:
    """vLLM's shared block pool: the status's sentences (``workload.pool_words``)."""
    if not words:
        return ""
    return "<h3>Shared block pool (vLLM V1)</h3><ul>" + "".join(f"<li>{escape(x)}</li>" for x in words) + "</ul>"


def revisions_html(revs: list[dict] | None) -> str:
    """The facts this boot stated again (vLLM 0.34 sizes its KV cache after warmup: one boot, its facts revised),
    each value with its stage, its time and the line that says it (the report's ``revisions``)."""
    if not revs:
        return ""

    def row(r: dict) -> str:
        mark = " (in force)" if r["in_force"] else ""
        cells = (r["value_words"], r["stage_words"] + mark, r["time"])
        tr = '<tr class="in-force">' if r["in_force"] else "<tr>"
        return (
            f"{tr}<th>{escape(r['label'])}</th>"
            + "".join(f"<td>{escape(c)}</td>" for c in cells)
            + f"<td><code>{escape(r['line'] or '')}</code></td></tr>"
        )

    rows = "".join(row(r) for r in revs)
    return (
        '<h3>Sized again in this boot</h3><p class="muted">vLLM sizes the KV cache after warmup: one boot, its facts '
        "revised; the value in force is the last.</p>"
        "<table><tr><th>fact</th><th>value</th><th>stage</th><th>time</th><th>line</th></tr>" + rows + "</table>"
    )


def workload_html(wl: dict | None) -> str:
    """The report's request lengths and the ratio that serves them."""
    if not wl:
        return ""
    rows = []
    for key, what in (("running", "KV tokens per running request (batch means)"), ("prompt", "prompt tokens per new request")):
        d = wl.get(key)
        if d:
            rows.append(
                f"<tr><td>{escape(what)}</td><td>{d['samples']:,}</td>"
                + "".join(f"<td>{_int(d[q])}</td>" for q in ("p10", "p50", "p90", "max"))
                + "</tr>"
            )
    table = (
        "<table><tr><th>length</th><th>samples</th><th>p10</th><th>p50</th><th>p90</th><th>max</th></tr>" + "".join(rows) + "</table>"
        if rows
        else ""
    )
    ratio = ""
    if wl.get("ratio"):
        ratio = (
            "<p><code>--mamba-full-memory-ratio</code> for these lengths: "
            + ", ".join(f"{escape(q)} <b>{r:g}</b>" for q, r in wl["ratio"].items())
            + "</p>"
        )
    verdict = f"<p>{escape(wl['verdict'])}</p>" if wl.get("verdict") else ""
    return "<h3>Request lengths (the workload behind the ratio)</h3>" + table + ratio + verdict


def usage_html(srv: dict) -> str:
    """The report's usage summary: percentiles of both pools and the binding pool's share of log time."""
    out = []
    if srv["usage"]:
        rows = "".join(
            f"<tr><td>{escape(pool)}</td><td>{u['samples']:,}</td>"
            + "".join(f"<td>{_pct(u.get(q))}</td>" for q in ("min", "p50", "p90", "max"))
            + "</tr>"
            for pool, u in srv["usage"].items()
        )
        out.append("<table><tr><th>pool</th><th>samples</th><th>min</th><th>p50</th><th>p90</th><th>max</th></tr>" + rows + "</table>")
    if any(v["seconds"] for v in srv["binding"].values()):
        rows = "".join(
            f"<tr><td>{escape(rulebook.BINDING_WORDS.get(k, (k,))[0])}</td><td>{v['share'] * 100:.1f}%</td><td>{_dur(v['seconds'])}</td></tr>"
            for k, v in srv["binding"].items()
        )
        out.append("<table><tr><th>binding</th><th>share of log time</th><th>time</th></tr>" + rows + "</table>")
    return '<div class="cols">' + "".join(f"<div>{x}</div>" for x in out) + "</div>" if out else ""


def findings_html(findings: list[dict]) -> str:
    """Each finding, live or past, with its episodes and the log lines that prove it."""
    if not findings:
        return "<h3>Findings</h3><p>None: no rule fired on this log.</p>"
    out = ["<h3>Findings and the log lines that prove them</h3>"]
    for f in findings:
        state = "firing at the end of the log" if f["live"] else "cleared"
        out.append(f"<p><b>{escape(RULE_WORDS.get(f['rule'], f['rule']))}</b> ({state}): {escape(f['title'])}</p><ul>")
        if f.get("detail"):
            out.append(f"<li>{escape(f['detail'])}</li>")
        for ep in f["episodes"]:
            out.append(f"<li>fired {escape(ep['start'])} &rarr; {escape(ep['end'] or 'still firing at the end of the log')}</li>")
        if f["firing_seconds"]:
            out.append(f"<li>firing for {_dur(f['firing_seconds'])} of log time</li>")
        out.append("</ul>")
        if f["evidence"]:
            lines = "\n".join(f"[{e['kind']}] {e['line']}" for e in f["evidence"])
            out.append(f'<pre class="evidence">{escape(lines)}</pre>')
    return "".join(out)


def whatif_html(rows: list[dict]) -> str:
    """``plan``-style what-if of the recommended flags: pool sizes and cap before -> after."""
    if not rows:
        return ""

    def arrow(v: list | None) -> str:
        if not v:
            return ""
        a, b = v
        return escape(_int(a) if a == b else f"{_int(a)} → {_int(b)}")

    body = []
    for r in rows:
        if "cap" not in r and r["flag"].startswith("("):
            body.append(f'<tr><td colspan="7" class="muted">{escape(r["effect"])}</td></tr>')
            continue
        cover = {True: "yes", False: "no"}.get(r.get("covers_peak_demand"), "")
        body.append(
            f"<tr><td><code>{escape(r['flag'])}</code></td><td>{arrow(r.get('mamba_slots'))}</td><td>{arrow(r.get('slots_per_request'))}</td>"
            f"<td>{arrow(r.get('kv_tokens'))}</td><td>{arrow(r.get('cap'))}</td><td>{cover}</td><td>{escape(r['effect'])}</td></tr>"
        )
    return (
        "<h3>What if: the recommended flags on this server's logged capacity</h3><table><tr><th>flag</th><th>mamba slots</th>"
        "<th>slots per request</th><th>KV tokens</th><th>request cap</th><th>covers peak demand</th><th>effect</th></tr>"
        + "".join(body)
        + "</table>"
    )


def server_section(key: str, title: str, engine: str | None, top: str, bottom: str, extra: str = "") -> str:
    """One server: the refreshable fragments around its timeline chart."""
    return (
        f'<section class="server" id="s-{key}"><h2>{title} <span class="eng">{escape(engine or "engine not detected yet")}</span></h2>'
        f'<div id="p-{key}">{top}</div>'
        f'<div class="chart" data-chart="{key}" data-kind="timeline"></div>'
        f'<div id="q-{key}">{bottom}</div>{extra}</section>'
    )


def document(title: str, body: str, data: dict, inline: bool, header_links: str = "", updated: str = "", refresh: int = 0) -> str:
    """The page around ``body``: CSS, the JSON the charts read, and the scripts (inlined for a
    file that must open offline, else loaded from the exporter's ``static/``). ``refresh``: a
    live page; without JavaScript it reloads itself every few refresh periods instead."""
    blob = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    if inline:
        css = static("uplot.min.css").decode()
        scripts = "".join(f"<script>{static(n).decode()}</script>" for n in SCRIPTS)
        head_css = f"<style>{css}</style>"
    else:
        head_css = '<link rel="stylesheet" href="static/uplot.min.css">'
        scripts = "".join(f'<script src="static/{n}"></script>' for n in SCRIPTS)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{escape(title)}</title>'
        + (f'<noscript><meta http-equiv="refresh" content="{refresh * 6}"></noscript>' if refresh else "")
        + f"{head_css}<style>{CSS}</style></head><body>"
        f'<header class="top"><h1>{escape(title)}</h1>{header_links}<span class="upd" id="hce-updated">{escape(updated)}</span></header>'
        f'<main>{body}</main><script type="application/json" id="hce-data">{blob}</script>{scripts}</body></html>\n'
    )


__all__ = [
    "actions_html",
    "before_after_html",
    "chart_data",
    "diagnosis_html",
    "document",
    "histogram_data",
    "pool_html",
    "revisions_html",
    "server_section",
    "slug",
    "static",
    "workload_html",
]
