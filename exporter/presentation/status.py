"""The live status page of ``serve``: ``/`` (HTML), ``/status.json`` (its refresh) and ``/static/*``.

Per server (source, DP rank): the diagnosis now in words (binding pool, firing findings and since
when), both pools' usage, running against the cap and the queue, the recommended flags with their
expected effect, the capacity facts, and a chart of the last hour of log time from the
:class:`~exporter.diagnosis.history.History` ring (findings shaded). The source table of the old landing
page stays below.

The page is rendered from the state under the pipeline lock like a scrape (the runtime gauges
through the sampler's read-only view, so "now" is the newest line and nothing is written), with the same fragments ``report --html`` uses
(:mod:`exporter.presentation.drawing`). It refreshes itself: charts.js fetches ``status.json`` every
``REFRESH_SECONDS`` and swaps the fragments and chart data in place (a reload only when servers
appear). Costs are measured in docs/status-page.md.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from html import escape
from urllib.parse import parse_qs

from ..diagnosis.history import History
from ..diagnosis.rules import RulesConfig
from . import drawing
from .report import fact_rows, server_status

log = logging.getLogger("hybrid_cache_exporter.status")
REFRESH_SECONDS = 5
SOURCE_COLUMNS = (
    ("source", "source"),
    ("path", "path"),
    ("engine", "engine"),
    ("state", "state"),
    ("offset", "offset"),
    ("lag_bytes", "lag (bytes)"),
    ("open_files", "open files"),
)
Response = tuple[int, str, bytes, list[tuple[str, str]]]


def _rank_key(dp: str) -> tuple[int, str]:
    return (int(dp), "") if dp.isdigit() else (1 << 30, dp)


class StatusPages:
    """What ``web.Handler`` serves beyond /metrics and the probes: :meth:`get` answers a path
    or returns None (not ours)."""

    def __init__(
        self,
        pipe,
        history: History,
        sources: Callable[[], list[dict]] = list,
        ready: Callable[[], tuple[bool, list[str]]] = lambda: (True, []),
        telemetry_path: str = "/metrics",
        version: str = "",
        rules: RulesConfig | None = None,
    ) -> None:
        self.pipe = pipe
        self.history = history
        self.rules = rules or RulesConfig()  # what the pipeline's rules were configured with
        self.sources = sources
        self.ready = ready
        self.telemetry_path = telemetry_path
        self.version = version

    def get(self, path: str, query: str = "") -> Response | None:
        try:
            return self._get(path, query)
        except Exception:  # a page must not take the exporter down; /metrics is unaffected
            log.exception("rendering %s failed", path)
            return 500, "text/plain; charset=utf-8", b"rendering the status page failed (see the exporter's log)\n", []

    def _get(self, path: str, query: str) -> Response | None:
        if path == "/":
            return 200, "text/html; charset=utf-8", self.page(), [("Cache-Control", "no-store")]
        if path == "/status.json":
            since = parse_qs(query).get("since", [None])[0]
            try:
                t = float(since) if since else None
            except ValueError:
                return 400, "text/plain; charset=utf-8", b"since: a number (clock seconds) expected\n", []
            return 200, "application/json", self.json(t), [("Cache-Control", "no-store")]
        if path.startswith("/static/"):
            name = path[len("/static/") :]
            if name in drawing.STATIC_TYPES:
                return 200, drawing.STATIC_TYPES[name], drawing.static(name), [("Cache-Control", "max-age=86400")]
        return None

    # ------------------------------------------------------------------------------------
    def servers(self, since: float | None = None) -> list[dict]:
        """Per server: its id, title, the two HTML fragments and the chart data (rows from
        ``since`` on, clock seconds; None = the whole ring)."""
        cfg = self.rules
        out = []
        with self.pipe.lock:
            for name, src in sorted(self.pipe.sources.items()):
                for dp in sorted(src.servers, key=_rank_key):
                    srv = src.servers[dp]
                    # like a scrape: the newest batch lines through the sampler's view, nothing written
                    st = server_status(src, srv, cfg, gauges=self.pipe.gauges_of(src, srv), now=time.time())
                    chart = drawing.chart_data(self.history.timeline(name, dp), since)
                    out.append({"status": st, "chart": chart, "engine": src.engine})
        for s in out:  # the HTML outside the lock: tailers keep feeding meanwhile
            st = s["status"]
            s["key"] = drawing.slug(st["source"], st["dp_rank"])
            s["title"] = f"source <b>{escape(st['source'])}</b> &middot; DP rank {escape(st['dp_rank'])}"
            s["top"] = drawing.diagnosis_html(st, s["chart"]["spans"], when="last sample")
            s["bottom"] = drawing.actions_html(st, fact_rows(st["capacity"]))
        return out

    def _sources_html(self) -> str:
        ok, reasons = self.ready()
        rows = []
        for s in self.sources():
            cells = "".join(f"<td>{escape('' if s.get(k) is None else str(s.get(k)))}</td>" for k, _ in SOURCE_COLUMNS)
            rows.append(f"<tr>{cells}</tr>")
        head = "".join(f"<th>{escape(t)}</th>" for _, t in SOURCE_COLUMNS)
        return f"<p>Ready: {'yes' if ok else 'no: ' + escape('; '.join(reasons))}</p><table><tr>{head}</tr>{''.join(rows)}</table>"

    def page(self) -> bytes:
        servers = self.servers()
        body = [drawing.server_section(s["key"], s["title"], s["engine"], s["top"], s["bottom"]) for s in servers]
        if not servers:
            body.append('<section class="server"><p>No server has logged a batch or startup line yet.</p></section>')
        body.append(f'<section class="server"><h2>Sources</h2><div id="hce-sources">{self._sources_html()}</div></section>')
        data = {"refresh": REFRESH_SECONDS, "endpoint": "status.json", "charts": {s["key"]: s["chart"] for s in servers}}
        metrics = escape(self.telemetry_path.lstrip("/") or ".", quote=True)  # relative: right behind a proxy prefix too
        links = f'<a href="{metrics}">{escape(self.telemetry_path)}</a><a href="healthz">/healthz</a><a href="readyz">/readyz</a>'
        if self.version:
            links += f'<span class="ver">{escape(self.version)}</span>'
        return drawing.document(
            "hybrid-cache-exporter",
            "".join(body),
            data,
            inline=False,
            header_links=links,
            updated=_updated("loaded"),
            refresh=REFRESH_SECONDS,
        ).encode()

    def json(self, since: float | None = None) -> bytes:
        """The refresh: fragments of every panel and the chart rows from ``since`` on (the
        browser keeps what it has and appends; rows older than a chart's ``first`` fall off)."""
        servers = self.servers(since)
        panels = []
        for s in servers:
            panels.append({"id": "p-" + s["key"], "html": s["top"]})
            panels.append({"id": "q-" + s["key"], "html": s["bottom"]})
        panels.append({"id": "hce-sources", "html": self._sources_html()})
        doc = {"updated": _updated("updated"), "panels": panels, "charts": {s["key"]: s["chart"] for s in servers}}
        return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()


def _updated(how: str) -> str:
    """The header's note: ``loaded`` by the page, ``updated`` by each refresh (wall clock)."""
    return f"{how} {time.strftime('%H:%M:%S')}, refreshes every {REFRESH_SECONDS} s"


__all__ = ["REFRESH_SECONDS", "StatusPages"]
