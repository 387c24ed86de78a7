"""How a report reads: the report's data (exporter.report.build_report) as terminal text,
Markdown, or one self-contained HTML file with the charts (exporter.drawing).

Apart from the data so that what a report *says* (the dict, also ``--json`` and the status page's
``server_status``) has one place, and how it is *laid out* another.
"""

from __future__ import annotations

import time
from html import escape

from . import drawing, rulebook
from .drawing import chart_data
from .report import fact_rows, flag_text, fmt_dur, fmt_int, fmt_pct, fmt_value


def _bar(frac: float, width: int = 30) -> str:
    n = int(round(frac * width))
    return "#" * n + "." * (width - n)


def _shares(h: list[dict]) -> list[tuple[str, float]]:
    """Histogram bins as (``"10-20%"``, share of log time, or of samples when no time is known)."""
    tot_s = sum(b["seconds"] for b in h)
    tot_n = sum(b["samples"] for b in h)
    return [
        (f"{b['lo'] * 100:.0f}-{b['hi'] * 100:.0f}%", (b["seconds"] / tot_s) if tot_s else (b["samples"] / tot_n if tot_n else 0.0))
        for b in h
    ]


BINDING_LABELS = {k: short for k, (short, _) in rulebook.BINDING_WORDS.items()}


def _episode(ep: dict) -> str:
    return f"fired {ep['start']} -> {ep['end'] or 'still firing at the end of the log'}"


def render_text(rep: dict) -> str:
    out: list[str] = []
    w = out.append
    for s in rep["sources"]:
        w("=" * 100)
        w(f"source {s['source']}  engine {s['engine'] or '?'}  release {s['version']}  restarts {s['restarts']}")
        if s["config"]:
            w("config: " + ", ".join(f"{k}={fmt_value(v)}" for k, v in s["config"].items()))
        for srv in s["servers"]:
            w("-" * 100)
            lt = srv["log_time"]
            w(f"dp_rank {srv['dp_rank']}   log time {lt['first']} .. {lt['last']} ({fmt_dur(lt['seconds'])})")
            st = srv.get("status")
            if st:
                w(f"Diagnosis at the end of the log: {st['headline']}")
                for line in st["words"]:
                    w(f"  {line}")
            w("")
            w("Capacity")
            for label, text in fact_rows(srv["capacity"]):
                w(f"  {label:40s} {text}")
            if srv["peaks"]:
                w("  " + "peak " + ", ".join(f"{k} {fmt_int(v)}" for k, v in srv["peaks"].items()))
            w("")
            if srv["usage"]:
                w("Usage (batch lines)      samples    min    p50    p90    max")
                for pool, u in srv["usage"].items():
                    w(
                        f"  {pool:20s} {fmt_int(u['samples']):>9s}  "
                        + "  ".join(f"{fmt_pct(u[q]):>5s}" for q in ("min", "p50", "p90", "max"))
                    )
                for pool, h in srv["histogram"].items():
                    w(f"  {pool} usage, share of log time{'' if sum(b['seconds'] for b in h) else ' (by samples)'}:")
                    for label, frac in _shares(h):
                        w(f"    {label:>8s} |{_bar(frac)}| {frac * 100:5.1f}%")
                w("")
            if any(v["seconds"] for v in srv["binding"].values()):
                w("Binding (share of log time)")
                for k, v in srv["binding"].items():
                    w(f"  {BINDING_LABELS.get(k, k):12s} |{_bar(v['share'])}| {v['share'] * 100:5.1f}%  ({fmt_dur(v['seconds'])})")
                w("")
            if not srv["findings"]:
                w("Findings: none")
            for f in srv["findings"]:
                state = "FIRING" if f["live"] else "cleared"
                w(f"Finding {f['rule']} [{state}] - {f['title']}")
                if f.get("detail"):
                    w(f"  {f['detail']}")
                for ep in f["episodes"]:
                    w(f"  {_episode(ep)}")
                if f["firing_seconds"]:
                    w(f"  firing for {fmt_dur(f['firing_seconds'])} of log time")
                for e in f["evidence"]:
                    w(f"    [{e['kind']:6s}] {e['line']}")
                w("")
            if srv["recommendations"]:
                w("Recommendations")
                for r in srv["recommendations"]:
                    w(f"  [{r['rule']}] {flag_text(r['flag'], r['value'])}")
                    w(f"      effect: {r['effect']}")
                    if r["why"]:
                        w(f"      why:    {r['why']}")
                if srv.get("recommended_mamba_full_memory_ratio"):
                    w(f"  balanced --mamba-full-memory-ratio for the observed usage: {srv['recommended_mamba_full_memory_ratio']:g}")
                w("")
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    """Text in a Markdown table cell."""
    return text.replace("|", "\\|")


