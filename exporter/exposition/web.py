"""HTTP side of ``serve``: /metrics, /healthz, /readyz, the landing page and the status page,
on one or more listeners (IPv6, dual stack), over TLS when the web configuration says so.

The web configuration (``--web.config.file``: TLS, mTLS, basic auth, reloaded when its files
change) is exporter.exposition.webconfig; each new connection asks it for the configuration in force. The
connections (an event loop per listener that reads each request head whole, a pool of workers that
answers it: ``Handler.answer``) are exporter.exposition.connections.
"""

from __future__ import annotations

import html
import io
import logging
import socket
import ssl
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from prometheus_client import exposition
from prometheus_client.metrics_core import Metric

from .. import DEFAULT_PORT
from . import connections
from .connections import Server
from .family import Family
from .text import chunks
from .webconfig import FixedWebConfig, ReloadingWebConfig, WebConfig

log = logging.getLogger("hybrid_cache_exporter.web")

WARM_WAIT = 10.0  # seconds a request waits for the start-up read (the manager's budget is 5 s)
# gzip's fastest level: a node's 80 MB exposition compresses ~12x in 0.2 s of CPU; level 9
# (gzip.compress's default) gains 25 % of the size for 2.4 s (docs/performance.md)
GZIP_LEVEL = 1


