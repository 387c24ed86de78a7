"""Before and after, from the log itself: a server that restarted with other flags, its two boots compared.

When a log shows a restart (a startup line after runtime lines) the rules keep the old boot's record
(:class:`~exporter.diagnosis.memory.BootRecord`: its configuration, its facts, its share of the binding time, the queueing
and the usage samples). :func:`before_after` compares the last closed boot with the one after it: the settings
that changed, the pools and the request cap before and after, what the exporter predicts for that change from the
old boot's log (``flags.effect_from_log``, the same effect a recommendation shows) against what the engine then
logged, and the binding share and queueing of both boots. ``report`` (every format) and the status page show it:
the check people did by hand with two reports.
"""

from __future__ import annotations

from ..advice import flags
from ..catalogues.configvalues import CONFIG_KEYS
from ..diagnosis.memory import BootRecord, UsageStats, boot_share, fired_since, peek_memory
from ..diagnosis.rules import RulesConfig
from ..state.facts import Demand, ServerFacts, peek
from ..state.store import ServerState, SourceState

# settings whose change is shown, but which no flag of the catalogue predicts (or which say who the server is)
_IDENTITY = ("model_path", "model", "served_model_name", "tokenizer_path")
TOLERANCE = 0.05  # a prediction within 5 % of what the engine logged "agrees" (docs/rules.md#before-and-after)


def _p95(counts: tuple[int, ...] | None) -> float | None:
    if not counts or not sum(counts):
        return None
    u = UsageStats()
    u.counts = list(counts)
    u.n = sum(counts)
    return u.quantile(0.95)


def _demand(rec: BootRecord, peaks: dict) -> Demand:
    return Demand(
        kv_p95=_p95(rec.usage_counts.get("kv")),
        mamba_p95=_p95(rec.usage_counts.get("mamba")),
        peak_running=float(peaks.get("running", 0) or 0),
        peak_queued=float(peaks.get("queued", 0) or 0),
    )


def current_boot(src: SourceState, srv: ServerState, cfg: RulesConfig) -> BootRecord:
    """The boot the server is in, as a record (what it logged so far)."""
    m = peek_memory(srv)
    binding, queued, counts = boot_share(m)
    first = m.boot_first_ts if m.boot_first_ts is not None else m.first_ts
    fired = fired_since(m, first, carried=False)  # one the old boot left live and that cleared since: not this boot's
    config = {k: v for k, v in src.config.items() if k in CONFIG_KEYS}
    return BootRecord(first, m.last_ts, config, peek(src, srv, cfg), binding, queued, counts, fired)


def _changed(before: dict, after: dict) -> list[tuple[str, object, object]]:
    out = []
    for k in sorted(set(before) | set(after)):
        if k.startswith("_") or k not in CONFIG_KEYS:
            continue
        a, b = before.get(k), after.get(k)
        if _norm(a) != _norm(b):
            out.append((k, a, b))
    return out


def _norm(v: object) -> object:
    if v in (None, "", "None", "none", "null", {}):
        return None
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v.strip().lower().replace("torch.", "")
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    return str(v)


def _pools(f: ServerFacts | None) -> dict[str, int | None]:
    if f is None:
        return {"mamba_slots": None, "slots_per_request": None, "kv_tokens": None, "cap": None}
    o = f.capacity
    return {
        "mamba_slots": o.mamba_slots,
        "slots_per_request": f.slots_per_request,
        "kv_tokens": o.kv_tokens,
        "cap": int(f.max_running) if f.max_running else None,
    }


def _shares(rec: BootRecord) -> tuple[dict[str, float], float | None]:
    total = sum(rec.binding_seconds.values())
    if not total:
        return {}, None
    return {k: round(v / total, 4) for k, v in rec.binding_seconds.items()}, round(rec.queued_seconds / total, 4)


