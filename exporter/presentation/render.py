"""How a report reads: the report's data (exporter.presentation.report.build_report) as terminal text,
Markdown, or one self-contained HTML file with the charts (exporter.presentation.drawing).

Apart from the data so that what a report *says* (the dict, also ``--json`` and the status page's
``server_status``) has one place, and how it is *laid out* another.
"""

from __future__ import annotations

import time
from html import escape

from ..catalogues import rulebook
from . import drawing
from .drawing import chart_data
from .report import fact_rows, flag_text, fmt_dur, fmt_int, fmt_pct, fmt_ts, fmt_value


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

# --------------------------------------------------------------------------------------------
# sections shared by the text and the Markdown report: lists of (kind, text) lines


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def start_lines(st: dict) -> list[str]:
    """Per live finding, its first recommendation (rank 1 of the documented order)."""
    out = []
    for f in st.get("findings", ()):
        sh = f.get("start_here")
        if sh:
            out.append(f"Start here for {f['label']}: {sh['flag']} ({sh['effect']})")
    return out


def before_after_lines(ba: dict | None) -> list[str]:
    """The last restart of a server: what changed, pools and cap before/after/predicted, binding and queueing."""
    if not ba:
        return []
    out = [f"Before and after the restart at {fmt_ts(ba['restart_at'])} ({ba['boots']} boots in the log)"]
    if ba["changed"]:
        out.append(
            "  changed: "
            + "; ".join(
                f"{c['setting']} {fmt_value(c['before'])} → {fmt_value(c['after'])}" + (f" ({c['flag']})" if c["flag"] else "")
                for c in ba["changed"]
            )
        )
    for n in ba["notes"]:
        out.append(f"  note: {n}")
    if ba["pools"]:
        out.append(f"  {'':18s} {'before':>10s} {'after':>10s}  predicted from the first boot's log")
        for r in ba["pools"]:
            pred = ""
            if "predicted" in r:
                pred = f"{fmt_int(r['predicted'])}" + (f" ({r['verdict']})" if r.get("verdict") else "")
            out.append(f"  {r['what']:18s} {fmt_int(r['before']):>10s} {fmt_int(r['after']):>10s}  {pred}")
    for p in ba["predictions"]:
        out.append(f"  the exporter's prediction for {flag_text(p['flag'], p['value'])}: {p['effect']}")
    b, a = ba["before"], ba["after"]
    if b["binding"] and a["binding"]:
        out.append(
            "  binding share of log time: "
            + ", ".join(f"{BINDING_LABELS.get(k, k)} {_pct(b['binding'].get(k))} → {_pct(a['binding'].get(k))}" for k in b["binding"])
        )
        out.append(f"  requests waiting: {_pct(b['queued'])} → {_pct(a['queued'])} of log time")
    out.append(f"  findings: {', '.join(b['fired']) or 'none'} → {', '.join(a['fired']) or 'none'}")
    return out


def revision_lines(revs: list[dict] | None) -> list[str]:
    """The facts this boot revised (vLLM 0.34: sized again after warmup, one boot), each value with its line."""
    if not revs:
        return []
    out = ["Sized again in this boot (vLLM sizes the KV cache after warmup: one boot, its facts revised)"]
    for r in revs:
        mark = "in force" if r["in_force"] else "earlier"
        out.append(f"  {r['label']:34s} {r['value_words']:>16s}  {r['stage_words']} ({mark}), {r['time']}")
        if r["line"]:
            out.append(f"    {r['line']}")
    return out