def parse_listen(s: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (all interfaces), ``[v6]:PORT``; port defaults to 19833."""
    host, port = s, str(DEFAULT_PORT)
    if s.startswith("["):
        end = s.find("]")
        if end < 0:
            raise ValueError(f"bad listen address {s!r}")
        host, rest = s[1:end], s[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"bad listen address {s!r}")
            port = rest[1:]
    elif s.count(":") > 1:
        raise ValueError(f"bad listen address {s!r}: write an IPv6 address in brackets, e.g. [::1]:{DEFAULT_PORT}")
    elif ":" in s:
        host, port = s.rsplit(":", 1)
    elif s.isdigit():
        raise ValueError(f"bad listen address {s!r}: a port alone is not an address; write ':{s}' (every interface) or '127.0.0.1:{s}'")
    try:
        p = int(port)
    except ValueError:
        raise ValueError(f"bad port in listen address {s!r}") from None
    if not 0 <= p <= 65535:
        raise ValueError(f"bad port in listen address {s!r}")
    return host, p


@dataclass(frozen=True)
class BindAddress:
    """Where one listener binds. ``dual_stack``: an IPv6 socket that takes IPv4 too (``:PORT``, ``[::]:PORT``)."""

    family: int
    host: str
    port: int
    dual_stack: bool = False


def resolve_listen(s: str) -> BindAddress:
    """A listen address as Go's ``net.Listen`` reads it: ``:PORT`` and ``[::]:PORT`` are every
    interface, IPv4 and IPv6 (IPv4 only where the host has no IPv6); ``0.0.0.0:PORT`` is IPv4 only;
    ``[::1]:PORT`` IPv6 only; a host name binds its first address."""
    host, port = parse_listen(s)
    if host in ("", "::"):
        if socket.has_ipv6 and _ipv6_usable():
            return BindAddress(socket.AF_INET6, "::", port, dual_stack=True)
        if host == "::":
            raise ValueError(f"cannot listen on {s!r}: this host has no IPv6")
        return BindAddress(socket.AF_INET, "0.0.0.0", port)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ValueError(f"cannot resolve listen address {s!r}: {e.strerror or e}") from None
    family, _, _, _, addr = infos[0]
    return BindAddress(family, addr[0], port)


def _ipv6_usable() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sk:
            sk.bind(("::1", 0))
        return True
    except OSError:
        return False


class _NameFilter:
    """``/metrics?name[]=a&name[]=b``: only the families with a sample named so, or named so
    themselves (``hybrid_cache_decode_batches`` or ``..._total``). prometheus_client's own filter
    needs collectors that describe themselves; ours build their families at scrape time."""

    def __init__(self, registry, names: list[str]) -> None:
        self.registry = registry
        self.names = set(names)

    def collect(self):
        for fam in self.registry.collect():
            if isinstance(fam, Family):  # its samples all have one name
                if fam.named(self.names):
                    yield fam
                continue
            if fam.name in self.names:
                yield fam
                continue
            samples = [s for s in fam.samples if s.name in self.names]
            if samples:
                out = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                out.samples = samples
                yield out


class App:
    """What the handler serves. ``registry`` has ``collect()``; ``ready()`` -> (ok, reasons);
    ``sources()`` -> rows for the landing page; ``web`` the (reloading) web config;
    ``telemetry_path`` where the metrics are; ``version`` the build for the landing page;
    ``alive()`` -> False when a worker thread died (/healthz then fails: the orchestrator restarts us);
    ``warm(timeout)`` waits until the files found at start were read (the metrics and the status
    page wait for it, at most ``WARM_WAIT`` seconds, so the first scrape has the facts)."""

    def __init__(
        self,
        registry,
        ready: Callable[[], tuple[bool, list[str]]],
        sources: Callable[[], list[dict]],
        config: WebConfig | ReloadingWebConfig,
        telemetry_path: str = "/metrics",
        version: str = "",
        status=None,
        alive: Callable[[], bool] | None = None,
        warm: Callable[[float], bool] | None = None,
    ):
        self.alive = alive
        self.warm = warm
        self.registry = registry
        self.ready = ready
        self.sources = sources
        self.web = config if isinstance(config, ReloadingWebConfig) else FixedWebConfig(config)
        self.telemetry_path = telemetry_path
        self.version = version
        self.status = status  # status.StatusPages: `/`, /status.json, /static/* (None: the plain landing page)

    @property
    def config(self) -> WebConfig:
        return self.web.current


def check_telemetry_path(path: str) -> str:
    if not path.startswith("/") or path in ("/", "/healthz", "/readyz") or "?" in path or "#" in path:
        raise ValueError(f"bad telemetry path {path!r}: it starts with / and is not /, /healthz or /readyz")
    return path


class Handler(BaseHTTPRequestHandler):
    server_version = "hybrid-cache-exporter"
    protocol_version = "HTTP/1.1"
    app: App  # set on the subclass made by make_server

    stats: connections.Stats  # the listener's counters (set with app)

    @classmethod
    def answer(cls, head: bytes, client_address) -> tuple[bytes, bool]:
        """The answer to one request whose head (request line and headers) the listener's loop
        read whole (exporter/exposition/connections.py): its bytes, and whether the connection closes after
        it. No socket is touched here: a slow client cannot hold the worker that runs this."""
        h = cls.__new__(cls)
        h.client_address = client_address
        h.request = h.server = None
        h.rfile = io.BytesIO(head)
        h.wfile = io.BytesIO()
        h.close_connection = True
        h.handle_one_request()
        return h.wfile.getvalue(), h.close_connection

    @property
    def config(self) -> WebConfig:
        """The web config in force (a reload's users and headers apply to open connections too;
        its certificates to new ones)."""
        return self.app.config

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8", headers: list[tuple[str, str]] = ()) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        for k, v in self.config.headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_POST(self) -> None:  # noqa: N802
        self.close_connection = True  # its body is not read
        self._send(405, b"method not allowed\n", headers=[("Allow", "GET, HEAD")])

    def do_GET(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        path = url.path
        if path not in ("/healthz", "/readyz"):
            ok = self.config.check_auth(self.headers.get("Authorization"), self.client_address[0])
            if ok is None:  # not checked: bcrypt busy (a flood of wrong passwords); try again
                self._send(503, b"authentication busy, retry\n", headers=[("Retry-After", "1")])
                return
            if not ok:
                self._send(401, b"unauthorized\n", headers=[("WWW-Authenticate", 'Basic realm="hybrid-cache-exporter"')])
                return
        if path not in ("/healthz", "/readyz") and self.app.warm is not None:
            self.app.warm(WARM_WAIT)  # the start-up read of the files found at start (docs/serve.md)
        if path == self.app.telemetry_path:
            self._metrics(url.query)
        elif path == "/healthz":
            if self.app.alive is None or self.app.alive():
                self._send(200, b"ok\n")
            else:
                self._send(503, b"tailer thread not running\n")
        elif path == "/readyz":
            ok, reasons = self.app.ready()
            if ok:
                self._send(200, b"ready\n")
            else:
                self._send(503, ("not ready\n" + "".join(r + "\n" for r in reasons)).encode())
        elif self.app.status is not None and (page := self.app.status.get(path, url.query)) is not None:
            self._send(page[0], page[2], page[1], page[3])
        elif path == "/":
            self._send(200, self._landing(), "text/html; charset=utf-8")
        else:
            self._send(404, b"not found\n")

    def _metrics(self, query: str) -> None:
        # prometheus_client's public API picks the format the Accept header asks for (text or
        # OpenMetrics) and whether gzip is accepted; the name[] filter is ours (_NameFilter), and
        # so is the writing of our families (exporter/exposition/family.py: the same bytes)
        params = parse_qs(query)
        encoder, ctype = exposition.choose_encoder(self.headers.get("Accept"))
        registry = self.app.registry
        names = params.pop("name[]", None)
        if names:
            registry = _NameFilter(registry, names)
        zipped = exposition.gzip_accepted(self.headers.get("Accept-Encoding"))
        try:
            parts = chunks(registry, encoder)  # prometheus_client's bytes, our families from their rows
            if zipped:  # a family at a time: the whole text is never held (a node's is ~80 MB)
                z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: the gzip format
                body = b"".join([z.compress(p) for p in parts] + [z.flush()])
            else:
                body = b"".join(parts)
        except Exception:
            self.stats.error("collect")
            log.exception("collecting metrics failed")
            self._send(500, b"collecting metrics failed\n")
            return
        self._send(200, body, ctype, [("Content-Encoding", "gzip")] if zipped else [])

    def _landing(self) -> bytes:
        rows = []
        for s in self.app.sources():
            cells = "".join(
                f"<td>{html.escape('' if s.get(k) is None else str(s.get(k)))}</td>"
                for k in ("source", "path", "engine", "state", "offset", "lag_bytes", "open_files")
            )
            rows.append(f"<tr>{cells}</tr>")
        ok, reasons = self.app.ready()
        metrics = html.escape(self.app.telemetry_path, quote=True)
        return (
            "<!DOCTYPE html><html><head><title>hybrid-cache-exporter</title></head><body>"
            "<h1>hybrid-cache-exporter</h1>"
            f"<p>Version: {html.escape(self.app.version)}</p>"
            f'<p><a href="{metrics}">Metrics</a> &middot; <a href="/healthz">healthz</a> &middot; <a href="/readyz">readyz</a></p>'
            f"<p>Ready: {'yes' if ok else 'no: ' + html.escape('; '.join(reasons))}</p>"
            "<table border=1 cellpadding=4><tr><th>source</th><th>path</th><th>engine</th><th>state</th>"
            "<th>offset</th><th>lag (bytes)</th><th>open files</th></tr>" + "".join(rows) + "</table></body></html>\n"
        ).encode()


def make_server(listen: str, app: App) -> Server:
    """One listener. Raises ValueError for a bad address, OSError when it cannot bind."""
    bind = resolve_listen(listen)
    stats = connections.Stats()
    handler = type("BoundHandler", (Handler,), {"app": app, "stats": stats})

    def tls() -> tuple[ssl.SSLContext | None, list[str]]:
        cfg = app.web.get()  # reloads the web config (certificates) when its files changed
        return cfg.ssl_context, cfg.allowed_sans

    return Server(bind.family, (bind.host, bind.port), handler.answer, tls, dual_stack=bind.dual_stack, stats=stats)


def make_servers(listens: list[str], app: App) -> list[Server]:
    """A listener per address (``--web.listen-address`` is repeatable); all or none."""
    servers: list[Server] = []
    try:
        for a in listens:
            servers.append(make_server(a, app))
    except BaseException:
        for s in servers:
            s.server_close()
        raise
    return servers


def url_of(server: Server, tls: bool) -> str:
    host, port = server.server_address[:2]
    if server.family == socket.AF_INET6:
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}"
