"""The custom collector: metric families built from the state at scrape time (prometheus_client's registry
takes it as it is: it has ``collect``; nothing of prometheus_client is imported, so ``replay`` loads none of it).

Nothing is registered globally and nothing is pre-created: a series exists only when its field
appeared in the log (a dense model has no ``hybrid_cache_mamba_usage_ratio``). Samples never
carry timestamps. Names, help and labels come from ``exporter/catalogues/contract.py`` (the public API); the
families are ``exporter.exposition.family.Family`` (rows, written straight to the exposition's text).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from parsers import labels

from ..catalogues import contract as C
from ..state import facts
from ..state.pipeline import Pipeline
from ..state.store import SERVER_STATES, STATE_BASES, SourceState
from .family import Family

RUNTIME = {m.key: m for m in C.RUNTIME}
CAPACITY = {m.key: m for m in C.CAPACITY}


def server_info(src: SourceState) -> dict[str, str]:
    """Labels of ``hybrid_cache_server`` info: the server's configuration as logged, each value
    within its label's bound (``contract.LABELS``; "" when not logged, or out of bound)."""
    cfg = src.config
    out: dict[str, str] = {}
    for label, keys in C.SERVER_INFO_KEYS:
        val = ""
        for k in keys:
            if cfg.get(k) not in (None, ""):
                val = labels.shown(label, cfg[k])
                break
        out[label] = val
    v = src.version or ""
    out["version"] = v if C.LABEL["version"].admits(v) else ""
    return out


@dataclass(slots=True)
class _Server:
    """What a scrape shows of one server, copied under the pipeline lock."""

    dp: str
    gauges: dict[str, float]
    capacity: dict[str, float]
    max_running: float | None
    max_running_basis: str  # logged | default (facts.basis_of)
    state_bytes: dict[str, float]
    replay_bytes: dict[str, float]
    counters: dict[str, float]
    findings: list[tuple[str, int]]
    recommendations: list[tuple[str, str, str]]
    recommended_ratio: float | None


@dataclass(slots=True)
class _Source:
    """What a scrape shows of one source, copied under the pipeline lock."""

    name: str
    engine: str
    lines: dict[str, int]
    dp_dropped: int
    restarts: int = 0
    last_ts: float | None = None
    info: dict[str, str] = field(default_factory=dict)
    life: str | None = None
    life_since: float | None = None
    life_basis: str = "logged"
    deaths: int = 0
    gdn_kernel: str | None = None
    servers: list[_Server] = field(default_factory=list)


def snapshot(pipeline: Pipeline) -> list[_Source]:
    """Copy what the families need, under the pipeline lock (plain dict and list copies: the
    families are built after the lock is released, so a scrape never holds up the tailers for
    longer than the copies take)."""
    out: list[_Source] = []
    with pipeline.lock:  # reads only: the newest lines come from the sampler's view, no rule runs
        for src in pipeline.sources.values():
            s = _Source(src.name, src.engine or "", dict(src.lines), src.dp_dropped)
            out.append(s)
            if not src.engine:
                continue
            s.restarts, s.last_ts, s.info = src.restarts, src.last_ts, server_info(src)
            s.life, s.life_since, s.life_basis, s.deaths = src.life, src.life_since, src.basis, src.deaths
            k = src.config.get("_gdn_prefill_kernel")
            s.gdn_kernel = k if isinstance(k, str) else None
            for dp, srv in sorted(src.servers.items()):
                f = facts.peek(src, srv)  # the rules' and report's facts, read only
                s.servers.append(
                    _Server(
                        dp,
                        pipeline.gauges_of(src, srv),
                        dict(srv.capacity),
                        f.max_running,
                        facts.basis_of(f.max_running_source),
                        dict(srv.mamba_state_bytes),
                        dict(srv.replayssm_buffer_bytes),
                        dict(srv.counters),
                        sorted(srv.findings.items()),
                        list(srv.recommendations),
                        srv.recommended_ratio,
                    )
                )
    return out