def workload_lines(wl: dict | None) -> list[str]:
    """The request lengths and the ratio that serves them."""
    if not wl:
        return []
    out = ["Request lengths (the workload behind the ratio)"]
    for key, what in (
        ("running", "KV tokens per running request (batch means)"),
        ("prompt", "prompt tokens per new request (prefill lines)"),
    ):
        d = wl.get(key)
        if d:
            out.append(
                f"  {what}: p10 {fmt_int(d['p10'])}, p50 {fmt_int(d['p50'])}, p90 {fmt_int(d['p90'])}, max {fmt_int(d['max'])} ({fmt_int(d['samples'])} samples)"
            )
    for b in wl.get("histogram", ()):
        out.append(f"    {fmt_int(b['lo']):>9s}-{fmt_int(b['hi']):<9s} |{_bar(b['share'])}| {b['share'] * 100:5.1f}%")
    if wl.get("ratio"):
        out.append("  --mamba-full-memory-ratio for these lengths: " + ", ".join(f"{q} {r:g}" for q, r in wl["ratio"].items()))
    if wl.get("verdict"):
        out.append(f"  {wl['verdict']}")
    return out


def pool_lines(st: dict) -> list[str]:
    """vLLM's shared block pool (the status's sentences)."""
    words = st.get("vllm_pool_words") or []
    return ["Shared block pool (vLLM V1: KV and mamba state in one pool)", *(f"  {w}" for w in words)] if words else []


def advice_lines(st: dict) -> list[str]:
    """The recommendations, each flag once per server, in the documented order; those with a caveat apart."""
    recs = st.get("recommendations") or []
    if not recs:
        return []
    out = [f"Recommendations ({drawing.advice_scope(st)})"]
    ranked = [d for d in recs if d["rank"]]
    for i, d in enumerate(ranked, 1):
        fors = ", ".join(f"{r} #{d['ranks'][r]}" for r in d["rules"] if r in d["ranks"])
        out.append(f"  {i}. {d['flag']}   [{fors}]")
        out.append(f"       effect: {d['effect']}")
        if d["why"]:
            out.append(f"       why:    {d['why']}")
        out.append(f"       risk:   {d['risk']}")
        for a in d["assumes"]:
            out.append(f"       assumes: {a}")
    held = [d for d in recs if not d["rank"]]
    if held:
        out.append("  Not to apply as they are (never in an alert):")
        for d in held:
            out.append(f"     {d['flag']}   [{', '.join(d['rules'])}]")
            out.append(f"       effect: {d['effect']}")
            for c in d["caveats"]:
                out.append(f"       caveat: {c}")
    return out


def _episode(ep: dict) -> str:
    return f"fired {ep['start']} -> {ep['end'] or 'still firing at the end of the log'}"


