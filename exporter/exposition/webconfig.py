"""The Prometheus exporter-toolkit web configuration (``--web.config.file``): TLS, mTLS, basic
auth, and its reload when its files change. The HTTP server that applies it is exporter.exposition.web.

Supported web-config keys (exporter-toolkit format, https://github.com/prometheus/exporter-toolkit
docs/web-configuration.md):

* ``tls_server_config``: ``cert_file``, ``key_file``, ``client_auth_type`` (``NoClientCert``,
  ``VerifyClientCertIfGiven``, ``RequireAndVerifyClientCert``), ``client_ca_file``,
  ``client_allowed_sans``, ``min_version`` / ``max_version`` (``TLS10``..``TLS13``),
  ``prefer_server_cipher_suites`` (accepted, no effect).
* ``http_server_config``: ``headers`` (added to every response), ``http2`` (accepted; HTTP/1.1 is served).
* ``basic_auth_users``: user -> bcrypt hash. Outcomes are cached in memory (keyed by a SHA-256 of
  the credentials; a verified one is never forgotten for a failure) so frequent scrapes do not pay
  bcrypt each time; unknown users cost the same bcrypt as known ones, and bcrypt runs in a small
  pool that serves the addresses with the fewest failures first (``WebConfig.check_auth``).

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
import bisect
import collections
import hashlib
import logging
import os
import ssl
import threading
import time
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
    _auth: AuthCache = field(default_factory=lambda: AuthCache())

    def check_auth(self, header: str | None, client: str | None = None) -> bool | None:
        """True if basic auth is off or the Authorization header carries valid credentials; False
        if they are wrong; None if they could not be checked now (bcrypt busy: answered 503).

        No side channel and no lock-out (docs/reading.md, "Basic auth"; docs/reliability.md): a
        user that is not configured is checked against a dummy hash of the configured users'
        bcrypt cost, so both take the same time. A credential that was verified is remembered for
        as long as the configuration holds its user (:class:`AuthCache`): it is never checked
        again, whatever else arrives. bcrypt runs in a small pool (``BCRYPT_GATE``) that hands its
        slots to the waiting request whose client address has the fewest recent failures, so a
        flood of wrong passwords from some addresses waits behind a scraper from another; at
        most ``AUTH_QUEUE`` wait, a newcomer with fewer failures takes the place of the one with
        the most, and a request waits at most ``AUTH_WAIT`` seconds. A credential answered 503
        unchecked goes first when it comes again (a scraper's next scrape; a flood of distinct
        passwords never repeats one)."""
        if not self.users:
            return True
        if not header or not header.lower().startswith("basic "):
            return False
        try:
            user, _, pw = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        key = hashlib.sha256(f"{len(user)}:{user}:{pw}".encode()).digest()
        known = self._auth.get(key)
        if known is not None:
            return known
        addr = client or ""
        first, done = self._auth.begin(key)
        if not first:  # the same credentials are being checked (Prometheus replicas at once): their outcome
            done.wait(AUTH_WAIT)
            return self._auth.get(key)
        try:
            dummy = self.dummy_hash()  # every check fetches it: the first one costs the same for all users
            h = self.users.get(user)
            target = h if h is not None else dummy
            ok = _bcrypt_check(pw.encode("utf-8"), target, self._auth.priority(key, addr))
            if ok is None:  # no slot in time: not checked; its retry goes first
                self._auth.defer(key)
                return None
            ok = ok and h is not None
            self._auth.put(key, ok, user, addr)
            return ok
        finally:
            self._auth.end(key)

    def dummy_hash(self) -> bytes:
        """A bcrypt hash (of nothing anyone knows) with the cost most configured users have."""
        costs = [_cost(h) for h in self.users.values()]
        cost = max(set(costs), key=lambda c: (costs.count(c), c)) if costs else 10
        return _dummy_hash(cost)

    def adopt(self, old: WebConfig) -> None:
        """A reload with the same users keeps what was verified (certificate rotation, SIGHUP)."""
        if old.users == self.users:
            self._auth = old._auth


class AuthCache:
    """Outcomes of basic-auth checks, by a SHA-256 of the credentials.

    Verified credentials (``good``) are kept apart from failures and are never dropped to make room
    for one: a flood of distinct wrong passwords cannot evict the scraper's (before: the whole
    cache was wiped at 4,096 entries, and the next check of the good password found the queue
    full: 401). Good entries are bounded per user (``GOOD_PER_USER``: bcrypt 4 accepts any suffix
    after 72 bytes, so one password can have many spellings), failures by ``AUTH_CACHE`` (the
    oldest go first). ``failures(addr)`` is the recent failure count of a client address (halved
    every ``FAIL_HALF_LIFE`` seconds; a success clears it) and ``deferred`` the credentials answered
    503 without a check: both give the bcrypt pool its order (``priority``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.good: dict[bytes, str] = {}  # key -> user
        self.bad: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self.by_addr: collections.OrderedDict[str, tuple[float, float]] = collections.OrderedDict()
        self.checking: dict[bytes, threading.Event] = {}  # credentials in bcrypt now
        self.deferred: collections.OrderedDict[bytes, None] = collections.OrderedDict()  # answered 503 unchecked

    def begin(self, key: bytes) -> tuple[bool, threading.Event]:
        """(whether this caller checks ``key``, the event set when the check ends)."""
        with self._lock:
            ev = self.checking.get(key)
            if ev is not None:
                return False, ev
            ev = self.checking[key] = threading.Event()
            return True, ev

    def end(self, key: bytes) -> None:
        with self._lock:
            ev = self.checking.pop(key, None)
        if ev is not None:
            ev.set()

    def get(self, key: bytes) -> bool | None:
        with self._lock:
            if key in self.good:
                return True
            if key in self.bad:
                self.bad.move_to_end(key)
                return False
        return None

    def put(self, key: bytes, ok: bool, user: str, addr: str) -> None:
        with self._lock:
            self.deferred.pop(key, None)
            if ok:
                mine = [k for k, u in self.good.items() if u == user]
                if len(mine) >= GOOD_PER_USER:
                    del self.good[mine[0]]
                self.good[key] = user
                self.by_addr.pop(addr, None)
                return
            self.bad[key] = None
            self.bad.move_to_end(key)
            while len(self.bad) > AUTH_CACHE:
                self.bad.popitem(last=False)
            score = self._score(addr, time.monotonic()) + 1.0
            self.by_addr[addr] = (score, time.monotonic())
            self.by_addr.move_to_end(addr)
            while len(self.by_addr) > AUTH_ADDRESSES:
                self.by_addr.popitem(last=False)

    def priority(self, key: bytes, addr: str) -> tuple[int, float]:
        """The bcrypt pool's order (lowest first): credentials retried after a 503 (a flood of
        distinct passwords never repeats one; a scraper does, at its next scrape), then the recent
        failures of the client address."""
        with self._lock:
            return (0 if key in self.deferred else 1, self._score(addr, time.monotonic()))

    def defer(self, key: bytes) -> None:
        with self._lock:
            self.deferred[key] = None
            self.deferred.move_to_end(key)
            while len(self.deferred) > AUTH_CACHE:
                self.deferred.popitem(last=False)

    def _score(self, addr: str, now: float) -> float:
        v = self.by_addr.get(addr)
        if v is None:
            return 0.0
        return v[0] * 0.5 ** ((now - v[1]) / FAIL_HALF_LIFE)


# bcrypt work of basic auth: a few checks at once, whatever the number of connections
BCRYPT_SLOTS = max(1, min(4, (os.cpu_count() or 2) // 2))
AUTH_WAIT = 10.0  # seconds a request waits for a bcrypt slot before it is answered 503
AUTH_QUEUE = 16 * BCRYPT_SLOTS  # requests that may wait for a slot (more are answered 503 at once, freeing their worker)
AUTH_CACHE = 4096  # failed credentials remembered per config (oldest forgotten first)
GOOD_PER_USER = 16  # verified credentials remembered per user (never forgotten for a failure)
AUTH_ADDRESSES = 4096  # client addresses whose recent failures are counted
FAIL_HALF_LIFE = 60.0  # seconds
_DUMMIES: dict[int, bytes] = {}


class _Ticket:
    __slots__ = ("prio", "seq", "granted", "refused", "event")

    def __init__(self, prio, seq: int) -> None:
        self.prio, self.seq = prio, seq
        self.granted = self.refused = False
        self.event = threading.Event()

    def __lt__(self, other: _Ticket) -> bool:
        return (self.prio, self.seq) < (other.prio, other.seq)


class BcryptGate:
    """The bcrypt slots, handed to the waiting request with the lowest priority value (the
    fewest recent failures of its client address; first come first served among equals). A slot
    freed goes straight to the first in line (no herd of waiters woken to race for it)."""

    def __init__(self, slots: int, queue: int = AUTH_QUEUE) -> None:
        self.lock = threading.Lock()
        self.free = slots
        self.queue = queue
        self.waiting: list[_Ticket] = []  # sorted
        self._seq = 0

    def acquire(self, prio, timeout: float) -> bool:
        with self.lock:
            if self.free > 0 and not self.waiting:
                self.free -= 1
                return True
            if len(self.waiting) >= self.queue:
                worst = self.waiting[-1]
                if not prio < worst.prio:
                    return False  # the queue is full of requests placed before this one
                self.waiting.pop()  # a newcomer with fewer failures takes its place
                worst.refused = True
                worst.event.set()
            self._seq += 1
            t = _Ticket(prio, self._seq)
            bisect.insort(self.waiting, t)
        t.event.wait(timeout)
        with self.lock:
            if t.granted:
                return True
            if t in self.waiting:  # timed out
                self.waiting.remove(t)
            return False

    def release(self) -> None:
        with self.lock:
            if self.waiting:
                t = self.waiting.pop(0)
                t.granted = True
                t.event.set()
            else:
                self.free += 1


BCRYPT_GATE = BcryptGate(BCRYPT_SLOTS)


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


def _bcrypt_check(pw: bytes, h: bytes, prio=(1, 0.0)) -> bool | None:
    """``bcrypt.checkpw`` in the pool; None when no slot came free in time (or the queue was full
    of requests placed before this one)."""
    gate = BCRYPT_GATE
    if not gate.acquire(prio, AUTH_WAIT):
        return None
    try:
        return bcrypt.checkpw(pw, h)
    except ValueError:
        return False
    finally:
        gate.release()


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
            new.adopt(cfg)
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