class HybridCacheCollector:
    """Builds every ``hybrid_cache_*`` family from a :class:`Pipeline` at scrape time."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def collect(self) -> Iterator:
        fams = list(self._collect(snapshot(self.pipeline)))  # rendered outside the lock
        # a family with no samples is left out: absent, not 0
        yield from (f for f in fams if f.rows)

    def _collect(self, sources: list[_Source]) -> Iterator:
        fams: dict[str, Family] = {}

        def gauge(m: C.Metric) -> Family:
            f = fams.get(m.key)
            if f is None:
                f = fams[m.key] = Family(m)
            return f

        counters = {m.key: Family(m) for m in C.COUNTERS}
        prefill_tokens = Family(C.PREFILL_TOKENS)
        state_bytes = Family(C.MAMBA_STATE_BYTES)
        replay_bytes = Family(C.REPLAYSSM_BUFFER_BYTES)
        max_running = Family(C.MAX_RUNNING)
        finding = Family(C.FINDING)
        reco = Family(C.RECOMMENDATION)
        reco_ratio = Family(C.RECOMMENDED_RATIO)
        info = Family(C.SERVER_INFO)
        lines = Family(C.EXPORTER_LINES)
        dp_limit = Family(C.DP_RANK_LIMIT_LINES)
        restarts = Family(C.SERVER_RESTARTS)
        last_ts = Family(C.LAST_LINE_TIMESTAMP)
        life = Family(C.SERVER_STATE)
        life_since = Family(C.SERVER_STATE_SINCE)
        life_basis = Family(C.SERVER_STATE_BASIS)
        deaths = Family(C.SERVER_DEATHS)
        gdn_kernel = Family(C.GDN_PREFILL_KERNEL)

        for src in sources:
            eng = src.engine
            for outcome, n in src.lines.items():
                lines.add_metric([src.name, outcome], n)
            if src.dp_dropped:
                dp_limit.add_metric([src.name], src.dp_dropped)
            if not src.engine:
                continue
            restarts.add_metric([eng, src.name], src.restarts)
            if src.last_ts is not None:
                last_ts.add_metric([eng, src.name], src.last_ts)
            info.add_metric([eng, src.name], src.info)
            if src.life is not None:
                for state in SERVER_STATES:  # an enum: one series per state, 1 for the current one
                    life.add_metric([eng, src.name, state], 1.0 if state == src.life else 0.0)
                if src.life_since is not None:
                    life_since.add_metric([eng, src.name], src.life_since)
                for basis in STATE_BASES:  # what set it: a line, or a silence (docs/rules.md#silence)
                    life_basis.add_metric([eng, src.name, basis], 1.0 if basis == src.life_basis else 0.0)
            if src.life is not None or src.deaths:
                deaths.add_metric([eng, src.name], src.deaths)
            if src.gdn_kernel:
                gdn_kernel.add_metric([eng, src.name], {"kernel": src.gdn_kernel})
            for srv in src.servers:
                lab = [eng, src.name, srv.dp]
                for name, v in srv.gauges.items():
                    gauge(RUNTIME[name]).add_metric(lab, v)
                for name, v in srv.capacity.items():
                    m = CAPACITY.get(name)
                    if m is not None:
                        gauge(m).add_metric(lab, v)
                if srv.max_running is not None:
                    max_running.add_metric(lab + [srv.max_running_basis], srv.max_running)
                for k, v in srv.state_bytes.items():
                    state_bytes.add_metric(lab + [k], v)
                for k, v in srv.replay_bytes.items():
                    replay_bytes.add_metric(lab + [k], v)
                for short, fam in counters.items():
                    v = srv.counters.get(short)
                    if v is not None:
                        fam.add_metric(lab, v)
                for kind in ("new", "cached"):  # each kind only once a prefill line carried it
                    v = srv.counters.get("prefill_tokens_" + kind)
                    if v is not None:
                        prefill_tokens.add_metric(lab + [kind], v)
                for rule, on in srv.findings:
                    finding.add_metric(lab + [rule], on)
                for rule, flag, value, rank in srv.recommendations:
                    reco.add_metric(lab + [rule, flag, value, rank], {})
                if srv.recommended_ratio is not None:
                    reco_ratio.add_metric(lab, srv.recommended_ratio)

        yield lines
        yield dp_limit
        yield last_ts
        yield restarts
        yield info
        yield life
        yield life_since
        yield life_basis
        yield deaths
        yield gdn_kernel
        yield from fams.values()
        yield max_running
        yield state_bytes
        yield replay_bytes
        yield from counters.values()
        yield prefill_tokens
        yield finding
        yield reco
        yield reco_ratio