def life_line(st: dict) -> str:
    """The server's state in a sentence (``report.life_of``), and, when it is not serving, that its findings are
    what it said last; '' when the log told no state."""
    life = st.get("life") or {}
    if not life.get("state"):
        return ""
    last = " Its findings are what it said last, not the state now." if life.get("quiet") and st.get("firing") else ""
    return life["sentence"] + last


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
            w(f"dp_rank {srv['dp_rank']}   log time {lt['first']} .. {lt['last']} ({fmt_dur(lt['seconds'])}, zone {rep.get('zone', '?')})")
            st = srv.get("status")
            if st:
                w(f"Diagnosis at the end of the log: {st['headline']}")
                if life_line(st):
                    w(f"  {life_line(st)}")
                for line in st["words"]:
                    w(f"  {line}")
                for line in start_lines(st):
                    w(f"  {line}")
            w("")
            w("Capacity")
            for label, text in fact_rows(srv["capacity"]):
                w(f"  {label:40s} {text}")
            if srv["peaks"]:
                w("  " + "peak " + ", ".join(f"{k} {fmt_int(v)}" for k, v in srv["peaks"].items()))
            mc = (st or {}).get("model_check_words")
            if mc:
                w(f"  {mc}")
            w("")
            rev = revision_lines(srv.get("revisions"))
            if rev:
                out.extend(rev)
                w("")
            for block in (pool_lines(st or {}), before_after_lines(srv.get("before_after")), workload_lines(srv.get("workload"))):
                if block:
                    out.extend(block)
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
            advice = advice_lines(st or {})
            if advice:
                out.extend(advice)
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
            w(f"### dp_rank {srv['dp_rank']}: {lt['first']} .. {lt['last']} ({fmt_dur(lt['seconds'])}, zone {rep.get('zone', '?')})")
            w("")
            st = srv.get("status")
            if st:
                w(
                    f"**Diagnosis at the end of the log: {st['headline']}.** "
                    + (f"*{_md(life_line(st))}* " if life_line(st) else "")
                    + " ".join(st["words"])
                )
                w("")
                for line in start_lines(st):
                    w(f"- **{_md(line)}**")
                if start_lines(st):
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
            mc = (st or {}).get("model_check_words")
            if mc:
                w(_md(mc[0].upper() + mc[1:]) + ".")
                w("")
            if srv.get("revisions"):
                w(f"**{revision_lines(srv['revisions'])[0]}**")
                w("")
                w("| fact | value | stage | time | line |")
                w("|---|---|---|---|---|")
                for r in srv["revisions"]:
                    stage = r["stage_words"] + (" (in force)" if r["in_force"] else "")
                    w(f"| {r['label']} | {r['value_words']} | {stage} | {r['time']} | `{_md(r['line'] or '')}` |")
                w("")
            for block in (pool_lines(st or {}), before_after_lines(srv.get("before_after")), workload_lines(srv.get("workload"))):
                if block:
                    w(f"**{block[0]}**")
                    w("")
                    w("```")
                    out.extend(x[2:] if x.startswith("  ") else x for x in block[1:])
                    w("```")
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
            recs = (st or {}).get("recommendations") or []
            if recs:
                w(f"**Recommendations** ({drawing.advice_scope(st)})")
                w("")
                w("| # | flag | for (rank) | expected effect | why | risk |")
                w("|---|---|---|---|---|---|")
                ranked = [d for d in recs if d["rank"]]
                for i, d in enumerate(ranked, 1):
                    fors = ", ".join(f"{r} #{d['ranks'][r]}" for r in d["rules"] if r in d["ranks"])
                    why = d["why"] + "".join(f"; assumes {a}" for a in d["assumes"])
                    w(f"| {i} | `{d['flag']}` | {fors} | {_md(d['effect'])} | {_md(why)} | {_md(d['risk'])} |")
                held = [d for d in recs if not d["rank"]]
                if held:
                    w("")
                    w("Not to apply as they are (never in an alert):")
                    w("")
                    for d in held:
                        w(f"- `{d['flag']}` ({', '.join(d['rules'])}): {_md(d['effect'])}. **Caveat:** {_md('; '.join(d['caveats']))}")
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
                f'<td><span class="badge {"quiet" if st["firing"] and st.get("quiet") else "firing" if st["firing"] else "ok"}">{escape(st["headline"])}</span>'
                f"{escape(' ' + st['life']['state']) if (st.get('life') or {}).get('state') else ''}</td>"
                f"<td>{escape(lt['first'])} .. {escape(lt['last'])} ({fmt_dur(lt['seconds'])})</td></tr>"
            )
            title_html = f"source <b>{escape(s['source'])}</b> &middot; DP rank {escape(srv['dp_rank'])}"
            top = drawing.diagnosis_html(st, chart["spans"], when="end of the log")
            extra = (
                "<h3>Usage</h3>"
                + drawing.usage_html(srv)
                + (f'<div class="chart" data-chart="{key}" data-kind="histogram"></div>' if srv["histogram"] else "")
                + drawing.revisions_html(srv.get("revisions"))
                + drawing.workload_html(srv.get("workload"))
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
    made = "made " + time.strftime("%Y-%m-%d %H:%M") + f"; log times in zone {rep.get('zone', '?')}"
    return drawing.document(title, head + "".join(body), data, inline=True, updated=made)


__all__ = ["render_html", "render_markdown", "render_text"]
