"""``hybrid-cache-exporter report FILE...``: what an operator reads after an incident.

The files go through the same pipeline as ``replay`` and ``serve`` (``app.replay``, rules
attached), then the state and the rules' bounded memory are rendered:

* capacity facts (pool sizes, slots per request, the effective request cap and where it came from)
* usage distributions of both pools (min/p50/p90/max over batch lines, a text histogram weighted
  by log time)
* share of log time each pool was the binding one (the instantaneous rule conditions)
* findings, live or past, with the log lines that prove them (timestamp + raw line)
* ``--json``: every fact on ``/metrics`` with the line that proves it (file, line, boot, rank, basis:
  ``exporter.presentation.explain.proofs``)
* recommendations with their expected effect (``flags.effect_from_log``)

This module builds the report's data (``--json`` prints it as is; the status page reads
:func:`server_status`); exporter.presentation.render lays it out as terminal text, ``--markdown`` or ``--html``
(options in ``exporter/cli/report.py``).
"""

from __future__ import annotations

from parsers import clock

from .. import capacity as cap
from ..advice import flags, recommend
from ..catalogues import rulebook
from ..catalogues.configvalues import CONFIG_KEYS
from ..catalogues.rulebook import RULE_IDS
from ..diagnosis.history import History
from ..diagnosis.memory import peek_memory
from ..diagnosis.rules import RulesConfig
from ..diagnosis.workload import pool_words, shared_pool, workload
from ..state.facts import device_gib, facts_of, gpu_memory_utilization, peek, version_range
from ..state.revisions import REVISED, in_force
from ..state.store import NEVER, ServerState, SourceState
from .boots import before_after
from .drawing import chart_data
from .explain import proofs

GIB = float(1 << 30)


def fmt_ts(ts: float | None) -> str:
    """A log time as the log wrote it: its wall time in the zone ``--log.timezone`` names (the one the
    zone-less headers were read in), not the process's local zone."""
    if ts is None:
        return "?"
    return clock.wall_text(ts)


def fmt_dur(s: float | None) -> str:
    if s is None:
        return "?"
    s = max(0, int(round(s)))  # a duration is never negative (files read out of order were, before)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def _num(v):
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


# --------------------------------------------------------------------------------------------
# data


# --------------------------------------------------------------------------------------------
# formatting shared by the text, Markdown and HTML renderings (no Python reprs, thousands separators)


def fmt_int(v: float | int | None) -> str:
    """``211360`` -> ``211,360``; None -> ``-``."""
    if v is None:
        return "-"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.2f}"
    return f"{int(v):,}"


def fmt_pct(v: float | None) -> str:
    """A 0-1 ratio as a whole percentage: ``0.934`` -> ``93%``."""
    return "-" if v is None else f"{v * 100:.0f}%"


def fmt_value(v: object) -> str:
    """A configuration value as a person writes it: None/'null' -> ``unset``, True -> ``true``,
    dicts as ``key value, ...``, numbers with thousands separators."""
    if v is None or (isinstance(v, str) and v.strip().lower() in ("none", "null")):
        return "unset"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)  # a flag's value, as it is typed (no thousands separators)
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {fmt_value(x)}" for k, x in v.items()) or "-"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt_value(x) for x in v) or "-"
    return str(v)


SOURCE_WORDS = {"log": "from the log", "args": "from the arguments", "default": "the engine's default", "server_args": "from server_args"}
# a fact whose source reads "default: why" / "unknown: why" (exporter/state/facts.py): the engine's default, not a logged value
SOURCE_PREFIXES = {
    "logged": "from the log:",
    "default": "not logged, the engine's default:",
    "unknown": "not logged, and the engine's default is not known:",
}
# capacity fact -> (label, unit); facts not listed are shown with their key
FACTS = {
    "kv_capacity_tokens": ("KV pool", "tokens"),
    "kv_capacity_gib": ("KV pool memory", "GiB"),
    "mamba_capacity_slots": ("mamba pool", "slots"),
    "mamba_state_gib": ("mamba state memory", "GiB"),
    "mamba_slots_per_request": ("mamba slots per request", ""),
    "mamba_cap": ("request cap the mamba pool allows", "requests"),
    "max_running_requests": ("effective request cap", "requests"),
    "requested_max_running_requests": ("requested request cap", "requests"),
    "max_concurrency": ("max concurrency at full context", "x"),
    "kv_blocks": ("KV blocks", "blocks"),
    "mamba_blocks": ("mamba blocks", "blocks"),
    "context_length_tokens": ("context length", "tokens"),
    "gpu_memory_utilization": ("gpu_memory_utilization in force", "fraction"),
    "device_memory_gib": ("device memory", "GiB"),
    "withheld_gib": ("kept out of the KV cache by the cap", "GiB"),
}
# the stages of a revised fact, as report names them (exporter/state/revisions.py)
STAGE_WORDS = {"profile": "before warmup", "estimate": "estimate", "measured": "measured after warmup", "final": "final"}
REVISED_WORDS = {
    "kv_capacity_bytes": "KV pool memory",
    "kv_blocks": "KV blocks",
    "context_length_tokens": "context length",
    "withheld_bytes": "kept out by gpu_memory_utilization",
}


