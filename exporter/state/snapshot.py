"""What the log has said, kept across a restart of ``serve --positions``.

A server prints its capacity, caps, configuration and version once, at boot. After the exporter
restarts it resumes reading at the saved offsets, long after those lines, and perhaps after the
file that held them was rotated away. So the facts are saved with the positions (same atomic
write, so they always match the offsets) and put back before the first line is read:

* per source: engine, configuration dump, version, year (vLLM lines have none), newest log time,
  whether runtime lines were seen (a boot line after them is a server restart), unified memory,
  the server's life state (serving, idle, dead...) and since when;
* per DP rank: the speaking (PP, TP) rank, capacity facts, per-layer state bytes, runtime gauges
  (last values), findings and recommendations (``mamba_capped`` is decided at boot).

Counters are not saved: they restart at 0 with the process, which is what Prometheus expects of a
counter (``rate()`` handles the reset). Rules' windows and usage statistics start afresh too;
their findings are kept until the next line decides them again: the rules start each restored
finding's hysteresis on, so it clears when the condition is gone (tests/rules/test_restored_findings.py).

Why a snapshot rather than re-reading the start of the current file: the boot section is often
no longer in the current file (rotated, compressed, deleted). Where there is no snapshot (no
``--positions``, a lost or damaged one), the boot is read back instead, through a scratch
pipeline whose facts reach the real one as the same snapshot (exporter.sources.recovery: capture
there, restore here), so its lines are not counted. The snapshot is small (a few KiB per source)
and validated strictly on load: a damaged or hostile one is dropped (counted as a corrupt
positions file), never trusted.
"""

from __future__ import annotations

import math

from .pipeline import Pipeline
from .store import SERVER_STATES, ServerState, SourceState

MAX_KEYS = 512
MAX_STR = 8192
MAX_SERVERS = 1024
MAX_DEPTH = 4


class SnapshotError(ValueError):
    pass


def _num(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > 1e300:
        raise SnapshotError("not a finite number")
    return float(v)


def _str(v: object) -> str:
    if not isinstance(v, str) or len(v) > MAX_STR:
        raise SnapshotError("not a short string")
    return v


def _nums(d: object) -> dict[str, float]:
    if not isinstance(d, dict) or len(d) > MAX_KEYS:
        raise SnapshotError("not a small map of numbers")
    return {_str(k): _num(v) for k, v in d.items()}


def _plain(v: object, depth: int = 0) -> object:
    """A JSON value of bounded size and depth (configuration values)."""
    if depth > MAX_DEPTH:
        raise SnapshotError("nested too deeply")
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return v if isinstance(v, int) and abs(v) < 1 << 63 else _num(v)
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, list) and len(v) <= MAX_KEYS:
        return [_plain(x, depth + 1) for x in v]
    if isinstance(v, dict) and len(v) <= MAX_KEYS:
        return {_str(k): _plain(x, depth + 1) for k, x in v.items()}
    raise SnapshotError("not a plain value")


def _jsonable(v: object) -> bool:
    try:
        _plain(v)
    except SnapshotError:
        return False
    return True


def capture(pipe: Pipeline, source: str) -> dict | None:
    """The facts of ``source`` as plain JSON data (None if the source has said nothing yet)."""
    with pipe.lock:
        src = pipe.sources.get(source)
        if src is None or (not src.servers and not src.config and src.engine is None):
            return None
        servers = {}
        for rank, s in src.servers.items():
            servers[rank] = {
                "speaker": list(s.speaker) if s.speaker is not None else None,
                "gauges": dict(s.gauges),
                "capacity": dict(s.capacity),
                "mamba_state_bytes": dict(s.mamba_state_bytes),
                "replayssm_buffer_bytes": dict(s.replayssm_buffer_bytes),
                "findings": dict(s.findings),
                "recommendations": [list(r) for r in s.recommendations],
                "recommended_ratio": s.recommended_ratio,
                "kv_lines": s.kv_lines,
                "kv_upper_bound": s.kv_upper_bound,
            }
        return {
            "engine": src.engine,
            "config": {k: v for k, v in src.config.items() if _jsonable(v)},
            "version": src.version,
            "year": src.year,
            "last_ts": src.last_ts,
            "runtime_seen": src.runtime_seen,
            "unified_memory": dict(src.unified_memory),
            "life": src.life,
            "life_since": src.life_since,
            "life_cause": src.life_cause,
            "batch_ts": src.batch_ts,
            "servers": servers,
        }


