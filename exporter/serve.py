"""The ``serve`` wiring: tailers (and stdin) feed one pipeline; HTTP serves its collectors.

Half of the composition root (``exporter/app.py`` is the other): it is a module of its own so
that ``replay`` and ``report`` do not load the tailers, watchdog, bcrypt and the web server.
``docs/serve.md`` documents the flags, the endpoints and the sidecar pattern.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, ProcessCollector

from .app import new_pipeline
from .diagnosis.history import History
from .diagnosis.rules import RulesConfig
from .exposition import buildinfo
from .exposition.collector import HybridCacheCollector
from .exposition.identity import Labelled
from .exposition.selfmetrics import SelfCollector
from .exposition.web import App, make_servers, url_of
from .exposition.webconfig import ReloadingWebConfig, WebConfig
from .presentation.status import StatusPages
from .reading.lines import DEFAULT_MAX_LINE
from .sources import Manager, Positions, StdinSource
from .sources.kubernetes import PodLogs
from .sources.missing import MissingPaths
from .state.store import DEFAULT_MAX_DP_RANKS

log = logging.getLogger("hybrid_cache_exporter")


@dataclass
class ServeConfig:
    """What ``serve`` runs, already checked by the face (paths are not opened yet)."""

    listen: list[str] | str
    files: list[tuple[str | None, str]] = field(default_factory=list)  # (source name or None, path or glob)
    stdin_name: str | None = None  # the source label of ``--log -``, None = no stdin
    engine: str | None = None
    rules: RulesConfig | None = None
    web: WebConfig | ReloadingWebConfig | None = None
    telemetry_path: str = "/metrics"
    labels: dict[str, str] = field(default_factory=dict)  # --label: on every series
    source_missing_after: float = 60.0
    kubernetes_pods: str | None = None  # DaemonSet mode: the kubelet's /var/log/pods
    kubernetes_max_sources: int = 100
    kubernetes_forget_after: float = 600.0
    kubernetes_include: str | None = None  # regex on namespace/pod/container
    from_beginning: bool = False
    positions: str | None = None
    positions_interval: float = 5.0
    poll_interval: float = 0.0
    rotate_wait: float = 5.0
    max_line: int = DEFAULT_MAX_LINE
    max_dp_ranks: int = DEFAULT_MAX_DP_RANKS


class Service:
    """The running sidecar: tailers (and stdin) feed one pipeline; HTTP serves its collectors.

    Built by :func:`build_service` (which may raise ``OSError`` when the address cannot be bound);
    :meth:`start` begins reading and serving, :meth:`stop` writes the positions and closes all.
    """

    def __init__(self, cfg: ServeConfig) -> None:
        self.cfg = cfg
        self.history = History()  # the status page's timelines (the last hour of each server)
        self.pipe = new_pipeline(cfg.engine, cfg.rules, cfg.max_dp_ranks, self.history)
        self.positions = Positions(cfg.positions) if cfg.positions else None
        self.manager = Manager(
            self.pipe,
            cfg.files,
            from_beginning=cfg.from_beginning,
            positions=self.positions,
            positions_interval=cfg.positions_interval,
            poll_interval=cfg.poll_interval,
            rotate_wait=cfg.rotate_wait,
            max_line=cfg.max_line,
            # a file opened past its start reads its current boot back through one of these
            recover_pipeline=lambda: new_pipeline(cfg.engine, cfg.rules, cfg.max_dp_ranks),
        )
        self.missing = MissingPaths(cfg.files, self.manager, cfg.source_missing_after)
        self.manager.discoverers.append(self.missing.check)
        self.pods: PodLogs | None = None
        if cfg.kubernetes_pods:
            self.pods = PodLogs(
                cfg.kubernetes_pods,
                self.manager,
                self._forget,
                max_sources=cfg.kubernetes_max_sources,
                forget_after=cfg.kubernetes_forget_after,
                include=re.compile(cfg.kubernetes_include) if cfg.kubernetes_include else None,
            )
            self.manager.discoverers.append(self.pods)
        self.stdin_src = None
        if cfg.stdin_name is not None:
            self.stdin_src = StdinSource(self.pipe, cfg.stdin_name, sys.stdin.fileno(), cfg.max_line)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(HybridCacheCollector(self.pipe))
        self.web = cfg.web if isinstance(cfg.web, ReloadingWebConfig) else None
        self.registry.register(
            SelfCollector(
                self.all_sources,
                self.positions,
                missing=self.missing.status if cfg.files else None,
                web=self.web if self.web is not None and self.web.path else None,
                over_limit=(lambda: self.pods.over_limit) if self.pods else None,
                http=lambda: [srv.stats for srv in self.servers],
                format_changes=self.pipe.format_changes,
            )
        )
        ProcessCollector(registry=self.registry)
        exposed = Labelled(self.registry, cfg.labels, self.pods.labels if self.pods else None)
        listens = [cfg.listen] if isinstance(cfg.listen, str) else list(cfg.listen)
        pages = StatusPages(
            self.pipe, self.history, self.rows, self.ready, telemetry_path=cfg.telemetry_path, version=_version(), rules=cfg.rules
        )
        self.app = App(
            exposed,
            self.ready,
            self.rows,
            cfg.web or WebConfig(),
            cfg.telemetry_path,
            version=_version(),
            status=pages,
            alive=self.manager.alive,
            warm=self.manager.warm.wait,
        )
        self.servers = make_servers(listens, self.app)  # ValueError / OSError: the face reports it
        self._http: list[threading.Thread] = []
        self._stopping = threading.Event()

    def _tick(self) -> None:
        """The ingest tick: once a second the pipeline samples what quiet sources still hold, and a serving
        SGLang source whose log, read to its end, stayed silent for quiet_seconds goes idle (docs/rules.md#silence;
        the rules run here, on the ingest side, never in a scrape)."""
        while not self._stopping.wait(1.0):
            try:
                # the tailers are looked at (caught_up) only when a serving source is quiet, outside the pipeline's
                # lock: a node of 10,000 busy sources does not look at 10,000 files every second
                self.pipe.tick(caught_up=self.caught_up)
            except Exception:  # pragma: no cover - a bug; keep serving what we have
                log.exception("ingest tick failed")

    def caught_up(self) -> set[str]:
        """The sources every byte of whose files was read (each tailer open, nothing left to read): only for
        those can the wall clock tell that the server wrote nothing. stdin is read as it comes."""
        behind, seen = set(), set()
        for t in self.manager.snapshot():
            seen.add(t.source)
            if t.state != "open" or t.lag() > 0:
                behind.add(t.source)
        if self.stdin_src is not None:
            seen.add(self.stdin_src.source)
        return seen - behind

    @property
    def server(self):
        """The first listener (tests and single-address callers)."""
        return self.servers[0]

    def _forget(self, source: str) -> None:
        """A DaemonSet source whose pod is gone: its state, series and timelines go."""
        with self.pipe.lock:
            self.pipe.forget(source)
            for key in [k for k in self.history.timelines if k[0] == source]:
                del self.history.timelines[key]

    def all_sources(self) -> list:
        out: list = list(self.manager.snapshot())
        if self.stdin_src is not None:
            out.append(self.stdin_src)
        return out

    def ready(self) -> tuple[bool, list[str]]:
        reasons = []
        if self.cfg.files and not self.manager.started:
            reasons.append("tailer not started yet")
        for t in self.manager.snapshot():
            if t.state not in ("open", "waiting"):
                reasons.append(f"{t.path}: {t.error or t.state}")
        reasons += self.missing.reasons()
        return not reasons, reasons

    def rows(self) -> list[dict]:
        out = []
        with self.pipe.lock:
            engines = {n: s.engine for n, s in self.pipe.sources.items()}
        missing = self.missing.missing_paths()
        for s in self.all_sources():
            out.append(
                {
                    "source": s.source,
                    "path": s.path,
                    "engine": engines.get(s.source) or "(not detected yet)",
                    "state": f"missing (not there after {self.cfg.source_missing_after:.0f}s)" if s.path in missing else s.state,
                    "offset": s.offset(),
                    "lag_bytes": s.lag(),
                    "open_files": s.open_files(),
                }
            )
        out += self.missing.rows()
        return out

    def start(self) -> None:
        b = buildinfo.labels()
        log.info("starting hybrid-cache-exporter version=%s revision=%s python=%s", b["version"], b["revision"], b["python_version"])
        self.manager.start()
        if self.stdin_src is not None:
            self.stdin_src.start()
        threading.Thread(target=self._tick, name="ingest-tick", daemon=True).start()
        for srv in self.servers:
            t = threading.Thread(target=srv.serve_forever, name="http", daemon=True)
            t.start()
            self._http.append(t)
        tls = self.app.config.ssl_context is not None
        for srv in self.servers:
            log.info(
                "listening on %s%s (%s mode, %d file spec(s)%s%s)",
                url_of(srv, tls),
                self.cfg.telemetry_path,
                self.manager.mode,
                len(self.cfg.files),
                ", stdin" if self.stdin_src else "",
                f", pods under {self.cfg.kubernetes_pods}" if self.cfg.kubernetes_pods else "",
            )

    def stop(self) -> None:
        self._stopping.set()
        self.manager.stop()  # stops reading and writes the positions file
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()
        log.info("stopped")


def _version() -> str:
    b = buildinfo.labels()
    return f"{b['version']} (revision {b['revision']}, Python {b['python_version']})"


__all__ = ["ServeConfig", "Service"]