def source_words(how: str) -> str:
    """How a fact's source reads in a report row."""
    head, _, why = how.partition(": ")
    if why and head in SOURCE_PREFIXES:
        return f"{SOURCE_PREFIXES[head]} {why}"
    return SOURCE_WORDS.get(how, "from " + how)


def revisions_of(srv: ServerState) -> list[dict]:
    """The facts this boot stated at more than one stage (vLLM 0.34 sizes its KV cache again after warmup: one boot
    whose facts are revised, not a restart), each value with its stage, its time and its line; and the line of
    0.34's cap warning (the memory the advice gives back)."""
    out = []
    for key in (*REVISED, "withheld_bytes"):
        hist = srv.revisions.get(key) or []
        if not hist or (key in REVISED and len({(r.stage, r.value) for r in hist}) < 2):
            continue
        cur = in_force(hist)
        for r in hist:
            value = r.value / GIB if key.endswith("_bytes") else r.value
            unit = "GiB" if key.endswith("_bytes") else "tokens" if key == "context_length_tokens" else "blocks"
            out.append(
                {
                    "fact": key,
                    "label": REVISED_WORDS[key],
                    "stage": r.stage,
                    "stage_words": STAGE_WORDS[r.stage],
                    "value": round(value, 2) if key.endswith("_bytes") else _num(value),
                    "unit": unit,
                    "value_words": f"{value:,.2f} GiB" if unit == "GiB" else f"{fmt_int(value)} {unit}",
                    "in_force": r is cur,
                    "time": fmt_ts(r.ts),
                    "line": r.text,
                }
            )
    return out


def fact_rows(facts: dict) -> list[tuple[str, str]]:
    """Capacity facts as (label, text) rows with units; a fact's ``*_source`` joins its row."""
    rows = []
    for k, v in facts.items():
        if k.endswith("_source"):
            continue
        label, unit = FACTS.get(k, (k, ""))
        if k == "mamba_state_gib" and isinstance(v, dict):
            text = ", ".join(f"{part} {x:,.2f} GiB" for part, x in v.items())
        elif unit == "GiB":
            text = f"{v:,.2f} GiB"
        elif unit == "x":
            text = f"{v:g}x"
        elif unit == "fraction":
            text = f"{v:g}"
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            text = fmt_int(v) + (f" {unit}" if unit else "")
        else:
            text = fmt_value(v) + (f" {unit}" if unit else "")
        how = facts.get(k + "_source")
        if how:
            text += f", {source_words(how)}"
        rows.append((label, text))
    return rows


def flag_text(flag: str, value: str) -> str:
    """How the flag is written on a command line: ``--x v``, ``--switch`` (a switch of the flag catalogue, value
    true: both engines' parsers refuse ``--switch true``), ``SGLANG_ENV=v`` (an environment variable)."""
    if flag.startswith("SGLANG_") or flag.isupper():
        return f"{flag}={value}"
    if value == flags.UNSET:
        return f"remove {flag}"
    e = flags.entry(flag)
    if (e is not None and e.switch) or value in ("true", ""):
        return flag
    return f"{flag} {value}"


# --------------------------------------------------------------------------------------------
# data


BINDING_WORDS = {k: long for k, (_, long) in rulebook.BINDING_WORDS.items()}