def _server(rank: str, d: object) -> ServerState:
    if not isinstance(d, dict):
        raise SnapshotError("server is not a map")
    s = ServerState(_str(rank))
    sp = d.get("speaker")
    if sp is not None:
        if not (
            isinstance(sp, list) and len(sp) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 20 for x in sp)
        ):
            raise SnapshotError("bad speaker")
        s.speaker = (sp[0], sp[1])
    s.gauges = _nums(d.get("gauges", {}))
    s.capacity = _nums(d.get("capacity", {}))
    s.mamba_state_bytes = _nums(d.get("mamba_state_bytes", {}))
    s.replayssm_buffer_bytes = _nums(d.get("replayssm_buffer_bytes", {}))
    f = d.get("findings", {})
    if not isinstance(f, dict) or len(f) > MAX_KEYS or not all(v in (0, 1) and not isinstance(v, bool) for v in f.values()):
        raise SnapshotError("bad findings")
    s.findings = {_str(k): int(v) for k, v in f.items()}
    recs = d.get("recommendations", [])
    if not isinstance(recs, list) or len(recs) > MAX_KEYS or not all(isinstance(r, list) and len(r) in (3, 4) for r in recs):
        raise SnapshotError("bad recommendations")
    # (rule, flag, value, rank); a snapshot written before the rank label: each finding's in the order kept
    s.recommendations = []
    for r in recs:
        rank = _str(r[3]) if len(r) == 4 else str(1 + sum(1 for x in s.recommendations if x[0] == _str(r[0])))
        s.recommendations.append((_str(r[0]), _str(r[1]), _str(r[2]), rank))
    rr = d.get("recommended_ratio")
    s.recommended_ratio = None if rr is None else _num(rr)
    kl = d.get("kv_lines", 0)
    if not isinstance(kl, int) or isinstance(kl, bool) or not 0 <= kl < 1 << 20:
        raise SnapshotError("bad kv_lines")
    s.kv_lines = kl
    s.kv_upper_bound = bool(d.get("kv_upper_bound", False))
    return s


def restore(pipe: Pipeline, source: str, snap: object) -> None:
    """Put the saved facts into ``source``'s (fresh) state; raises SnapshotError if they do not
    validate (nothing is changed then)."""
    if not isinstance(snap, dict):
        raise SnapshotError("not a map")
    engine = snap.get("engine")
    if engine is not None and engine not in ("sglang", "vllm"):
        raise SnapshotError("unknown engine")
    cfg = snap.get("config", {})
    if not isinstance(cfg, dict) or len(cfg) > MAX_KEYS:
        raise SnapshotError("bad config")
    config = {_str(k): _plain(v) for k, v in cfg.items()}
    version = snap.get("version")
    version = None if version is None else _str(version)
    year = snap.get("year")
    if not isinstance(year, int) or isinstance(year, bool) or not 1970 <= year <= 9999:
        raise SnapshotError("bad year")
    last_ts = snap.get("last_ts")
    last_ts = None if last_ts is None else _num(last_ts)
    servers = snap.get("servers", {})
    if not isinstance(servers, dict) or len(servers) > MAX_SERVERS:
        raise SnapshotError("bad servers")
    restored = {str(rank): _server(rank, d) for rank, d in servers.items()}
    unified = _nums(snap.get("unified_memory", {}))
    life = snap.get("life")
    if life is not None and life not in SERVER_STATES:
        raise SnapshotError("bad life state")
    life_since = snap.get("life_since")
    life_since = None if life_since is None else _num(life_since)
    cause = snap.get("life_cause")
    cause = None if cause is None else _str(cause)[:64]
    batch_ts = snap.get("batch_ts")
    batch_ts = None if batch_ts is None else _num(batch_ts)
    with pipe.lock:
        src: SourceState = pipe.source(source)
        if src.servers or src.config:
            return  # lines were read already: they are newer than the snapshot
        if pipe.engine is None and engine is not None:
            src.engine = engine
        src.config = config
        src.version = version
        src.year = year
        src.last_ts = last_ts
        src.runtime_seen = bool(snap.get("runtime_seen", False))
        src.unified_memory = unified
        src.life, src.life_since, src.life_cause = life, life_since, cause
        src.batch_at(batch_ts)  # the silence is measured from the last batch line before the restart
        src.servers = restored
        src.changed()  # what the facts read came from the snapshot
