"""The ``serve`` wiring: tailers (and stdin) feed one pipeline; HTTP serves its collectors.

Half of the composition root (``exporter/app.py`` is the other): it is a module of its own so
that ``replay`` and ``report`` do not load the tailers, watchdog, bcrypt and the web server.
``docs/serve.md`` documents the flags, the endpoints and the sidecar pattern.
"""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, ProcessCollector

from .app import new_pipeline
from .collector import HybridCacheCollector
from .history import attach as attach_history
from .lines import DEFAULT_MAX_LINE
from .rules import RulesConfig
from .selfmetrics import SelfCollector
from .sources import Manager, Positions, StdinSource
from .status import StatusPages
from .web import App, WebConfig, make_server

log = logging.getLogger("hybrid_cache_exporter")


@dataclass
class ServeConfig:
    """What ``serve`` runs, already checked by the face (paths are not opened yet)."""

    listen: str
    files: list[tuple[str | None, str]] = field(default_factory=list)  # (source name or None, path or glob)
    stdin_name: str | None = None  # the source label of ``--log -``, None = no stdin
    engine: str | None = None
    rules: RulesConfig | None = None
    web: WebConfig | None = None
    from_beginning: bool = False
    positions: str | None = None
    positions_interval: float = 5.0
    poll_interval: float = 0.0
    rotate_wait: float = 5.0
    max_line: int = DEFAULT_MAX_LINE


class Service:
    """The running sidecar: tailers (and stdin) feed one pipeline; HTTP serves its collectors.

    Built by :func:`build_service` (which may raise ``OSError`` when the address cannot be bound);
    :meth:`start` begins reading and serving, :meth:`stop` writes the positions and closes all.
    """

    def __init__(self, cfg: ServeConfig) -> None:
        self.cfg = cfg
        self.pipe = new_pipeline(cfg.engine, cfg.rules)
        self.history = attach_history(self.pipe)  # after the rules: its samples see their verdicts
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
        )
        self.stdin_src = None
        if cfg.stdin_name is not None:
            self.stdin_src = StdinSource(self.pipe, cfg.stdin_name, sys.stdin.fileno(), cfg.max_line)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(HybridCacheCollector(self.pipe))
        self.registry.register(SelfCollector(self.all_sources, self.positions))
        ProcessCollector(registry=self.registry)
        self.web = cfg.web or WebConfig()
        pages = StatusPages(self.pipe, self.history, self.rows, self.ready)
        self.server = make_server(cfg.listen, App(self.registry, self.ready, self.rows, self.web, status=pages))
        self._http: threading.Thread | None = None

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
        return not reasons, reasons

    def rows(self) -> list[dict]:
        out = []
        with self.pipe.lock:
            engines = {n: s.engine for n, s in self.pipe.sources.items()}
        for s in self.all_sources():
            out.append(
                {
                    "source": s.source,
                    "path": s.path,
                    "engine": engines.get(s.source) or "(not detected yet)",
                    "state": s.state,
                    "offset": s.offset(),
                    "lag_bytes": s.lag(),
                    "open_files": s.open_files(),
                }
            )
        return out

    def start(self) -> None:
        self.manager.start()
        if self.stdin_src is not None:
            self.stdin_src.start()
        self._http = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)
        self._http.start()
        host, port = self.server.server_address[:2]
        scheme = "https" if self.web.ssl_context else "http"
        log.info(
            "listening on %s://%s:%d (%s mode, %d file spec(s)%s)",
            scheme,
            host,
            port,
            self.manager.mode,
            len(self.cfg.files),
            ", stdin" if self.stdin_src else "",
        )

    def stop(self) -> None:
        self.manager.stop()  # stops reading and writes the positions file
        self.server.shutdown()
        self.server.server_close()
        log.info("stopped")


__all__ = ["ServeConfig", "Service"]