def capacity_facts(src: SourceState, srv: ServerState, cfg: RulesConfig) -> dict:
    """Capacity facts of one server: pool sizes, slots per request, the caps and where they came from."""
    c = srv.capacity
    f = facts_of(src, srv, cfg)  # the same facts the rules and the recommendations read
    eff, eff_how = f.max_running, f.max_running_source
    spr, spr_how = f.slots_per_request, f.slots_per_request_source
    req, req_how = f.requested_max_running, f.requested_source
    facts = {
        "kv_capacity_tokens": _num(c.get("kv_capacity_tokens")),
        "kv_capacity_gib": round(c["kv_capacity_bytes"] / GIB, 2) if c.get("kv_capacity_bytes") else None,
        "mamba_capacity_slots": _num(c.get("mamba_capacity_slots")),
        "mamba_state_gib": {k: round(v / GIB, 3) for k, v in srv.mamba_state_bytes.items()} or None,
        "mamba_slots_per_request": spr,
        "mamba_slots_per_request_source": spr_how or None,
        "mamba_cap": f.mamba_cap,
        "max_running_requests": _num(eff),
        "max_running_requests_source": eff_how or None,
        "requested_max_running_requests": _num(req),
        "requested_max_running_requests_source": req_how or None,
        "max_concurrency": c.get("max_concurrency"),
        "kv_blocks": _num(c.get("kv_blocks")),
        "mamba_blocks": _num(c.get("mamba_blocks")),
        "context_length_tokens": _num(c.get("context_length_tokens")),
    }
    if eff is None and eff_how.startswith("unknown"):
        facts["max_running_requests"] = "unknown"
    if src.engine == "vllm":
        util, basis, util_how = gpu_memory_utilization(src, srv)
        gib = device_gib(src, srv)
        facts.update(
            gpu_memory_utilization=util,
            gpu_memory_utilization_source=f"{basis}: {util_how}" if util is not None else None,
            device_memory_gib=round(gib, 2) if gib else None,
            withheld_gib=round(c["_withheld_bytes"] / GIB, 2) if c.get("_withheld_bytes") else None,
        )
    return {k: v for k, v in facts.items() if v is not None}


def _vllm_state_words(pool: dict | None) -> str:
    """vLLM's shared pool in words: what a running request's state takes of it (the KV-bound sentence's end)."""
    words = [w for w in pool_words(pool) if w.startswith(("a running request's", "mamba-bound concurrency"))]
    text = "; ".join(words)
    return f" {text[0].upper()}{text[1:]}." if text else ""


def _live_since(srv: ServerState, rule: str) -> float | None:
    eps = peek_memory(srv).episodes.get(rule) or ()
    if eps and eps[-1][1] is None:
        return eps[-1][0]
    return None