def render_markdown(rep: dict) -> str:
    out: list[str] = ["# hybrid-cache-exporter report", ""]
    w = out.append
    for s in rep["sources"]:
        w(f"## Source `{s['source']}` ({s['engine'] or '?'}, release {s['version']})")
        w("")
        if s["config"]:
            w("| setting | value |")
            w("|---|---|")
            for k, v in s["config"].items():
                w(f"| `{k}` | `{_md(fmt_value(v))}` |")
            w("")
        for srv in s["servers"]:
            lt = srv["log_time"]
            w(f"### dp_rank {srv['dp_rank']}: {lt['first']} .. {lt['last']} ({fmt_dur(lt['seconds'])})")
            w("")
            st = srv.get("status")
            if st:
                w(f"**Diagnosis at the end of the log: {st['headline']}.** " + " ".join(st["words"]))
                w("")
            w("**Capacity**")
            w("")
            w("| fact | value |")
            w("|---|---|")
            for label, text in fact_rows(srv["capacity"]):
                w(f"| {label} | {_md(text)} |")
            for k, v in srv["peaks"].items():
                w(f"| peak {k} | {fmt_int(v)} |")
            w("")
            if srv["usage"]:
                w("**Usage**")
                w("")
                w("| pool | samples | min | p50 | p90 | max |")
                w("|---|---|---|---|---|---|")
                for pool, u in srv["usage"].items():
                    w(f"| {pool} | {fmt_int(u['samples'])} | " + " | ".join(fmt_pct(u[q]) for q in ("min", "p50", "p90", "max")) + " |")
                w("")
                w("```")
                for pool, h in srv["histogram"].items():
                    w(f"{pool} usage (share of log time)")
                    for label, frac in _shares(h):
                        w(f"  {label:>8s} |{_bar(frac)}| {frac * 100:5.1f}%")
                w("```")
                w("")
            if any(v["seconds"] for v in srv["binding"].values()):
                w(
                    "**Binding (share of log time)**: "
                    + ", ".join(f"{BINDING_LABELS.get(k, k)} {v['share'] * 100:.1f}%" for k, v in srv["binding"].items())
                )
                w("")
            w("**Findings**" + (": none" if not srv["findings"] else ""))
            w("")
            for f in srv["findings"]:
                w(f"- **`{f['rule']}`** ({'firing' if f['live'] else 'cleared'}): {f['title']}")
                if f.get("detail"):
                    w(f"  - {f['detail']}")
                for ep in f["episodes"]:
                    w(f"  - fired {ep['start']} → {ep['end'] or 'end of log'}")
                if f["evidence"]:
                    w("")
                    w("  ```")
                    for e in f["evidence"]:
                        w(f"  {e['line']}")
                    w("  ```")
            w("")
            if srv["recommendations"]:
                w("**Recommendations**")
                w("")
                w("| finding | flag | value | expected effect | why |")
                w("|---|---|---|---|---|")
                for r in srv["recommendations"]:
                    w(f"| {r['rule']} | `{r['flag']}` | `{r['value']}` | {_md(r['effect'])} | {_md(r['why'])} |")
                w("")
                if srv.get("recommended_mamba_full_memory_ratio"):
                    w(f"Balanced `--mamba-full-memory-ratio` for the observed usage: **{srv['recommended_mamba_full_memory_ratio']:g}**")
                    w("")
    return "\n".join(out) + "\n"


def render_html(rep: dict, title: str = "hybrid-cache-exporter report") -> str:
    """One self-contained HTML file (scripts and data inline, no network): per server the
    diagnosis at the end of the log, the timeline of both pools and of running/queued against
    the cap with the findings shaded, usage distributions, findings with their evidence lines,
    recommendations with their effect, the what-if of the recommended flags, and capacity."""
    charts: dict = {}
    hists: dict = {}
    overview = []
    body = []
    for s in rep["sources"]:
        body.append(
            f'<section class="server"><h2>source <b>{escape(s["source"])}</b> <span class="eng">{escape(s["engine"] or "engine not detected")}'
            f", release {escape(s['version'])}, {s['restarts']} restart(s), lines: "
            + ", ".join(f"{fmt_int(n)} {escape(k)}" for k, n in s["lines"].items())
            + "</span></h2>"
        )
        if s["config"]:
            rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(fmt_value(v))}</td></tr>" for k, v in s["config"].items())
            body.append(
                f"<details><summary>configuration from the log ({len(s['config'])} settings)</summary><table>{rows}</table></details>"
            )
        body.append("</section>")
        for srv in s["servers"]:
            st = srv["status"]
            key = drawing.slug(s["source"], srv["dp_rank"])
            chart = srv.get("chart") or chart_data(None)
            charts[key] = chart
            hists[key] = drawing.histogram_data(srv["histogram"])
            lt = srv["log_time"]
            overview.append(
                f'<tr><td><a href="#s-{key}">{escape(s["source"])}</a></td><td>{escape(srv["dp_rank"])}</td>'
                f'<td><span class="badge {"firing" if st["firing"] else "ok"}">{escape(st["headline"])}</span></td>'
                f"<td>{escape(lt['first'])} .. {escape(lt['last'])} ({fmt_dur(lt['seconds'])})</td></tr>"
            )
            title_html = f"source <b>{escape(s['source'])}</b> &middot; DP rank {escape(srv['dp_rank'])}"
            top = drawing.diagnosis_html(st, chart["spans"], when="end of the log")
            extra = (
                "<h3>Usage</h3>"
                + drawing.usage_html(srv)
                + (f'<div class="chart" data-chart="{key}" data-kind="histogram"></div>' if srv["histogram"] else "")
                + drawing.findings_html(srv["findings"])
                + drawing.whatif_html(srv["whatif"])
            )
            body.append(
                drawing.server_section(key, title_html, s["engine"], top, drawing.actions_html(st, fact_rows(srv["capacity"])), extra)
            )
    head = (
        '<section class="server"><h2>Summary</h2><table><tr><th>source</th><th>DP rank</th><th>diagnosis at the end of the log</th>'
        "<th>log time</th></tr>" + "".join(overview) + "</table></section>"
    )
    data = {"refresh": 0, "charts": charts, "histograms": hists}
    made = "made " + time.strftime("%Y-%m-%d %H:%M")
    return drawing.document(title, head + "".join(body), data, inline=True, updated=made)


__all__ = ["render_html", "render_markdown", "render_text"]
