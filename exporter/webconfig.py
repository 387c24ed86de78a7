"""The Prometheus exporter-toolkit web configuration (``--web.config.file``): TLS, mTLS, basic
auth, and its reload when its files change. The HTTP server that applies it is exporter.web.

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
import hashlib
import logging
import os
import ssl
import threading
from dataclasses import dataclass, field

import bcrypt
import yaml

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

    def reload(self) -> WebConfig:
        """Re-read the files now, changed or not (SIGHUP)."""
        with self._lock:
            self._stamps, self._failed = (), None
        return self.get("on SIGHUP")

    def get(self, why: str = "files changed") -> WebConfig:
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
            log.info("web config %s reloaded (%s)", self.path, why)
            return new


class FixedWebConfig:
    """A web configuration that is never reloaded (tests, embedders): the ``get()`` of
    :class:`ReloadingWebConfig` without the files."""

    def __init__(self, cfg: WebConfig) -> None:
        self.current = cfg

    def get(self) -> WebConfig:
        return self.current