def server_status(
    src: SourceState,
    srv: ServerState,
    cfg: RulesConfig,
    recs: list | None = None,
    gauges: dict[str, float] | None = None,
    now: float | None = None,
) -> dict:
    """The diagnosis of one server now (or at the end of a replayed log), in words and numbers:
    what the status page shows and the HTML report's summary starts with. ``recs``: the
    recommendations to show (default: the live ones the rules keep). ``gauges``: the runtime
    gauges as a scrape sees them (the status page passes the sampler's read-only view; default:
    the committed ones, all there are once a replay has finished). ``now``: the wall clock of a
    live page (the age of the server's last line, and whether it has gone quiet); None: a report.
    Reads only (the status page calls it under the pipeline's lock)."""
    m = peek_memory(srv)
    g = srv.gauges if gauges is None else gauges
    last = m.last_ts or src.last_ts
    facts = peek(src, srv, cfg)  # the status page reads at request time: never writes
    eff, eff_how = facts.max_running, facts.max_running_source
    kv, mamba = g.get("kv_usage_ratio"), g.get("mamba_usage_ratio")
    running, queued = g.get("running_requests"), g.get("queued_requests")
    pool = shared_pool(srv.capacity, facts, src.arch, m.lengths)
    mc = cap.ratio_model_check(facts.capacity)
    mcap = facts.mamba_cap
    findings = []
    for rule in RULE_IDS:
        if not srv.findings.get(rule):
            continue
        since = _live_since(srv, rule)
        findings.append(
            {
                "rule": rule,
                "label": rulebook.WORDS[rule],
                "title": rulebook.BY_ID[rule].title_for(src.engine),
                "since": fmt_ts(since) if since is not None else None,
                "for_seconds": round(last - since, 1) if since is not None and last else None,
                "detail": m.capped_detail if rule == "mamba_capped" else None,
            }
        )
    findings.sort(key=lambda f: rulebook.HEADLINE_ORDER.index(f["rule"]))
    binding = (m.binding_last or (None, None))[1]
    words = []
    gap = f" ({abs(mamba - kv) * 100:.0f} points apart)" if kv is not None and mamba is not None else ""
    cap_words = ""
    if eff is not None:
        by = " set by the mamba pool" if mcap is not None and int(eff) == mcap else ""
        if eff_how.startswith("default"):
            by += f" (not logged: {eff_how.partition(': ')[2]})"  # a finding that rests on a default says so
        cap_words = f" against a cap of {fmt_int(eff)}{by}"
    load = f"{fmt_int(running)} running{cap_words}, {fmt_int(queued)} waiting" if running is not None else ""
    # the pools as far as the log tells (vLLM logs no mamba usage)
    pools = ", ".join(f"{name} {fmt_pct(v)}" for name, v in (("KV", kv), ("mamba", mamba)) if v is not None) or "no pool usage logged"
    said = {
        "kv": fmt_pct(kv),
        "mamba": fmt_pct(mamba),
        "gap": gap,
        "mamba_while": f" while mamba is {fmt_pct(mamba)}{gap}" if mamba is not None else "",
        "load": load,
        "pools": pools,
        "retracted": fmt_int(srv.counters.get("preempted_requests")),
        "vllm_state": _vllm_state_words(pool),
    }
    for f in findings:
        rule = rulebook.BY_ID[f["rule"]]
        if rule.id == rulebook.MAMBA_CAPPED and not f["detail"]:
            continue
        # a sustained finding as of an earlier sample while the newest shows no load (docs/rules.md#quiet-and-death)
        text = rule.stale if rule.stale and running == 0 and not queued else rule.says_for(src.engine)
        words.append(text.format_map({**said, "detail": f["detail"]}))
    if not findings and src.life == "idle" and src.life_cause in ("silent", "silent_wall"):
        # the gauges are the last batch line's: not a load now (docs/rules.md#silence)
        words.append(
            f"No finding: idle, no batch line since {fmt_ts(src.life_since)}; that last line showed {pools} used"
            + (f"; {load}." if load else ".")
        )
    elif not findings:
        words.append("No finding: neither pool limits concurrency" + (f" ({pools} used; {load})." if load else "."))
        if binding and binding != "none":
            words.append(f"The latest sample meets the condition for {BINDING_WORDS[binding]}, not (yet) sustained.")
    if recs is None:
        recs = list(m.recommendations)
    advice = recommend.merged(recs, flag_text)
    start = {}
    for d in advice:
        for rule, rank in d["ranks"].items():
            if rank == 1:
                start[rule] = d
    for fd in findings:
        d = start.get(fd["rule"])
        fd["start_here"] = {"flag": d["flag"], "effect": d["effect"]} if d else None
    age = None if now is None or last is None else max(0.0, now - last)
    life = life_of(src, age)
    out = {
        "source": src.name,
        "dp_rank": srv.dp_rank,
        "engine": src.engine,
        "at": fmt_ts(last),
        "age_seconds": None if age is None else round(age, 1),
        "quiet": life["quiet"],
        "life": life,
        "headline": ", ".join(f["label"] for f in findings) if findings else "no finding",
        "firing": bool(findings),
        "binding_now": binding,
        "words": words,
        "findings": findings,
        "now": {
            "kv": kv,
            "mamba": mamba,
            "running": running,
            "queued": queued,
            "cap": _num(eff),
            "cap_source": eff_how or None,
            "mamba_cap": mcap,
        },
        "capacity": capacity_facts(src, srv, cfg),
        "recommendations": advice,
        "balanced_ratio": srv.recommended_ratio,
        "model_check": mc,
        "model_check_words": model_words(mc),
        "before_after": before_after(src, srv, cfg),
        "vllm_pool": pool,
        "vllm_pool_words": pool_words(pool),
    }
    return out


def model_words(mc: dict | None) -> str | None:
    """The capacity model against the log (``capacity.ratio_model_check``) in a sentence."""
    if not mc:
        return None
    gap = (mc["gap"] or 0.0) * 100
    head = (
        f"model check: the ratio arithmetic gives {mc['model_slots']:,} mamba slots for ratio {mc['ratio']:g}, "
        f"the log {mc['logged_slots']:,} ({gap:+.0f} %)"
    )
    why = ("; the model leaves out " + ", ".join(mc["leaves_out"])) if mc["leaves_out"] else ""
    if mc["agrees"]:
        return head + ": within 5 %, predictions use the model on the logged pools"
    if abs(gap) >= cap.MODEL_WITHHOLD * 100:
        return head + f": ratio predictions withheld{why}"
    return head + f": ratio predictions are scaled from the logged pools{why}"


