"""``hybrid-cache-exporter report FILE...``: what an operator reads after an incident.

The files go through the same pipeline as ``replay`` and ``serve`` (``app.replay``, rules
attached), then the state and the rules' bounded memory are rendered:

* capacity facts (pool sizes, slots per request, the effective request cap and where it came from)
* usage distributions of both pools (min/p50/p90/max over batch lines, a text histogram weighted
  by log time)
* share of log time each pool was the binding one (the instantaneous rule conditions)
* findings, live or past, with the log lines that prove them (timestamp + raw line)
* recommendations with their expected effect (``capacity.project_effect``)

Terminal text by default, ``--json`` or ``--markdown`` (options in ``exporter/cli/report.py``).
"""

from __future__ import annotations

import time

from . import recommend
from .rules import (
    RULE_IDS,
    RulesConfig,
    mamba_cap,
    requested_max_running,
    rules_of,
    slots_per_request,
    version_range,
)
from .state import CONFIG_KEYS, ServerState, SourceState, effective_max_running

GIB = float(1 << 30)
RULE_TITLES = {
    "mamba_bound": "Mamba-bound: the mamba state pool limits concurrency while the KV pool is mostly free",
    "kv_bound": "KV-bound: the full-attention KV pool limits concurrency while the mamba pool has room",
    "request_cap_bound": "Request-cap-bound: running requests pinned at the configured cap with both pools free",
    "mamba_capped": "Mamba-capped at startup: max running requests lowered by the mamba state pool",
    "retraction_storm": "Retraction storm: requests retracted/preempted repeatedly",
    "mamba_exhausted": "Mamba pool exhausted: the scheduler ran out of mamba slots",
}


