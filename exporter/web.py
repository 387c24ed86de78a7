"""HTTP side of ``serve``: /metrics, /healthz, /readyz, the landing page, and the Prometheus
exporter-toolkit web configuration (``--web.config.file``: TLS, mTLS, basic auth).

Supported web-config keys (exporter-toolkit format, https://github.com/prometheus/exporter-toolkit
docs/web-configuration.md):

* ``tls_server_config``: ``cert_file``, ``key_file``, ``client_auth_type`` (``NoClientCert``,
  ``VerifyClientCertIfGiven``, ``RequireAndVerifyClientCert``), ``client_ca_file``,
  ``client_allowed_sans``, ``min_version`` / ``max_version`` (``TLS10``..``TLS13``),
  ``prefer_server_cipher_suites`` (accepted, no effect).
* ``http_server_config``: ``headers`` (added to every response), ``http2`` (accepted; HTTP/1.1 is served).
* ``basic_auth_users``: user -> bcrypt hash. Outcomes are cached in memory (keyed by a SHA-256 of
  the credentials) so frequent scrapes do not pay bcrypt each time; unknown users cost the same
  bcrypt as known ones, and bcrypt runs in a small pool (``WebConfig.check_auth``).

Anything else (unknown keys, ``cipher_suites``, ``curve_preferences``, inline ``cert``/``key``,
``rate_limit``, ``RequestClientCert``/``RequireAnyClientCert``) is rejected at start with a clear
message rather than silently ignored.

Reloading (certificate rotation): like the exporter-toolkit, which re-reads the configuration for
every TLS handshake, each new connection looks at the web-config file and the files it names
(cert, key, client CA) and re-reads them all when one changed (mtime, size or inode). A change that
does not load (a cert swapped before its key, a YAML typo) is logged once and the configuration in
force stays; it is retried on the next connection. Whether TLS is on is fixed at start: a reload
that would switch it is refused (restart for that).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import bcrypt
import yaml
from prometheus_client import exposition
from prometheus_client.metrics_core import Metric

from . import DEFAULT_PORT

log = logging.getLogger("hybrid_cache_exporter.web")


TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
TLS_KEYS = {
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "prefer_server_cipher_suites",
}
UNSUPPORTED_TLS_KEYS = {"cipher_suites", "curve_preferences", "cert", "key", "client_ca"}
HTTP_KEYS = {"headers", "http2"}


class WebConfigError(Exception):
    pass


@dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    allowed_sans: list[str] = field(default_factory=list)
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # the config file and the files it names: a change to any reloads
    _ok: dict[bytes, bool] = field(default_factory=dict)  # SHA-256 of credentials -> outcome
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check_auth(self, header: str | None) -> bool:
        """True if basic auth is off or the Authorization header carries valid credentials.

        No side channel and no starvation (docs/reading.md, "Basic auth"): a user that is not
        configured is checked against a dummy hash of the configured users' bcrypt cost, so both
        take the same time; bcrypt runs in a small pool (``BCRYPT_POOL``), a request waits at most
        ``AUTH_WAIT`` seconds for it and at most ``AUTH_QUEUE`` requests wait (more are refused at
        once), so a flood of bad credentials cannot take every core from the scrapes. Results are
        cached by a SHA-256 of the credentials, successes and failures alike, so Prometheus's
        repeated scrape and a repeated wrong password cost no bcrypt after the first time."""
        if not self.users:
            return True
        if not header or not header.lower().startswith("basic "):
            return False
        try:
            user, _, pw = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        key = hashlib.sha256(f"{len(user)}:{user}:{pw}".encode()).digest()
        with self._lock:
            known = self._ok.get(key)
            if known is not None:
                return known
        dummy = self.dummy_hash()  # every check fetches it: the first one costs the same for all users
        h = self.users.get(user)
        target = h if h is not None else dummy
        ok = _bcrypt_check(pw.encode("utf-8"), target)
        if ok is None:  # the pool stayed busy: refused, not cached
            return False
        ok = ok and h is not None
        with self._lock:
            if len(self._ok) >= AUTH_CACHE:
                self._ok.clear()
            self._ok[key] = ok
        return ok

    def dummy_hash(self) -> bytes:
        """A bcrypt hash (of nothing anyone knows) with the cost most configured users have."""
        costs = [_cost(h) for h in self.users.values()]
        cost = max(set(costs), key=lambda c: (costs.count(c), c)) if costs else 10
        return _dummy_hash(cost)


# bcrypt work of basic auth: a few checks at once, whatever the number of connections
BCRYPT_POOL = threading.BoundedSemaphore(max(1, min(4, (os.cpu_count() or 2) // 2)))
AUTH_WAIT = 10.0  # seconds a request waits for a bcrypt slot before it is refused
AUTH_QUEUE = 64  # requests that may wait for a slot; further ones are refused at once
AUTH_CACHE = 4096  # cached outcomes per config (cleared when full)
_waiting = 0
_waiting_lock = threading.Lock()
_DUMMIES: dict[int, bytes] = {}


def _cost(h: bytes) -> int:
    """The cost of a ``$2b$12$...`` hash."""
    try:
        return int(h[4:6])
    except ValueError:
        return 10


def _dummy_hash(cost: int) -> bytes:
    d = _DUMMIES.get(cost)
    if d is None:
        d = _DUMMIES[cost] = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(max(4, min(cost, 31))))
    return d


def _bcrypt_check(pw: bytes, h: bytes) -> bool | None:
    """``bcrypt.checkpw`` in the pool; None when no slot came free in time (or too many wait)."""
    global _waiting
    with _waiting_lock:
        if _waiting >= AUTH_QUEUE:
            return None
        _waiting += 1
    try:
        got = BCRYPT_POOL.acquire(timeout=AUTH_WAIT)
    finally:
        with _waiting_lock:
            _waiting -= 1
    if not got:
        return None
    try:
        return bcrypt.checkpw(pw, h)
    except ValueError:
        return False
    finally:
        BCRYPT_POOL.release()


def load_web_config(path: str | None) -> WebConfig:
    """Parse and validate a web-config file; raise :class:`WebConfigError` with a clear message."""
    cfg = WebConfig()
    if not path:
        return cfg
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise WebConfigError(f"cannot read web config {path}: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise WebConfigError(f"web config {path} is not valid YAML: {e}") from e
    cfg.files = (path,)
    if doc is None:
        return cfg
    if not isinstance(doc, dict):
        raise WebConfigError(f"web config {path}: expected a mapping at the top level")
    for k in doc:
        if k == "rate_limit":
            raise WebConfigError(f"web config {path}: rate_limit is not supported by this exporter")
        if k not in ("tls_server_config", "http_server_config", "basic_auth_users"):
            raise WebConfigError(f"web config {path}: unknown key {k!r}")
    tls = doc.get("tls_server_config")
    if tls is not None:
        cfg.ssl_context, cfg.allowed_sans = _tls(path, tls)
        if isinstance(tls, dict):
            cfg.files += tuple(str(tls[k]) for k in ("cert_file", "key_file", "client_ca_file") if tls.get(k))
    httpc = doc.get("http_server_config")
    if httpc is not None:
        if not isinstance(httpc, dict):
            raise WebConfigError(f"web config {path}: http_server_config must be a mapping")
        for k in httpc:
            if k not in HTTP_KEYS:
                raise WebConfigError(f"web config {path}: unknown key http_server_config.{k}")
        hdrs = httpc.get("headers") or {}
        if not isinstance(hdrs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in hdrs.items()):
            raise WebConfigError(f"web config {path}: http_server_config.headers must map names to strings")
        cfg.headers = dict(hdrs)
    users = doc.get("basic_auth_users")
    if users is not None:
        if not isinstance(users, dict):
            raise WebConfigError(f"web config {path}: basic_auth_users must map user names to bcrypt hashes")
        for u, h in users.items():
            if not isinstance(u, str) or not u or ":" in u:
                raise WebConfigError(f"web config {path}: invalid basic auth user name {u!r}")
            if not isinstance(h, str) or not h.startswith(("$2a$", "$2b$", "$2y$")):
                raise WebConfigError(f"web config {path}: the password of {u!r} must be a bcrypt hash ($2a$/$2b$/$2y$)")
            hb = h.encode()
            try:
                bcrypt.checkpw(b"", hb)
            except ValueError as e:
                raise WebConfigError(f"web config {path}: the bcrypt hash of {u!r} is invalid") from e
            cfg.users[u] = hb
    return cfg


def _tls(path: str, tls: object) -> tuple[ssl.SSLContext | None, list[str]]:
    if not isinstance(tls, dict):
        raise WebConfigError(f"web config {path}: tls_server_config must be a mapping")
    for k in tls:
        if k in UNSUPPORTED_TLS_KEYS:
            raise WebConfigError(f"web config {path}: tls_server_config.{k} is not supported by this exporter")
        if k not in TLS_KEYS:
            raise WebConfigError(f"web config {path}: unknown key tls_server_config.{k}")
    cert, key = tls.get("cert_file"), tls.get("key_file")
    if not cert and not key:
        if tls.get("client_ca_file") or tls.get("client_auth_type") not in (None, "NoClientCert"):
            raise WebConfigError(f"web config {path}: client certificates need cert_file and key_file")
        return None, []
    if not cert or not key:
        raise WebConfigError(f"web config {path}: tls_server_config needs both cert_file and key_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise WebConfigError(f"web config {path}: cannot load cert_file {cert} / key_file {key}: {e}") from e
    minv = tls.get("min_version", "TLS12")
    maxv = tls.get("max_version")
    for name, v in (("min_version", minv), ("max_version", maxv)):
        if v is not None and v not in TLS_VERSIONS:
            raise WebConfigError(f"web config {path}: tls_server_config.{name} must be one of {', '.join(TLS_VERSIONS)}")
    try:
        ctx.minimum_version = TLS_VERSIONS[minv]
        if maxv:
            ctx.maximum_version = TLS_VERSIONS[maxv]
    except (ValueError, ssl.SSLError) as e:
        raise WebConfigError(f"web config {path}: TLS version not available: {e}") from e
    auth = tls.get("client_auth_type", "NoClientCert")
    if auth in ("RequestClientCert", "RequireAnyClientCert"):
        raise WebConfigError(f"web config {path}: client_auth_type {auth} is not supported; use RequireAndVerifyClientCert")
    if auth not in CLIENT_AUTH:
        raise WebConfigError(f"web config {path}: unknown client_auth_type {auth!r}")
    ca = tls.get("client_ca_file")
    if auth != "NoClientCert":
        if not ca:
            raise WebConfigError(f"web config {path}: client_auth_type {auth} needs client_ca_file")
        try:
            ctx.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as e:
            raise WebConfigError(f"web config {path}: cannot load client_ca_file {ca}: {e}") from e
    elif ca:
        raise WebConfigError(f"web config {path}: client_ca_file is set but client_auth_type is NoClientCert")
    ctx.verify_mode = CLIENT_AUTH[auth]
    sans = tls.get("client_allowed_sans") or []
    if not isinstance(sans, list) or not all(isinstance(s, str) for s in sans):
        raise WebConfigError(f"web config {path}: client_allowed_sans must be a list of strings")
    if sans and auth != "RequireAndVerifyClientCert":
        raise WebConfigError(f"web config {path}: client_allowed_sans needs client_auth_type RequireAndVerifyClientCert")
    return ctx, sans


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class ReloadingWebConfig:
    """The web configuration in force, re-read when its files change (looked at per connection)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.current = load_web_config(path)  # WebConfigError at start: the caller exits 2
        self.reloads = 0
        self.failures = 0
        self._stamps = self._stamp_of(self.current)
        self._failed: tuple | None = None
        self._lock = threading.Lock()

    @property
    def failing(self) -> bool:
        """True while the files on disk hold a change that did not load."""
        return self._failed is not None

    def _stamp_of(self, cfg: WebConfig) -> tuple:
        return tuple(_stamp(f) for f in cfg.files)

    def get(self) -> WebConfig:
        """The configuration for a new connection (reloaded first if a file changed)."""
        cfg = self.current
        if not self.path:
            return cfg
        stamps = self._stamp_of(cfg)
        if stamps == self._stamps or stamps == self._failed:
            return cfg
        with self._lock:
            if self.current is not cfg:  # another connection reloaded meanwhile
                return self.current
            try:
                new = load_web_config(self.path)
                if (new.ssl_context is None) != (cfg.ssl_context is None):
                    raise WebConfigError(f"web config {self.path}: TLS cannot be switched on or off by a reload; restart the exporter")
            except WebConfigError as e:
                self._failed = stamps
                self.failures += 1
                log.error("web config not reloaded, the previous one stays in force: %s", e)
                return cfg
            # stamps of the files the new config names (a new cert path, say), taken after reading them
            self._stamps = self._stamp_of(new)
            self._failed = None
            self.current = new
            self.reloads += 1
            log.info("web config %s reloaded (files changed)", self.path)
            return new


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
    ``alive()`` -> False when a worker thread died (/healthz then fails: the orchestrator restarts us)."""

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
    ):
        self.alive = alive
        self.registry = registry
        self.ready = ready
        self.sources = sources
        self.web = config if isinstance(config, ReloadingWebConfig) else _Fixed(config)
        self.telemetry_path = telemetry_path
        self.version = version
        self.status = status  # status.StatusPages: `/`, /status.json, /static/* (None: the plain landing page)

    @property
    def config(self) -> WebConfig:
        return self.web.current


class _Fixed:
    def __init__(self, cfg: WebConfig) -> None:
        self.current = cfg

    def get(self) -> WebConfig:
        return self.current


def check_telemetry_path(path: str) -> str:
    if not path.startswith("/") or path in ("/", "/healthz", "/readyz") or "?" in path or "#" in path:
        raise ValueError(f"bad telemetry path {path!r}: it starts with / and is not /, /healthz or /readyz")
    return path


class Handler(BaseHTTPRequestHandler):
    server_version = "hybrid-cache-exporter"
    protocol_version = "HTTP/1.1"
    app: App  # set on the subclass made by make_server

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
        self._send(405, b"method not allowed\n", headers=[("Allow", "GET, HEAD")])

    def do_GET(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        path = url.path
        if path not in ("/healthz", "/readyz") and not self.config.check_auth(self.headers.get("Authorization")):
            self._send(401, b"unauthorized\n", headers=[("WWW-Authenticate", 'Basic realm="hybrid-cache-exporter"')])
            return
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
        # OpenMetrics) and whether gzip is accepted; the name[] filter is ours (_NameFilter)
        params = parse_qs(query)
        encoder, ctype = exposition.choose_encoder(self.headers.get("Accept"))
        registry = self.app.registry
        names = params.pop("name[]", None)
        if names:
            registry = _NameFilter(registry, names)
        try:
            body = encoder(registry)
        except Exception:
            log.exception("collecting metrics failed")
            self._send(500, b"collecting metrics failed\n")
            return
        extra = []
        if exposition.gzip_accepted(self.headers.get("Accept-Encoding")):
            body = gzip.compress(body)
            extra.append(("Content-Encoding", "gzip"))
        self._send(200, body, ctype, extra)

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


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    app: App
    bind: BindAddress

    def server_bind(self) -> None:
        if self.bind.family == socket.AF_INET6:
            # dual stack for :PORT / [::]:PORT, IPv6 only for a specific v6 address (whatever the sysctl says)
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if self.bind.dual_stack else 1)
        super().server_bind()

    def get_request(self):
        sock, addr = super().get_request()
        cfg = self.app.web.get()  # reloads the web config (certificates) when its files changed
        if cfg.ssl_context is not None:
            sock = cfg.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def finish_request(self, request, client_address) -> None:
        request.settimeout(30)
        cfg = self.app.config
        if isinstance(request, ssl.SSLSocket):
            try:
                request.do_handshake()
            except (OSError, ssl.SSLError) as e:
                log.debug("TLS handshake with %s failed: %s", client_address, e)
                return
            if cfg.allowed_sans and not _san_allowed(request.getpeercert(), cfg.allowed_sans):
                log.info("client certificate of %s has no allowed SAN; connection closed", client_address)
                return
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address) -> None:
        log.debug("error serving %s", client_address, exc_info=True)


def _san_allowed(cert: dict | None, allowed: list[str]) -> bool:
    if not cert:
        return False
    return any(v in allowed for _, v in cert.get("subjectAltName", ()))


def make_server(listen: str, app: App) -> Server:
    """One listener. Raises ValueError for a bad address, OSError when it cannot bind."""
    bind = resolve_listen(listen)
    handler = type("BoundHandler", (Handler,), {"app": app})
    cls = type("BoundServer", (Server,), {"address_family": bind.family, "app": app, "bind": bind})
    return cls((bind.host, bind.port), handler)


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
    if server.bind.family == socket.AF_INET6:
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}"