QUIET_AFTER_SECONDS = 120.0  # a server that printed nothing for this long has gone quiet (idle, stopped or dead)

# The server's state as its log tells it (state.SERVER_STATES, hybrid_cache_server_state; docs/rules.md#quiet-and-death),
# in words, and the bounded cause of a stop or a death (ev.Lifecycle.cause).
LIFE_WORDS = {
    "starting": "starting: boot lines, not ready yet",
    "serving": "serving",
    "idle": "idle: ready, no request running or waiting",
    "stalled": "stalled: requests running or waiting, but no progress in its last stats interval",
    "stopped": "stopped: it logged a shutdown",
    "dead": "dead: the engine died",
}
CAUSE_WORDS = {
    "signal": "a signal asked it to stop",
    "api_server": "the API server triggered the shutdown",
    "uvicorn": "the HTTP server shut down",
    "fatal_error": "the engine hit a fatal error",
    "engine_dead": "the engine core died (EngineDeadError)",
    "init_failed": "the engine failed to start",
    "scheduler_error": "the scheduler hit an exception",
    "tokenizer_error": "the tokenizer manager hit an exception",
    "detokenizer_error": "the detokenizer manager hit an exception",
    "child_failed": "a child process failed and signalled the server",
    "process_died": "a process of the server died (its Rust frontend or an API server)",
}
NOT_SERVING = ("idle", "stalled", "stopped", "dead")  # the states in which findings are not the state now


def is_quiet(age_seconds: float | None) -> bool:
    """Whether a server whose last line is ``age_seconds`` old has gone quiet by the clock alone: the test for
    what the log cannot tell (a server whose last state is serving or starting, then nothing: a hang, a log
    that stopped being written). :func:`life_of` asks the log's state first."""
    return age_seconds is not None and age_seconds > QUIET_AFTER_SECONDS


def life_of(src: SourceState, age_seconds: float | None = None) -> dict:
    """The server's state: ``state`` (SERVER_STATES or None), ``since`` (log time), ``cause`` (bounded word) and
    its ``words``; ``quiet``: whether its findings are not the state now (grey them), ``by``: ``log`` (the state
    says it is not serving), ``age`` (the log says serving or nothing, but its last line is older than
    QUIET_AFTER_SECONDS on a live page) or None. The one notion of the status page, ``report`` and the alerts
    (HybridCacheEngineDied, HybridCacheServerStalled)."""
    state, cause = src.life, src.life_cause
    by = "log" if state in NOT_SERVING else "age" if is_quiet(age_seconds) else None
    words = LIFE_WORDS.get(state, "not told by the log yet") if state else "not told by the log yet"
    if cause in CAUSE_WORDS:
        words += f" ({CAUSE_WORDS[cause]})"
    elif state == "idle" and cause in ("silent", "silent_wall"):  # docs/rules.md#silence
        q = f"{src.quiet_seconds:g} s" if src.quiet_seconds != NEVER else "quiet_seconds"  # (a state restored with it off)
        words = f"idle: no batch line for more than {q} after its last one (SGLang prints none while idle)"
        if cause == "silent_wall":
            words += f"; told by the wall clock: the log, read to its end, wrote nothing for {q}"
    since = fmt_ts(src.life_since) if src.life_since is not None else None
    return {
        "state": state,
        "since": since,
        "cause": cause,
        "basis": src.basis,
        "words": words,
        "sentence": f"Server state: {words}" + (f", since {since}." if since else "."),
        "quiet": by is not None,
        "by": by,
        "age_seconds": None if age_seconds is None else round(age_seconds, 1),
    }