def _value_for(value: object) -> str | None:
    """The flag's value as a command line has it (None: the change is not a value the effect can take)."""
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        return "true" if value else None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def predictions(before: BootRecord, changed: list[tuple[str, object, object]], peaks: dict) -> list[dict]:
    """What the exporter predicts from the old boot's log for each changed setting a catalogued flag sets."""
    if before.facts is None:
        return []
    o = before.facts.observed(_demand(before, peaks))
    out = []
    for key, _old, new in changed:
        entry = flags.entry(key)
        if entry is None or entry.from_log is None or before.facts.engine not in entry.engines:
            continue
        value = _value_for(new)
        if value is None:
            continue
        try:
            eff = flags.effect_from_log(o, entry.flag, value)
        except (ValueError, ZeroDivisionError, TypeError):
            eff = None
        if eff is None:
            continue
        out.append({"flag": entry.flag, "value": value, "effect": eff})
    return out


def _verdict(predicted: int | None, logged: int | None) -> str | None:
    if predicted is None or logged is None:
        return None
    if logged == predicted or (predicted and abs(logged - predicted) / abs(predicted) <= TOLERANCE):
        return "agrees"
    return f"off by {logged - predicted:+,} ({(logged - predicted) / predicted * 100:+.0f} %)" if predicted else "differs"


def before_after(src: SourceState, srv: ServerState, cfg: RulesConfig) -> dict | None:
    """The last restart of ``srv`` with what changed, or None when the log shows no restart of it."""
    m = peek_memory(srv)
    if not m.boots:
        return None
    before, after = m.boots[-1], current_boot(src, srv, cfg)
    changed = _changed(before.config, after.config)
    pb, pa = _pools(before.facts), _pools(after.facts)
    preds = predictions(before, changed, m.peaks)
    rows = []
    for key, label in (
        ("mamba_slots", "mamba slots"),
        ("slots_per_request", "slots per request"),
        ("kv_tokens", "KV tokens"),
        ("cap", "request cap"),
    ):
        if pb[key] is None and pa[key] is None:
            continue
        row = {"what": label, "before": pb[key], "after": pa[key]}
        if len(preds) == 1:
            p = getattr(preds[0]["effect"], f"{key}_after", None)
            if p is not None:
                row["predicted"] = p
                row["verdict"] = _verdict(p, pa[key])
        rows.append(row)
    notes = []
    if len(preds) > 1:
        notes.append(f"{len(preds)} catalogued flags changed at once: each one's prediction alone is listed, not their sum")
    if not changed:
        notes.append(
            "the configuration the log shows is the same in both boots (a change of environment, e.g. SGLANG_OPT_*, is not logged)"
        )
    strategy = ("mamba_radix_cache_strategy", "mamba_scheduler_strategy", "disable_radix_cache")
    if (
        pb["slots_per_request"]
        and pa["slots_per_request"]
        and pb["slots_per_request"] != pa["slots_per_request"]
        and not any(k in strategy for k, _, _ in changed)
    ):
        notes.append(
            "slots per request changed with no logged strategy change: an environment variable (SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK?)"
        )
    shares_b, queued_b = _shares(before)
    shares_a, queued_a = _shares(after)
    return {
        "restart_at": after.first_ts,
        "before": {"first": before.first_ts, "last": before.last_ts, "fired": list(before.fired), "binding": shares_b, "queued": queued_b},
        "after": {"first": after.first_ts, "last": after.last_ts, "fired": list(after.fired), "binding": shares_a, "queued": queued_a},
        "changed": [
            {"setting": k, "before": a, "after": b, "flag": (flags.entry(k).flag if flags.entry(k) else None)}
            for k, a, b in changed
            if k not in _IDENTITY
        ],
        "identity_changed": [k for k, _, _ in changed if k in _IDENTITY],
        "pools": rows,
        "predictions": [{"flag": p["flag"], "value": p["value"], "effect": str(p["effect"])} for p in preds],
        "notes": notes,
        "boots": len(m.boots) + 1,
    }


__all__ = ["TOLERANCE", "before_after", "current_boot", "predictions"]
