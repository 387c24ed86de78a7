"""The connections of the HTTP side: one event loop per listener, on ``selectors`` (epoll; never
``select()``, whose descriptor numbers stop at 1,023: past 1,024 open descriptors it raised on
every connection and the exporter answered nothing), accepts, performs TLS handshakes, reads each
request's head and writes each answer without blocking. A bounded pool of workers only answers
complete request heads. So a client that is slow or silent holds a descriptor and a few kilobytes,
never a worker: a scrape is answered whatever other connections do (docs/reliability.md).

Limits, each counted when it drops a connection (``dropped``, a self-metric):

* ``HEAD_TIMEOUT``: a new connection has that long for its TLS handshake and first request head,
  a kept one that long for a head once its first byte came; ``IDLE_TIMEOUT`` between two requests
  (not counted: an idle kept connection is closed as any server closes it); ``WRITE_TIMEOUT`` to
  read an answer.
* connections per client address (``MAX_PER_ADDRESS``) and in all (``connection_cap``: a
  sixteenth of the descriptor limit, the share the tailers leave for HTTP, at least 64): a new
  connection past either takes the place of the oldest one that has not sent a whole request,
  of its own address or of the address with the most, never of a request being answered.

Errors of the server itself (``accept`` failing, an answer that raised) are logged and counted
in ``errors``; the loop goes on.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import queue
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("hybrid_cache_exporter.web")

LISTEN_BACKLOG = 1024  # the kernel caps it at net.core.somaxconn: a burst of connects waits there
MAX_WORKERS = 32  # threads answering complete requests, per listener
HEAD_TIMEOUT = 10.0  # seconds for a request head (a new connection: handshake included)
IDLE_TIMEOUT = 60.0  # seconds a kept connection may wait for its next request
WRITE_TIMEOUT = 30.0  # seconds a client may take to read an answer
MAX_HEAD = 256 << 10  # a request head longer than this is answered as it is (refused) and closed
MAX_PER_ADDRESS = 256  # open connections of one client address
MIN_CONNECTIONS = 64
SWEEP = 0.25  # seconds between two looks at the deadlines
ACCEPT_PAUSE = 0.1  # seconds accepting waits after the process ran out of descriptors

# a connection's states; only HANDSHAKE and HEAD may be dropped for a newcomer
HANDSHAKE, HEAD, BUSY, WRITE = "handshake", "head", "busy", "write"
ERROR_CAUSES = ("accept", "answer", "collect", "loop")  # errors of the server itself (collect: /metrics answered 500)
DROP_REASONS = ("timeout", "tls", "limit")  # connections the server closed before answering them


def connection_cap() -> int:
    """Open connections in all: a sixteenth of the descriptor limit in force (the share
    exporter/sources/descriptors.py leaves beside the tailed files), at least ``MIN_CONNECTIONS``."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        soft = 1 << 20 if soft == resource.RLIM_INFINITY else soft
    except (ImportError, OSError, ValueError):  # pragma: no cover - no resource limits
        soft = 1024
    return max(MIN_CONNECTIONS, soft // 16)


def head_end(buf: bytes | bytearray, seen: int = 0, nl: int = -1) -> tuple[int, int]:
    """(where the head of the request at the start of ``buf`` ends: after its blank line, after
    the request line of an HTTP/0.9 one, which has no headers; -1 while it is incomplete, where
    its request line ends or -1). ``seen`` and ``nl``: an earlier call's look at the first
    ``seen`` bytes, so a head that comes a byte at a time is scanned once, not once per byte."""
    if nl < 0:
        nl = buf.find(b"\n", seen)
        if nl < 0:
            return -1, -1
        if len(buf[:nl].split()) == 2:  # 'GET /': HTTP/0.9, no headers follow
            return nl + 1, nl
        seen = nl
    lo = max(nl, seen - 2)  # an end that began before was looked for already
    ends = [k + len(sep) for sep in (b"\n\r\n", b"\n\n") if (k := buf.find(sep, lo)) >= 0]
    return (min(ends) if ends else -1), nl


class Stats:
    """What the HTTP side counts (the self-metrics read it): its own errors by cause, the
    connections it dropped by reason, and the connections open now."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.errors = dict.fromkeys(ERROR_CAUSES, 0)
        self.dropped = dict.fromkeys(DROP_REASONS, 0)
        self.open = 0

    def error(self, cause: str) -> None:
        with self.lock:
            self.errors[cause] += 1

    def drop(self, reason: str) -> None:
        with self.lock:
            self.dropped[reason] += 1


class Conn:
    """One client connection, owned by the loop (a worker only reads ``addr`` and ``sock``)."""

    __slots__ = ("sock", "addr", "key", "state", "buf", "seen", "nl", "out", "close", "eof", "deadline", "served", "events", "sans", "seq")

    def __init__(self, sock, addr, seq: int, sans: list[str]) -> None:
        self.sock = sock
        self.addr = addr
        self.key = addr[0] if isinstance(addr, tuple) and addr else str(addr)
        self.state = HANDSHAKE if isinstance(sock, ssl.SSLSocket) else HEAD
        self.buf = bytearray()
        self.seen, self.nl = 0, -1  # how much of buf was looked at for the end of a head (head_end)
        self.out: memoryview | None = None
        self.close = False  # close once the answer is written
        self.eof = False  # the client closed its side
        self.deadline = time.monotonic() + HEAD_TIMEOUT
        self.served = 0
        self.events = 0
        self.sans = sans
        self.seq = seq


Answer = Callable[[bytes, Any], "tuple[bytes, bool]"]


class Server:
    """One listener: ``serve_forever`` runs its loop; ``answer(head, client_address)`` (in a
    worker) returns (the bytes of the answer, whether to close the connection after it);
    ``tls()`` gives a new connection's (SSL context or None, allowed client SANs)."""

    def __init__(
        self, family: int, address: tuple, answer: Answer, tls: Callable[[], tuple], dual_stack: bool = False, stats: Stats | None = None
    ) -> None:
        self.family = family
        self.answer = answer
        self.tls = tls
        self.stats = stats or Stats()
        self.max_workers = MAX_WORKERS
        self.per_address = MAX_PER_ADDRESS
        self.cap = connection_cap()
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                # dual stack for :PORT / [::]:PORT, IPv6 only for a specific v6 address (whatever the sysctl says)
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual_stack else 1)
            self.socket.bind(address)
            self.socket.listen(LISTEN_BACKLOG)
            self.socket.setblocking(False)
        except BaseException:
            self.socket.close()
            raise
        self.server_address = self.socket.getsockname()
        self._sel: selectors.BaseSelector | None = None
        self._conns: dict[int, Conn] = {}  # by seq
        self._by_addr: dict[str, collections.OrderedDict[int, Conn]] = {}
        self._seq = 0
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._done: collections.deque = collections.deque()
        self._workers: list[threading.Thread] = []
        self._busy = 0
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._closed = False
        self._accepting_after = 0.0  # accepting paused until then (out of descriptors)
        self._last_accept_log = 0.0

    # -- the loop ------------------------------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        with self._lock:  # a shutdown before the loop began: it does not begin
            if self._stop.is_set():
                return
            self._stopped.clear()
        self.cap = connection_cap()  # the limit in force now (serve raised it to the hard one at start)
        self._sel = sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        sel.register(self.socket, selectors.EVENT_READ, self)
        listening = True
        next_sweep = time.monotonic() + SWEEP
        try:
            while not self._stop.is_set():
                try:
                    # no connection, no deadline: the loop sleeps until the listener or the wake-up pipe
                    timeout = max(0.0, min(poll_interval, next_sweep - time.monotonic())) if self._conns or not listening else None
                    for key, mask in sel.select(timeout):
                        if key.data is None:
                            self._drain_wake()
                        elif key.data is self:
                            self._accept()
                        else:
                            self._ready(key.data, mask)
                    self._finish_answers()
                    now = time.monotonic()
                    if now >= next_sweep:
                        next_sweep = now + SWEEP
                        self._sweep(now)
                    paused = now < self._accepting_after
                    if paused == listening:  # out of descriptors: the listener rests a moment
                        listening = not paused
                        if paused:
                            sel.unregister(self.socket)
                        else:
                            sel.register(self.socket, selectors.EVENT_READ, self)
                except Exception:  # a bug: logged and counted, the loop goes on
                    self.stats.error("loop")
                    log.exception("HTTP loop error")
                    time.sleep(0.01)
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop the loop (from another thread) and wait for it."""
        with self._lock:
            self._stop.set()
        self._wake()
        self._stopped.wait()

    def server_close(self) -> None:
        if self._closed:
            return
        self.shutdown()  # the loop, if it runs, ends first: nothing below is its to use any more
        self._closed = True
        self.socket.close()
        for c in list(self._conns.values()):
            self._close(c)
        for _ in self._workers:
            self._jobs.put(None)
        if self._sel is not None:
            self._sel.close()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # a wake-up is already pending (or the server is closed)
            os.write(self._wake_w, b"\0")

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self._wake_r, 4096):
                pass

    # -- connections come and go ---------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(64):  # a burst at a time; the rest at the next turn
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as e:
                self.stats.error("accept")
                now = time.monotonic()
                if now - self._last_accept_log >= 10.0:
                    self._last_accept_log = now
                    log.warning("accepting an HTTP connection failed: %s (%d open connections)", e, len(self._conns))
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._accepting_after = now + ACCEPT_PAUSE  # else the listener wakes the loop at once, forever
                return
            self._admit(sock, addr)

    def _admit(self, sock: socket.socket, addr) -> None:
        sock.setblocking(False)
        key = addr[0] if isinstance(addr, tuple) and addr else str(addr)
        mine = self._by_addr.get(key)
        if mine is not None and len(mine) >= self.per_address:
            room = self._evict(key)
        elif len(self._conns) >= self.cap:
            room = self._evict(max(self._by_addr, key=lambda k: len(self._by_addr[k])))
        else:
            room = True
        if not room:  # every connection of that address is being answered: the newcomer goes
            self.stats.drop("limit")
            sock.close()
            return
        try:
            ctx, sans = self.tls()
            if ctx is not None:
                sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (OSError, ValueError) as e:
            log.debug("TLS for %s failed: %s", addr, e)
            self.stats.drop("tls")
            sock.close()
            return
        self._seq += 1
        c = Conn(sock, addr, self._seq, sans)
        self._conns[c.seq] = c
        self._by_addr.setdefault(c.key, collections.OrderedDict())[c.seq] = c
        with self.stats.lock:
            self.stats.open = len(self._conns)
        if c.state == HANDSHAKE:
            self._handshake(c)
        else:
            self._want(c, selectors.EVENT_READ)

    def _evict(self, key: str) -> bool:
        """Drop the oldest connection of address ``key`` that has not sent a whole request, else
        its oldest idle kept one; False when there is none (all are being answered)."""
        pool = self._by_addr.get(key) or {}
        waiting = [c for c in pool.values() if c.state in (HANDSHAKE, HEAD)]  # oldest first
        victim = next((c for c in waiting if not c.served), None) or next(iter(waiting), None)
        if victim is None:
            return False
        self.stats.drop("limit")
        self._close(victim)
        return True

    def _close(self, c: Conn) -> None:
        if self._conns.pop(c.seq, None) is None:
            return
        pool = self._by_addr.get(c.key)
        if pool is not None:
            pool.pop(c.seq, None)
            if not pool:
                del self._by_addr[c.key]
        self._want(c, 0)
        with contextlib.suppress(OSError, ValueError):
            c.sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError, ValueError):
            c.sock.close()
        with self.stats.lock:
            self.stats.open = len(self._conns)

    def _want(self, c: Conn, events: int) -> None:
        """Watch ``c`` for ``events`` (0: not at all)."""
        if events == c.events or self._sel is None:
            return
        try:
            if c.events == 0:
                self._sel.register(c.sock, events, c)
            elif events == 0:
                self._sel.unregister(c.sock)
            else:
                self._sel.modify(c.sock, events, c)
        except (KeyError, ValueError, OSError):  # closed under us
            pass
        c.events = events

    def _sweep(self, now: float) -> None:
        for c in [c for c in self._conns.values() if c.state != BUSY and now >= c.deadline]:
            if not (c.state == HEAD and c.served and not c.buf):  # an idle kept connection: no drop
                self.stats.drop("timeout")
            self._close(c)

    # -- reading, handshakes, writing ----------------------------------------------------------

    def _ready(self, c: Conn, mask: int) -> None:
        if c.seq not in self._conns:
            return
        try:
            if c.state == HANDSHAKE:
                self._handshake(c)
            elif c.state == HEAD:
                self._read(c)
            elif c.state == WRITE:
                self._write(c)
        except Exception:  # a bug: logged and counted, this connection closed, the others go on
            self.stats.error("loop")
            log.exception("HTTP connection %s failed", c.addr)
            self._close(c)

    def _handshake(self, c: Conn) -> None:
        try:
            c.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._want(c, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._want(c, selectors.EVENT_WRITE)
            return
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            log.debug("TLS handshake with %s failed: %s", c.addr, e)
            self.stats.drop("tls")
            self._close(c)
            return
        if c.sans and not _san_allowed(c.sock.getpeercert(), c.sans):
            log.info("client certificate of %s has no allowed SAN; connection closed", c.addr)
            self.stats.drop("tls")
            self._close(c)
            return
        c.state = HEAD
        self._want(c, selectors.EVENT_READ)
        self._read(c)  # the request may have come with the handshake (buffered by TLS, not the socket)

    def _read(self, c: Conn) -> None:
        end = self._end(c)
        while end < 0 and len(c.buf) <= MAX_HEAD:
            try:
                data = c.sock.recv(65536)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except (OSError, ValueError):
                self._close(c)
                return
            if not data:
                c.eof = True
                break
            if not c.buf:  # the first byte of a request: its head is due within HEAD_TIMEOUT
                c.deadline = min(c.deadline, time.monotonic() + HEAD_TIMEOUT)
            c.buf += data
            end = self._end(c)
        self._next(c, end)

    @staticmethod
    def _end(c: Conn) -> int:
        end, c.nl = head_end(c.buf, c.seen, c.nl)
        c.seen = len(c.buf)
        return end

    def _next(self, c: Conn, end: int) -> None:
        """Hand the head that ends at ``end`` to a worker, or wait for more (or close)."""
        if end < 0 and (len(c.buf) > MAX_HEAD or (c.eof and c.buf)):
            end, c.eof = len(c.buf), True  # answered as it is (refused, or what a half-closed client sent)
        if end < 0:
            if c.eof:
                self._close(c)
            return
        head = bytes(c.buf[:end])
        del c.buf[:end]
        c.seen, c.nl = 0, -1
        c.state = BUSY
        self._want(c, 0)
        with self._lock:
            self._busy += 1
            if self._busy > len(self._workers) and len(self._workers) < self.max_workers:
                t = threading.Thread(target=self._work, name="http-worker", daemon=True)
                self._workers.append(t)
                t.start()
        self._jobs.put((c, head))

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            c, head = item
            try:
                out, close = self.answer(head, c.addr)
            except Exception:
                self.stats.error("answer")
                log.exception("answering %s failed", c.addr)
                out, close = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", True
            with self._lock:
                self._busy -= 1
            self._done.append((c, out, close))
            self._wake()

    def _finish_answers(self) -> None:
        while self._done:
            c, out, close = self._done.popleft()
            if c.seq not in self._conns:
                continue
            c.out = memoryview(out)
            c.close = close or c.eof
            c.served += 1
            c.state = WRITE
            c.deadline = time.monotonic() + WRITE_TIMEOUT
            self._write(c)

    def _write(self, c: Conn) -> None:
        out = c.out
        while out:
            chunk = out[: 1 << 18]
            try:
                n = c.sock.send(chunk)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
                self._want(c, selectors.EVENT_WRITE)
                c.out = out
                return
            except ssl.SSLWantReadError:
                self._want(c, selectors.EVENT_READ)
                c.out = out
                return
            except (OSError, ValueError):
                self._close(c)
                return
            out = out[n:]
        c.out = None
        if c.close:
            self._close(c)
            return
        c.state = HEAD
        c.deadline = time.monotonic() + IDLE_TIMEOUT
        if c.buf:  # a pipelined request: its head is due as any other
            c.deadline = min(c.deadline, time.monotonic() + HEAD_TIMEOUT)
        self._want(c, selectors.EVENT_READ)
        self._read(c)  # what is buffered already (pipelined, or held by TLS)


def _san_allowed(cert: dict | None, allowed: list[str]) -> bool:
    if not cert:
        return False
    return any(v in allowed for _, v in cert.get("subjectAltName", ()))