def fmt_ts(ts: float | None) -> str:
    if ts is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def fmt_dur(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def _num(v):
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


# --------------------------------------------------------------------------------------------
# data


def server_report(src: SourceState, srv: ServerState, cfg: RulesConfig) -> dict:
    m = srv.rule_memory
    c = srv.capacity
    eff, eff_how = effective_max_running(src, srv)
    spr, spr_how = slots_per_request(src, srv, cfg)
    req, req_how = requested_max_running(src, srv)
    first, last = m.get("first_ts"), m.get("last_ts")
    cap_facts = {
        "kv_capacity_tokens": _num(c.get("kv_capacity_tokens")),
        "kv_capacity_gib": round(c["kv_capacity_bytes"] / GIB, 2) if c.get("kv_capacity_bytes") else None,
        "mamba_capacity_slots": _num(c.get("mamba_capacity_slots")),
        "mamba_state_gib": {k: round(v / GIB, 3) for k, v in srv.mamba_state_bytes.items()} or None,
        "mamba_slots_per_request": spr,
        "mamba_slots_per_request_source": spr_how or None,
        "mamba_cap": mamba_cap(src, srv, cfg),
        "max_running_requests": _num(eff),
        "max_running_requests_source": eff_how or None,
        "requested_max_running_requests": _num(req),
        "requested_max_running_requests_source": req_how or None,
        "max_concurrency": c.get("max_concurrency"),
        "kv_blocks": _num(c.get("kv_blocks")),
        "mamba_blocks": _num(c.get("mamba_blocks")),
        "context_length_tokens": _num(c.get("context_length_tokens")),
    }
    cap_facts = {k: v for k, v in cap_facts.items() if v is not None}
    usage = {}
    hist = {}
    for pool, u in (m.get("usage") or {}).items():
        if u.n:
            usage[pool] = u.summary()
            hist[pool] = [{"lo": lo, "hi": hi, "samples": n, "seconds": round(sec, 1)} for lo, hi, n, sec in u.histogram(0.1)]
    bind = dict(m.get("binding_seconds") or {})
    total = sum(bind.values())
    binding = {k: {"seconds": round(v, 1), "share": round(v / total, 4) if total else 0.0} for k, v in bind.items()}
    findings = []
    for rule in RULE_IDS:
        eps = list((m.get("episodes") or {}).get(rule, ()))
        live = bool(srv.findings.get(rule))
        if not eps and not live:
            continue
        evd = (m.get("evidence") or {}).get(rule, {})
        fired_s = 0.0
        for start, end in eps:
            if start is not None:
                fired_s += ((end if end is not None else last) or start) - start
        lines = []
        for kind in ("fire", "recent", "clear"):
            for ts, line in evd.get(kind, ()):
                lines.append({"kind": kind, "ts": ts, "time": fmt_ts(ts), "line": line})
        f = {
            "rule": rule,
            "title": RULE_TITLES.get(rule, rule),
            "live": live,
            "episodes": [{"start": fmt_ts(a), "end": fmt_ts(b) if b is not None else None} for a, b in eps],
            "firing_seconds": round(fired_s, 1),
            "evidence": lines,
        }
        if rule == "mamba_capped" and m.get("capped_detail"):
            f["detail"] = m["capped_detail"]
        findings.append(f)
    fired_rules = [f["rule"] for f in findings]
    recs = recommend.for_rules(src, srv, fired_rules, cfg)
    live_rules = {f["rule"] for f in findings if f["live"]}
    return {
        "dp_rank": srv.dp_rank,
        "log_time": {"first": fmt_ts(first), "last": fmt_ts(last), "seconds": round(last - first, 1) if first and last else 0},
        "capacity": cap_facts,
        "peaks": {k: _num(v) for k, v in (m.get("peaks") or {}).items()},
        "counters": {
            k: _num(v)
            for k, v in srv.counters.items()
            if k in ("retraction_events", "preempted_requests", "decode_batches", "prefill_batches", "stats_lines")
        },
        "usage": usage,
        "histogram": hist,
        "binding": binding,
        "findings": findings,
        "recommendations": [dict(r.as_dict(), live=r.rule in live_rules) for r in recs],
        "recommended_mamba_full_memory_ratio": recommend.balanced_ratio(src, srv, cfg) if recs or srv.recommended_ratio else None,
    }


def build_report(pipe, cfg: RulesConfig | None = None) -> dict:
    rules = rules_of(pipe)
    cfg = cfg or (rules.config if rules is not None else RulesConfig())
    out = {"sources": []}
    with pipe.lock:
        for name, src in pipe.sources.items():
            vr = version_range(src, cfg)
            config = {k: v for k, v in src.config.items() if k in CONFIG_KEYS and v not in ("", {})}
            out["sources"].append(
                {
                    "source": name,
                    "engine": src.engine,
                    "version": str(vr),
                    "version_evidence": vr.reasons[-4:],
                    "restarts": src.restarts,
                    "lines": dict(src.lines),
                    "config": {k: (v if isinstance(v, (int, float, bool, str)) or v is None else str(v)) for k, v in config.items()},
                    "servers": [server_report(src, srv, cfg) for _, srv in sorted(src.servers.items())],
                }
            )
    return out


# --------------------------------------------------------------------------------------------
# rendering


def _bar(frac: float, width: int = 30) -> str:
    n = int(round(frac * width))
    return "#" * n + "." * (width - n)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def render_text(rep: dict) -> str:
    out: list[str] = []
    w = out.append
    for s in rep["sources"]:
        w("=" * 100)
        w(f"source {s['source']}  engine {s['engine'] or '?'}  release {s['version']}  restarts {s['restarts']}")
        if s["config"]:
            w("config: " + ", ".join(f"{k}={v}" for k, v in s["config"].items()))
        for srv in s["servers"]:
            w("-" * 100)
            lt = srv["log_time"]
            w(f"dp_rank {srv['dp_rank']}   log time {lt['first']} .. {lt['last']} ({fmt_dur(lt['seconds'])})")
            w("")
            w("Capacity")
            for k, v in srv["capacity"].items():
                w(f"  {k:40s} {v}")
            if srv["peaks"]:
                w("  " + "peak " + ", ".join(f"{k} {v}" for k, v in srv["peaks"].items()))
            w("")
            if srv["usage"]:
                w("Usage (batch lines)      samples    min    p50    p90    max")
                for pool, u in srv["usage"].items():
                    w(f"  {pool:20s} {u['samples']:9d}  {_pct(u['min'])}   {_pct(u['p50'])}   {_pct(u['p90'])}   {_pct(u['max'])}")
                for pool, h in srv["histogram"].items():
                    tot_s = sum(b["seconds"] for b in h)
                    tot_n = sum(b["samples"] for b in h)
                    w(f"  {pool} usage, share of log time{'' if tot_s else ' (by samples)'}:")
                    for b in h:
                        frac = (b["seconds"] / tot_s) if tot_s else (b["samples"] / tot_n if tot_n else 0.0)
                        w(f"    {b['lo']:.1f}-{b['hi']:.1f} |{_bar(frac)}| {frac * 100:5.1f}%")
                w("")
            if any(v["seconds"] for v in srv["binding"].values()):
                w("Binding pool (share of log time)")
                for k, v in srv["binding"].items():
                    w(f"  {k:10s} |{_bar(v['share'])}| {v['share'] * 100:5.1f}%  ({fmt_dur(v['seconds'])})")
                w("")
            if not srv["findings"]:
                w("Findings: none")
            for f in srv["findings"]:
                state = "FIRING" if f["live"] else "cleared"
                w(f"Finding {f['rule']} [{state}] - {f['title']}")
                if f.get("detail"):
                    w(f"  {f['detail']}")
                for ep in f["episodes"]:
                    w(f"  fired {ep['start']} -> {ep['end'] or 'still firing at the end of the log'}")
                if f["firing_seconds"]:
                    w(f"  firing for {fmt_dur(f['firing_seconds'])} of log time")
                for e in f["evidence"]:
                    w(f"    [{e['kind']:6s}] {e['line']}")
                w("")
            if srv["recommendations"]:
                w("Recommendations")
                for r in srv["recommendations"]:
                    flag = r["flag"] if r["flag"].startswith("SGLANG_") else r["flag"]
                    sep = "=" if r["flag"].startswith("SGLANG_") else " "
                    val = "" if r["value"] == "true" and not r["flag"].startswith("SGLANG_") else sep + r["value"]
                    w(f"  [{r['rule']}] {flag}{val}")
                    w(f"      effect: {r['effect']}")
                    if r["why"]:
                        w(f"      why:    {r['why']}")
                if srv.get("recommended_mamba_full_memory_ratio"):
                    w(f"  balanced --mamba-full-memory-ratio for the observed usage: {srv['recommended_mamba_full_memory_ratio']}")
                w("")
    return "\n".join(out) + "\n"


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
                w(f"| `{k}` | `{v}` |")
            w("")
        for srv in s["servers"]:
            lt = srv["log_time"]
            w(f"### dp_rank {srv['dp_rank']}: {lt['first']} .. {lt['last']} ({fmt_dur(lt['seconds'])})")
            w("")
            w("**Capacity**")
            w("")
            w("| fact | value |")
            w("|---|---|")
            for k, v in srv["capacity"].items():
                w(f"| {k} | {v} |")
            for k, v in srv["peaks"].items():
                w(f"| peak {k} | {v} |")
            w("")
            if srv["usage"]:
                w("**Usage**")
                w("")
                w("| pool | samples | min | p50 | p90 | max |")
                w("|---|---|---|---|---|---|")
                for pool, u in srv["usage"].items():
                    w(f"| {pool} | {u['samples']} | {_pct(u['min'])} | {_pct(u['p50'])} | {_pct(u['p90'])} | {_pct(u['max'])} |")
                w("")
                w("```")
                for pool, h in srv["histogram"].items():
                    tot_s = sum(b["seconds"] for b in h)
                    tot_n = sum(b["samples"] for b in h)
                    w(f"{pool} usage (share of log time)")
                    for b in h:
                        frac = (b["seconds"] / tot_s) if tot_s else (b["samples"] / tot_n if tot_n else 0.0)
                        w(f"  {b['lo']:.1f}-{b['hi']:.1f} |{_bar(frac)}| {frac * 100:5.1f}%")
                w("```")
                w("")
            if any(v["seconds"] for v in srv["binding"].values()):
                w("**Binding pool (share of log time)**: " + ", ".join(f"{k} {v['share'] * 100:.1f}%" for k, v in srv["binding"].items()))
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
                    w(f"| {r['rule']} | `{r['flag']}` | `{r['value']}` | {r['effect']} | {r['why']} |")
                w("")
                if srv.get("recommended_mamba_full_memory_ratio"):
                    w(f"Balanced `--mamba-full-memory-ratio` for the observed usage: **{srv['recommended_mamba_full_memory_ratio']}**")
                    w("")
    return "\n".join(out) + "\n"


__all__ = ["build_report", "render_markdown", "render_text"]