def server_report(src: SourceState, srv: ServerState, cfg: RulesConfig) -> dict:
    m = peek_memory(srv)
    first, last = m.first_ts, m.last_ts
    cap_facts = capacity_facts(src, srv, cfg)
    usage = {}
    hist = {}
    for pool, u in m.usage.items():
        if u.n:
            usage[pool] = u.summary()
            hist[pool] = [{"lo": lo, "hi": hi, "samples": n, "seconds": round(sec, 1)} for lo, hi, n, sec in u.histogram(0.1)]
    bind = dict(m.binding_seconds)
    total = sum(bind.values())
    binding = {k: {"seconds": round(v, 1), "share": round(v / total, 4) if total else 0.0} for k, v in bind.items()}
    findings = []
    for rule in RULE_IDS:
        eps = list(m.episodes.get(rule, ()))
        live = bool(srv.findings.get(rule))
        if not eps and not live:
            continue
        evd = m.evidence.get(rule)
        fired_s = 0.0
        for start, end in eps:
            if start is not None:
                fired_s += max(0.0, ((end if end is not None else last) or start) - start)  # never negative
        lines = []
        for kind in ("fire", "recent", "clear"):
            for ts, line in getattr(evd, kind) if evd is not None else ():
                lines.append({"kind": kind, "ts": ts, "time": fmt_ts(ts), "line": line})
        f = {
            "rule": rule,
            "title": rulebook.BY_ID[rule].title_for(src.engine),
            "live": live,
            "episodes": [{"start": fmt_ts(a), "end": fmt_ts(b) if b is not None else None} for a, b in eps],
            "firing_seconds": round(fired_s, 1),
            "evidence": lines,
        }
        if rule == "mamba_capped" and m.capped_detail:
            f["detail"] = m.capped_detail
        findings.append(f)
    fired_rules = [f["rule"] for f in findings]
    recs = recommend.for_rules(src, srv, fired_rules, cfg)
    live_rules = {f["rule"] for f in findings if f["live"]}
    status = server_status(src, srv, cfg, recs)
    return {
        "dp_rank": srv.dp_rank,
        "log_time": {"first": fmt_ts(first), "last": fmt_ts(last), "seconds": round(max(0.0, last - first), 1) if first and last else 0},
        "capacity": cap_facts,
        "revisions": revisions_of(srv),
        "peaks": {k: _num(v) for k, v in m.peaks.items()},
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
        "status": status,
        "whatif": whatif(src, srv, cfg, recs),
        "before_after": status["before_after"],
        "model_check": status["model_check"],
        "workload": workload(m.lengths, facts_of(src, srv, cfg)),
        "vllm_pool": status["vllm_pool"],
        # every fact of the server on /metrics, with the line that proves it (exporter/state/provenance.py)
        "provenance": proofs(src, srv),
    }


def whatif(src: SourceState, srv: ServerState, cfg: RulesConfig, recs: list) -> list[dict]:
    """``plan``-style what-if of each recommended flag on this server's logged capacity: the pool
    sizes and the request cap before and after (``flags.effect_from_log``), and whether the new
    cap covers the peak demand (running + queued) the log shows."""
    o = recommend.observed(src, srv, cfg)
    peaks = peek_memory(srv).peaks
    demand = (peaks.get("running") or 0) + (peaks.get("queued") or 0) if peaks else None
    out, seen = [], set()
    for r in recs:
        key = (r.flag, r.value)
        if key in seen:
            continue
        seen.add(key)
        try:
            e = flags.effect_from_log(o, r.flag, r.value)
        except (ValueError, ZeroDivisionError, TypeError):
            e = None
        row = {"flag": flag_text(r.flag, r.value), "effect": r.effect}
        if e is not None:
            for k in ("mamba_slots", "slots_per_request", "kv_tokens", "cap"):
                row[k] = [getattr(e, k + "_before"), getattr(e, k + "_after")]
            if e.cap_after is not None and demand:
                row["covers_peak_demand"] = e.cap_after >= demand
        out.append(row)
    if demand and out:
        out.append({"flag": "(peak demand)", "effect": f"{fmt_int(demand)} requests running + queued at the peak"})
    return out


def build_report(pipe, cfg: RulesConfig | None = None, hist: History | None = None) -> dict:
    """The report's data, as the rules configured by ``cfg`` diagnosed it. With the timelines the
    pipeline kept (``hist``: ``report --html``), each server also carries its timeline as chart data."""
    cfg = cfg or RulesConfig()
    out = {"zone": clock.zone_label(), "sources": []}  # the zone every time of the report is written in
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
                    "provenance": proofs(src),  # the configuration and release on hybrid_cache_server_info
                    "servers": [server_report(src, srv, cfg) for _, srv in sorted(src.servers.items())],
                }
            )
            if hist is not None:
                for srv in out["sources"][-1]["servers"]:
                    srv["chart"] = chart_data(hist.timeline(name, srv["dp_rank"]))
    return out


__all__ = ["build_report", "life_of", "server_status"]
