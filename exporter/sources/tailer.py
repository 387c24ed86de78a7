"""File tailing: rotation, truncation and restarts handled by identity, not by timing.

One manager thread owns every tailed file. It sleeps on a condition variable that inotify events
(watchdog) or the poll timer wake, and then works only on what changed: a directory is listed
(once per cycle, names and inode numbers only) when an entry in it was created, moved or deleted;
a file is looked at when it was written. A safety sweep looks at everything every few seconds
(inotify queues can overflow). Reading goes into a bounded read-ahead buffer (reading is far faster
than parsing, so bytes are captured before a rotation or truncation can take them away); parsing
then takes that buffer in slices.

**Generations.** Each content a path has held is a :class:`Gen`, known by the inode it was read
from and by its first bytes (up to ``FP_LEN``), with the number of bytes of it already read
(``consumed``). A copy of a content (logrotate ``copy``/``copytruncate``, a ``.gz`` made later)
starts with the same bytes, so it is recognised as that generation wherever it turns up, and only
what lies beyond ``consumed`` is ever read from it:

* rename rotation (``create``, Docker, kubelet): the path's inode changes; the old descriptor is
  drained and kept ("retired") for ``rotate_wait`` seconds for late writes; the new file is read
  from 0;
* truncation (``copytruncate``, ``: > file``, a rewrite): the bytes written before the truncation
  but not read yet are taken from the copy (a sibling with the same first bytes), the copy is
  remembered as read, and the path is read again from 0;
* a sibling that appears with a rotated-looking name (``x.log.1``, ``x.log-20260814``,
  ``0.log.20260814-081730``, ``.gz``) is opened, verified to be the inode the listing showed, and
  either continues a known generation (read past ``consumed``), or is a copy of the file being read
  (remembered, read only if that file is truncated), or is a generation that came and went between
  two looks (read from 0). Files present when the exporter started are not ours to read.

**Restarts** (``--positions``): every remembered generation is saved with its offset. At start the
saved ones are looked for by inode, then by first bytes among the siblings (plain or compressed),
and read past their offsets; siblings that continue nothing known and are none of those looked at
before the stop (saved as inode + mtime) are generations that came and went while the exporter was
down and are read from 0, oldest first.

**Descriptors.** The soft ``RLIMIT_NOFILE`` is raised to the hard limit; beyond a budget (the limit
minus a reserve for HTTP and the positions file) the idlest files are closed and reopened by
identity when they are written again.
"""

from __future__ import annotations

import bisect
import bz2
import collections
import contextlib
import errno
import fnmatch
import glob
import gzip
import hashlib
import logging
import lzma
import os
import re
import stat
import struct
import threading
import time
import zlib

from ..lines import DEFAULT_MAX_LINE
from ..pipeline import Pipeline
from ..reading import Reader, source_name
from .positions import FP_MAX, Positions

log = logging.getLogger("hybrid_cache_exporter.tailer")

FP_LEN = FP_MAX  # bytes of a generation's start that identify it
CHUNK = 1 << 20  # one read() call
PARSE_SLICE = 256 << 10  # bytes parsed per file before the loop looks at the files again
READAHEAD = 16 << 20  # bytes read ahead of the parser, per file
GEN_HISTORY = 16  # finished generations remembered per path (their copies are recognised)
COPIES_PER_GEN = 8
MAX_SEEN = 1024  # siblings remembered as looked at, per path
SWEEP_INTERVAL = 5.0  # inotify mode: look at every file this often anyway
PENDING_GIVE_UP = 120.0  # seconds a compressed sibling may stay unreadable (still being written)
FD_RESERVE = 64  # descriptors kept free for HTTP probes, the positions file, listings
GLOB_CHARS = re.compile(r"[*?\[]")
COMPRESSED = re.compile(r"\.(gz|bz2|xz|zst|lz4|zip)$")
OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
COARSE_CLOCK_NS = 20_000_000  # file timestamps come from the kernel's coarse clock (one tick behind)
ROTATED_SUFFIX = re.compile(r"^[.-](\d+|\d{4}-?\d\d-?\d\d\S*)(\.(gz|bz2|xz|zst|lz4))?$|^\.(gz|bz2|xz|zst|lz4)$")
# logrotate ``extension .log``: the number or date goes before the extension (x.1.log, x-20260814.log)
ROTATED_INNER = re.compile(r"^(?:\.\d+|-\d{8,}(?:[-_]?\d+)*)(\.[^.]+)(\.(?:gz|bz2|xz|zst|lz4))?$")


def rotation_parents(name: str) -> list[str]:
    """The names ``name`` is a rotated generation of (``x.log.1``, ``x.log-20260814.gz`` ->
    ``x.log``; ``x.1.log``, ``x-20260814.log.gz`` -> ``x.log``)."""
    out = []
    for i in range(1, len(name)):
        if name[i] in ".-":
            rest = name[i:]
            if ROTATED_SUFFIX.match(rest):
                out.append(name[:i])
            m = ROTATED_INNER.match(rest)
            if m:
                out.append(name[:i] + m.group(1))
    return out


WAITING = "waiting"
OPEN = "open"
ERROR = "error"


def _open(path: str) -> int:
    return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))


def _sha(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def raise_nofile_limit() -> int:
    """Raise the soft descriptor limit to the hard one; return the soft limit now in force."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        if soft != resource.RLIM_INFINITY and soft < target:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))  # the hard limit stays as it was
                soft = target
        return int(soft if soft != resource.RLIM_INFINITY else 1 << 20)
    except Exception:  # pragma: no cover - platform without resource limits
        return 1024


class Gen:
    """One content a path has held: where it was read from, its first bytes, how much was read.

    ``head`` (the bytes) is known for generations read by this process; generations loaded from
    the positions file carry only the SHA-1 and length of theirs. ``reader`` is the open reader
    while there is one (its descriptor is then the authority; copies are only remembered)."""

    __slots__ = ("head", "fp", "fp_len", "consumed", "dev", "ino", "reader", "copies")

    def __init__(self, head: bytes | None = b"", consumed: int = 0, dev: int = 0, ino: int = 0, fp: str = "", fp_len: int = 0):
        self.head = head
        self.fp = fp
        self.fp_len = fp_len
        self.consumed = consumed
        self.dev = dev
        self.ino = ino
        self.reader: FileReader | None = None
        self.copies: list[tuple[str, int]] = []  # (path, inode) of copies seen while it was read

    def ident(self) -> tuple[str, int]:
        if self.head is not None:
            return _sha(self.head), len(self.head)
        return self.fp, self.fp_len

    def matches(self, cand: bytes) -> bool:
        """Whether content starting with ``cand`` (up to FP_LEN bytes) is this generation."""
        if self.head is not None:
            n = len(self.head)
            return n > 0 and len(cand) >= n and cand[:n] == self.head
        return self.fp_len > 0 and len(cand) >= self.fp_len and _sha(cand[: self.fp_len]) == self.fp

    def entry(self) -> dict:
        fp, fp_len = self.ident()
        r = self.reader
        off = r.committed() if r is not None else self.consumed
        e = {"dev": self.dev, "ino": self.ino, "fp": fp, "fp_len": fp_len, "offset": off}
        if r is None:
            e["done"] = True
        return e


class FileReader:
    """One open generation of a file: descriptor, read-ahead buffer, reader (exporter.reading)."""

    def __init__(self, tailer: Tailer, fd: int, offset: int, name: str, gen: Gen | None = None) -> None:
        self.tailer = tailer
        self.fd = fd
        self.name = name  # where it was opened from (for logs)
        self.retired = False  # only the file at the path can be truncated under us and restarted
        st = os.fstat(fd)
        self.dev, self.ino = st.st_dev, st.st_ino
        self.size = st.st_size
        self.mtime_ns = st.st_mtime_ns
        self.read_pos = offset
        self.buf: collections.deque[bytes] = collections.deque()
        self.buf_len = 0
        self.reader = Reader(tailer.max_line)
        head = os.pread(fd, min(FP_LEN, offset), 0) if offset > 0 else b""
        if gen is None:
            gen = Gen(head, offset)
            tailer.remember(gen)
        else:
            gen.head = head
            gen.consumed = offset
        gen.dev, gen.ino, gen.reader = self.dev, self.ino, self
        self.gen = gen
        self.last_data = time.monotonic()
        self._checked = (self.size, self.mtime_ns)
        if offset > 0:
            # the container format is the file's, detected from its first line
            self.reader.detect_from(os.pread(fd, 65536, 0))

    # offsets -------------------------------------------------------------------------------
    def committed(self) -> int:
        """Offset just after the last complete line handed to the pipeline."""
        return max(0, self.read_pos - self.buf_len - self.reader.pending)

    def lag(self) -> int:
        return max(0, self.size - self.committed())

    @property
    def head(self) -> bytes:
        return self.gen.head or b""

    # reading -------------------------------------------------------------------------------
    def _changed(self, st: os.stat_result) -> str | None:
        """Why the content read so far is no longer the file's content (or None)."""
        if st.st_size < self.read_pos:
            return "truncated"
        head = self.head
        if head and os.pread(self.fd, len(head), 0) != head:
            return "rewritten (first bytes changed)"
        return None

    def fill(self) -> bool:
        """Read what is available (up to the read-ahead limit). Returns True if the file was
        truncated or rewritten (reading restarted at 0)."""
        if self.fd < 0:
            return False
        t = self.tailer
        st = os.fstat(self.fd)
        key = (st.st_size, st.st_mtime_ns)
        if key == self._checked and self.read_pos >= st.st_size:
            return False  # nothing new (the common case of a sweep)
        if key != self._checked:
            why = self._changed(st)
            if why:
                self._restart(why)
                return True
        start_pos, start_chunks, got = self.read_pos, len(self.buf), 0
        gen = self.gen
        while self.buf_len < READAHEAD:
            try:
                chunk = os.pread(self.fd, CHUNK, self.read_pos)
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EINTR):
                    break
                raise
            if not chunk:
                break
            if self.read_pos < FP_LEN and len(gen.head or b"") == self.read_pos:
                gen.head = (gen.head or b"") + chunk[: FP_LEN - self.read_pos]
            got += len(chunk)
            self.buf.append(chunk)
            self.buf_len += len(chunk)
            self.read_pos += len(chunk)
        st = os.fstat(self.fd)
        self.size = st.st_size
        key = (st.st_size, st.st_mtime_ns)
        if key != self._checked or got:
            why = self._changed(st)
            if why:
                # changed while we read: what this read returned may be new content; the old
                # content's rest comes from a copy (copytruncate) or the new content is read from 0
                while len(self.buf) > start_chunks:
                    self.buf_len -= len(self.buf.pop())
                self.read_pos = start_pos
                if start_pos < FP_LEN:
                    gen.head = (gen.head or b"")[:start_pos]
                self._restart(why)
                return True
            self._checked = key
            self.mtime_ns = st.st_mtime_ns
        gen.consumed = self.read_pos
        if got:
            t.read_bytes += got
            self.last_data = time.monotonic()
        return False

    def _restart(self, why: str) -> None:
        """The content at this inode was replaced: finish the old generation from its copies,
        start a new generation at 0 (a held partial line is kept: after copytruncate the writer
        finishes it in the new content)."""
        t = self.tailer
        t.truncations += 1
        log.info("%s: %s at offset %d; reading again from the start", self.name, why, self.read_pos)
        self.parse(None)  # what was read before the truncation belongs to the old content
        old = self.gen
        old.consumed = self.read_pos
        old.reader = None
        if not self.retired:
            t.finish_from_copies(old, self)
        new = Gen(b"", 0, self.dev, self.ino)
        new.reader = self
        t.remember(new)
        self.gen = new
        self.read_pos = 0
        self._checked = (-1, -1)

    def read_extra(self, data_iter) -> int:
        """Feed bytes of this generation that come from elsewhere (a copy), continuing the held
        partial line. Returns the number of bytes fed."""
        n = 0
        for chunk in data_iter:
            n += len(chunk)
            self._emit(self.reader.feed(chunk))
        self.tailer.read_bytes += n
        return n

    def parse(self, limit: int | None) -> bool:
        """Parse up to ``limit`` buffered bytes (None = all). Returns True if bytes remain."""
        done = 0
        while self.buf and (limit is None or done < limit):
            chunk = self.buf.popleft()
            if limit is not None and len(chunk) > limit - done:
                cut = limit - done
                # cut at a newline when there is one, to keep slices cheap
                nl = chunk.rfind(b"\n", 0, cut)
                if nl >= 0:
                    cut = nl + 1
                self.buf.appendleft(chunk[cut:])
                chunk = chunk[:cut]
            self.buf_len -= len(chunk)
            done += len(chunk)
            self._emit(self.reader.feed(chunk))
        return bool(self.buf)

    def _emit(self, lines: list[str]) -> None:
        if lines:
            self.tailer.pipe.feed_lines(self.tailer.source, lines)

    def flush(self) -> None:
        """End of this content: flush a final unterminated line."""
        self._emit(self.reader.flush())

    def finish(self) -> None:
        """End of a retired file: parse the rest and flush a final unterminated line."""
        self.parse(None)
        self.flush()
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
            self.tailer.mgr_fds(-1)
        if self.gen.reader is self:
            self.gen.consumed = self.read_pos
            self.gen.reader = None

    # descriptor budget ---------------------------------------------------------------------
    @property
    def parked(self) -> bool:
        return self.fd < 0

    def park(self) -> None:
        """Close the descriptor of an idle file (buffers and partial lines are kept)."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
            self.tailer.mgr_fds(-1)

    def unpark(self, path: str) -> bool:
        """Reopen by identity: the same inode with the same first bytes, else False."""
        try:
            fd = _open(path)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            head = self.head
            if (st.st_dev, st.st_ino) != (self.dev, self.ino) or (head and os.pread(fd, len(head), 0) != head):
                os.close(fd)
                return False
        except OSError:
            os.close(fd)
            return False
        self.fd = fd
        self.tailer.mgr_fds(+1)
        self._checked = (-1, -1)
        return True

    @property
    def overlong(self) -> int:
        return self.reader.overlong


class Tailer:
    """One path: the file currently there plus rotated generations still being drained."""

    def __init__(
        self,
        path: str,
        source: str,
        pipe: Pipeline,
        *,
        start_at_end: bool,
        saved: list[dict] | None = None,
        saved_at_ns: int = 0,
        saved_seen: list[list[int]] | None = None,
        rotate_wait: float = 5.0,
        max_line: int = DEFAULT_MAX_LINE,
        engine: str | None = None,
        manager: Manager | None = None,
    ) -> None:
        self.path = path
        self.real = os.path.realpath(path)
        self.source = source
        self.pipe = pipe
        self.engine = engine
        self.manager = manager
        self.start_at_end = start_at_end
        self.saved = saved
        self.saved_at_ns = saved_at_ns
        self.saved_seen = saved_seen  # None: positions from before "seen" was saved (fall back on the save time)
        self.rotate_wait = rotate_wait
        self.max_line = max_line
        self.active: FileReader | None = None
        self.retired: list[FileReader] = []
        self.state = WAITING
        self.error: str | None = None
        self.read_bytes = 0
        self.rotations = 0
        self.truncations = 0
        self.errors = 0  # unexpected errors in this source's reading (logged, retried)
        self._overlong_closed = 0
        self.had_file = False
        self.first = True
        self.gens: list[Gen] = []  # finished generations, oldest first (bounded)
        # inode -> (the generation it holds, None = not ours, False = looked at before a restart;
        # its mtime when looked at)
        self.accounted: dict[int, tuple[Gen | None | bool, int]] = {}
        self.pending: dict[str, tuple[int, float]] = {}  # sibling name -> (inode, first seen): retry
        self._next_retry = 0.0
        self.dirty_pending = False
        self.dirty = True
        self.had_saved = False
        self.resume_offset: int | None = None
        self.resume_gen: Gen | None = None
        self.mtime: float | None = None
        self._logged: str | None = None
        self._renamed = False  # the path changed inode since siblings were last looked at

    # metrics -------------------------------------------------------------------------------
    @property
    def overlong(self) -> int:
        n = self._overlong_closed
        if self.active is not None:
            n += self.active.overlong
        return n + sum(r.overlong for r in self.retired)

    def open_files(self) -> int:
        return sum(1 for r in self.readers() if r.fd >= 0)

    def lag(self) -> int:
        return sum(r.lag() for r in self.readers())

    def readers(self) -> list[FileReader]:
        return self.retired + ([self.active] if self.active is not None else [])

    def offset(self) -> int | None:
        a = self.active
        return a.committed() if a is not None else None

    def entries(self) -> list[dict]:
        """Positions entries: remembered generations, oldest first, then the open ones."""
        open_gens = [r.gen for r in self.readers()]
        done = [g for g in self.gens if g.reader is None and g.consumed > 0 and g.ident()[1] > 0 and g not in open_gens]
        return [g.entry() for g in done[-GEN_HISTORY:]] + [g.entry() for g in open_gens]

    def mgr_fds(self, delta: int) -> None:
        if self.manager is not None:
            self.manager.open_fds += delta

    def _note(self, key: str, level: int, msg: str, *args) -> None:
        """Log a state once (not on every poll)."""
        if self._logged != key:
            self._logged = key
            log.log(level, msg, *args)

    # generations ---------------------------------------------------------------------------
    def remember(self, gen: Gen) -> None:
        self.gens.append(gen)
        if len(self.gens) > GEN_HISTORY * 2:
            keep = [g for g in self.gens if g.reader is not None]
            rest = [g for g in self.gens if g.reader is None][-GEN_HISTORY:]
            self.gens = [g for g in self.gens if g in keep or g in rest]

    def _gen_of(self, head: bytes) -> Gen | None:
        """The known generation content starting with ``head`` belongs to (longest match wins)."""
        best = None
        for g in reversed(self.gens):
            if g.matches(head) and (best is None or g.ident()[1] > best.ident()[1]):
                best = g
        a = self.active
        if best is None and a is not None and a.fd >= 0 and len(a.head) < FP_LEN:
            # a copy of content at the path that we have not read (all of) the start of yet
            try:
                now = os.pread(a.fd, FP_LEN, 0)
            except OSError:
                return None
            n = min(len(now), len(head))
            if n > 0 and now[:n] == head[:n] and (not a.head or now.startswith(a.head)):
                return a.gen
        return best

    # the cycle -----------------------------------------------------------------------------
    def check(self) -> None:
        """Look at the path: open the file, notice rotation / deletion."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        except OSError as e:
            st = None
            self._set_error(f"cannot stat: {e.strerror or e}")
        a = self.active
        if a is not None and (st is None or (st.st_dev, st.st_ino) != (a.dev, a.ino)):
            # rename+create rotation or deletion: drain the old descriptor, keep it for late writes
            a.retired = True
            self._renamed = True
            if a.parked and not self._find_parked(a):
                log.warning("%s: rotated while its descriptor was closed (budget) and gone; bytes after %d lost", self.path, a.read_pos)
                a.close()
            else:
                self._drain(a)
                self.retired.append(a)
            self.active = None
            log.info("%s: %s; draining the old file for %.0fs", self.path, "deleted" if st is None else "rotated", self.rotate_wait)
            real = os.path.realpath(self.path)
            if real != self.real and self.manager is not None:
                self.manager.rehome(self, real)
        elif (
            a is not None
            and a.parked
            and st is not None
            and (st.st_size != a.size or st.st_mtime_ns != a.mtime_ns or a.read_pos < st.st_size)
        ):
            # written again (or not read to its end): reopen it, if it is still the same inode and first bytes
            if self.manager is not None:
                self.manager.make_room()
            a.unpark(self.path)
        if self.saved is not None:
            self._apply_saved(st)
        if self.active is None and st is not None:
            if stat.S_ISDIR(st.st_mode):
                self._set_error("is a directory")
                return
            self._open()
        elif self.active is None and st is None and self.error is None:
            self.start_at_end = False  # it appears after we started: all of it is new
            self.state = WAITING
            self._note(WAITING, logging.INFO, "%s: does not exist (yet); waiting for it", self.path)

    def _find_parked(self, r: FileReader) -> bool:
        """A parked reader whose file was renamed away: reopen it where it is now, by inode."""
        d = self.manager.dir_of(self) if self.manager is not None else None
        if d is None:
            return False
        return any(ino == r.ino and r.unpark(os.path.join(d.path, name)) for name, ino in d.refresh_all().items())

    def _set_error(self, msg: str) -> None:
        self.state = ERROR
        self.error = msg
        self._note("error:" + msg, logging.ERROR, "%s: %s", self.path, msg)

    def _drain(self, r: FileReader) -> None:
        """Read what the old descriptor holds now; later writes are read while it is retired."""
        try:
            r.fill()
        except OSError as e:
            log.warning("%s: read error: %s", r.name, e)
        r.parse(None)

    def _open(self) -> None:
        if self.manager is not None:
            self.manager.make_room()
        try:
            fd = _open(self.path)
        except FileNotFoundError:
            return
        except OSError as e:
            self._set_error(f"cannot open: {e.strerror or e}")
            return
        self.mgr_fds(+1)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                self.mgr_fds(-1)
                self._set_error("not a regular file")
                return
            offset, gen = self._start_offset(fd, st)
            r = FileReader(self, fd, offset, self.path, gen)
        except OSError as e:
            os.close(fd)
            self.mgr_fds(-1)
            self._set_error(f"cannot read: {e.strerror or e}")
            return
        if self.had_file and not self.first:
            self.rotations += 1
        self.first = False
        self.had_file = True
        self.active = r
        self.state = OPEN
        self.error = None
        if self.manager is not None:  # its directory may have appeared only now
            self.manager._watch(os.path.dirname(self.path))
            self.manager._watch(os.path.dirname(self.real))
        self.mtime = st.st_mtime
        self._note(OPEN, logging.INFO, "%s: reading from offset %d (source=%s)", self.path, offset, self.source)

    def _start_offset(self, fd: int, st: os.stat_result) -> tuple[int, Gen | None]:
        if not self.first:
            return 0, None  # a file that appeared after we started: all of it is new
        if self.resume_offset is not None:
            off, self.resume_offset = self.resume_offset, None
            gen, self.resume_gen = self.resume_gen, None
            if gen is not None and (gen.dev, gen.ino) != (st.st_dev, st.st_ino):
                gen = None
            return min(off, st.st_size), gen
        if self.had_saved:
            return 0, None  # created after the generations recorded in the positions file
        if self.start_at_end:
            return self._tail_start(fd, st.st_size), None
        return 0, None

    @staticmethod
    def _tail_start(fd: int, size: int) -> int:
        """End of file, backed up to the start of an unfinished last line."""
        if size == 0:
            return 0
        back = min(size, DEFAULT_MAX_LINE)
        tail = os.pread(fd, back, size - back)
        nl = tail.rfind(b"\n")
        if nl < 0:
            return size - back if back == size else size
        return size - back + nl + 1

    # siblings: copies, compressed copies, generations we have not seen -----------------------
    def siblings(self) -> dict[str, int]:
        """Rotated-looking siblings of the file (name -> inode), from the directory's listing."""
        d = self.manager.dir_of(self) if self.manager is not None else None
        if d is None:
            return {}
        base = os.path.basename(self.real)
        names = d.names or {}
        stem = os.path.splitext(base)[0] or base
        return {n: names[n] for n in d.with_prefix(stem) if n != base and base in rotation_parents(n)}

    def _dir(self) -> str:
        return os.path.dirname(self.real)

    def candidate(self, name: str, ino: int) -> None:
        """A sibling with a rotated-looking name appeared (or changed inode): look at it later this
        cycle, after the file at the path was read (so a copy of it is recognised as one)."""
        self.pending[name] = (ino, time.monotonic())
        self.dirty = True
        self.dirty_pending = True

    def consider_pending(self) -> None:
        if not self.pending or (not self.dirty_pending and time.monotonic() < self._next_retry):
            return
        self.dirty_pending = False
        self._next_retry = time.monotonic() + 0.5  # files still being written: look again soon, not in a loop
        items = sorted(self.pending.items(), key=lambda kv: self._mtime(kv[0]))
        for name, (ino, since) in items:
            self.pending.pop(name, None)
            done = self._consider(name, ino)
            if not done and time.monotonic() - since < PENDING_GIVE_UP:
                self.pending[name] = (ino, since)
        self._renamed = False

    def _mtime(self, name: str) -> int:
        try:
            return os.stat(os.path.join(self._dir(), name)).st_mtime_ns
        except OSError:
            return 0

    def _not_ours(self, name: str) -> None:
        """Remember a sibling present at start as not ours to read: by inode and modification time
        (a rename is still recognised, a reused inode is not) and, for an uncompressed one, by its
        first bytes too, so the copy logrotate compresses from it later is not taken for new."""
        p = os.path.join(self._dir(), name)
        try:
            fd = _open(p)
        except OSError:
            return
        try:
            st = os.fstat(fd)
            self.accounted[st.st_ino] = (None, st.st_mtime_ns)
            if not COMPRESSED.search(name):
                head = os.pread(fd, FP_LEN, 0)
                if head:
                    self.remember(Gen(head, st.st_size, st.st_dev, st.st_ino))
        except OSError:
            pass
        finally:
            os.close(fd)

    def seen_entries(self) -> list[list[int]]:
        """[inode, mtime] of the siblings looked at (for the positions file): after a restart a
        sibling that is none of these and continues no saved generation is new."""
        live = set(self.siblings().values())
        return [[i, a[1]] for i, a in self.accounted.items() if i in live][-MAX_SEEN:]

    def _consider(self, name: str, ino: int, resume_since: int | None = None) -> bool:
        """Look at one sibling; returns False to retry later (a compressed file still being
        written). ``resume_since``: at a restart, the save time (unknown content written after
        it is a generation we missed); else unknown content is a generation we missed only if it
        appeared while we ran (the caller only passes those)."""
        p = os.path.join(self._dir(), name)
        opener = OPENERS.get(os.path.splitext(name)[1])
        if COMPRESSED.search(name) and opener is None:
            return True  # a compression we cannot read (zstd, lz4, zip)
        try:
            fd = _open(p)
        except OSError:
            return True  # gone: the listing will show where it went
        try:
            st = os.fstat(fd)
            if st.st_ino != ino or not stat.S_ISREG(st.st_mode):
                return True  # not the file the listing showed (renamed again): a later listing shows it
            known = self.accounted.get(ino)
            seen = known is not None and known[1] == st.st_mtime_ns  # looked at before (renamed since)
            # (False: looked at before the restart; it may still hold the rest of a saved generation)
            if seen and (known[0] is None or known[0] is not False and (known[0].reader is not None or known[0].consumed >= st.st_size)):
                return True
            if opener is None:
                head = os.pread(fd, FP_LEN, 0)
                size = st.st_size
            else:
                head, size = _compressed_head(fd, opener)
                if head is None:
                    return False  # still being written
            g = self._gen_of(head) if head else None
            if g is not None:
                self.accounted[ino] = (g, st.st_mtime_ns)
                if g.reader is not None and g.reader is self.active:
                    if (p, ino) not in g.copies:
                        g.copies = (g.copies + [(p, ino)])[-COPIES_PER_GEN:]
                    return True  # a copy of what we are reading: read only if the file is truncated
                if g.reader is not None:
                    return True  # a rotated file still open: its descriptor has the content
                if size > g.consumed:
                    return self._continue(g, p, fd, opener, st)
                return True
            if not head or seen:
                return True  # empty (a change lists it again), or known not to be ours
            if resume_since is not None and st.st_mtime_ns < resume_since - COARSE_CLOCK_NS:
                self.accounted[ino] = (None, st.st_mtime_ns)  # older than the save: read before, or not ours
                return True
            # a generation that came and went between two looks: all of it is new. Counted as a
            # rotation if the path changed inode meanwhile, else it was a copy before a truncation
            if self._renamed:
                self.rotations += 1
            else:
                self.truncations += 1
            gen = Gen(b"", 0, st.st_dev, ino)
            self.remember(gen)
            self.accounted[ino] = (gen, st.st_mtime_ns)
            return self._continue(gen, p, fd, opener, st, why="rotated before it was seen")
        finally:
            os.close(fd)

    def _continue(self, g: Gen, p: str, fd: int, opener, st: os.stat_result, why: str = "continues a generation read before") -> bool:
        """Read generation ``g`` past ``g.consumed`` from the file ``p`` (descriptor ``fd``)."""
        if opener is None:
            nfd = os.dup(fd)
            self.mgr_fds(+1)
            try:
                r = FileReader(self, nfd, g.consumed, p, g)
            except OSError:
                os.close(nfd)
                self.mgr_fds(-1)
                return True
            r.retired = True
            log.info("%s: %s: reading %s from offset %d", self.path, why, p, g.consumed)
            self._drain(r)
            self.retired.append(r)
            return True
        log.info("%s: %s: reading %s (compressed) from offset %d", self.path, why, p, g.consumed)
        sink = _Sink(self)
        complete = True
        start = g.consumed
        if start > 0:
            with contextlib.suppress(EOFError, OSError, lzma.LZMAError, zlib.error), _zopen(fd, opener) as z:
                sink.reader.detect_from(z.read(65536))
        try:
            with _zopen(fd, opener) as z:
                for chunk in _skip_iter(z, start):
                    sink.feed(chunk)
        except (EOFError, OSError, lzma.LZMAError, zlib.error) as e:
            complete = False
            log.info("%s: %s is incomplete (%s); the rest is read when it is complete", self.path, p, e)
        fed = sink.finish(complete)
        self.read_bytes += fed
        g.consumed = start + fed
        if g.head == b"" and start == 0:
            g.head = sink.first[: min(FP_LEN, fed)]
        if not complete:
            self.accounted.pop(st.st_ino, None)
        return complete

    def finish_from_copies(self, g: Gen, r: FileReader) -> None:
        """After a truncation: the copy of the old content holds what was written but not read
        yet (copytruncate); read it into the same reader, remember every copy as read."""
        d = self.manager.dir_of(self) if self.manager is not None else None
        if d is not None:
            d.refresh()
        cands = [(os.path.join(self._dir(), n), i) for n, i in self.siblings().items()]
        for c in g.copies:
            if c not in cands:
                cands.append(c)
        best: tuple[int, str, int] | None = None
        for p, ino in cands:
            try:
                fd = _open(p)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if st.st_ino != ino:
                    continue
                opener = OPENERS.get(os.path.splitext(p)[1])
                if opener is None:
                    if COMPRESSED.search(p):
                        continue
                    head, size = os.pread(fd, FP_LEN, 0), st.st_size
                else:
                    head, size = _compressed_head(fd, opener)
                    if head is None:
                        continue
                if not g.matches(head):
                    continue
                self.accounted[ino] = (g, st.st_mtime_ns)
                self.pending.pop(os.path.basename(p), None)
                if size > g.consumed and (best is None or size > best[0]):
                    best = (size, p, ino)
            finally:
                os.close(fd)
        g.copies = []
        if best is None:
            return
        size, p, ino = best
        start = g.consumed
        try:
            fd = _open(p)
        except OSError:
            return
        try:
            if os.fstat(fd).st_ino != ino:
                return
            opener = OPENERS.get(os.path.splitext(p)[1])
            if opener is None:
                g.consumed += r.read_extra(_pread_iter(fd, start))
            else:
                with _zopen(fd, opener) as z:
                    g.consumed += r.read_extra(_skip_iter(z, start))
            log.info("%s: read %d unread bytes from the copy %s", self.path, g.consumed - start, p)
        except (EOFError, OSError, lzma.LZMAError, zlib.error) as e:
            log.warning("%s: cannot read the copy %s: %s", self.path, p, e)
        finally:
            os.close(fd)

    # restart --------------------------------------------------------------------------------
    def _apply_saved(self, st: os.stat_result | None) -> None:
        """Apply the saved generations: find each where it is now (by inode, then by its first
        bytes among the siblings, plain or compressed), read past its offset, then read the
        generations written since the save that continue nothing known, oldest first."""
        saved, self.saved = self.saved or [], None
        self.had_saved = bool(saved)
        if not saved:
            return
        gens = [Gen(None, e["offset"], e["dev"], e["ino"], e["fp"], e["fp_len"]) for e in saved]
        for g in gens:
            self.remember(g)
        live = [g for g, e in zip(gens, saved, strict=True) if not e.get("done")]
        fd = -1
        if st is not None and stat.S_ISREG(st.st_mode):
            try:
                fd = _open(self.path)
                st = os.fstat(fd)
            except OSError:
                fd = -1
        d = self.manager.dir_of(self) if self.manager is not None else None
        if d is not None:
            d.refresh()
        sibs = self.siblings()
        try:
            for g in live:
                if fd >= 0 and st is not None and (st.st_dev, st.st_ino) == (g.dev, g.ino):
                    if g.matches(os.pread(fd, FP_LEN, 0)) and st.st_size >= g.consumed:
                        self.resume_offset, self.resume_gen = g.consumed, g
                    else:
                        self.truncations += 1
                        log.info("%s: truncated or rewritten while the exporter was down; reading from the start", self.path)
                    continue  # else its rest is in a copy, if any: found below by its first bytes
                for name, ino in sibs.items():
                    if ino != g.ino:
                        continue
                    try:
                        sfd = _open(os.path.join(self._dir(), name))
                    except OSError:
                        break
                    try:
                        sst = os.fstat(sfd)
                        if (sst.st_dev, sst.st_ino) == (g.dev, g.ino) and g.matches(os.pread(sfd, FP_LEN, 0)):
                            self.rotations += 1
                            self.accounted[ino] = (g, sst.st_mtime_ns)
                            self._continue(g, os.path.join(self._dir(), name), sfd, None, sst, why="rotated while the exporter was down")
                    finally:
                        os.close(sfd)
                    break
            # every other sibling: a copy of a saved generation, one looked at before the stop, or
            # one written since (read from its start)
            for ino, mtime in self.saved_seen or []:
                self.accounted.setdefault(ino, (False, mtime))
            since = (self.saved_at_ns or 0) if self.saved_seen is None else None
            for name in sorted(sibs, key=self._mtime):
                a = self.accounted.get(sibs[name])
                if a is not None and isinstance(a[0], Gen):
                    continue  # opened above
                if not self._consider(name, sibs[name], resume_since=since):
                    self.pending[name] = (sibs[name], time.monotonic())
            for g in live:
                if g.reader is None and g is not self.resume_gen and not any(a[0] is g for a in self.accounted.values()):
                    log.warning(
                        "%s: the file read before the restart (inode %d) is gone; lines after offset %d in it are lost",
                        self.path,
                        g.ino,
                        g.consumed,
                    )
        finally:
            if fd >= 0:
                os.close(fd)

    # reading and parsing ---------------------------------------------------------------------
    def fill(self) -> None:
        for r in self.readers():
            try:
                r.fill()
            except OSError as e:
                log.warning("%s: read error: %s", r.name, e)
        a = self.active
        if a is not None:
            self.mtime = a.mtime_ns / 1e9

    def parse(self, limit: int) -> bool:
        more = False
        for r in self.retired:
            r.parse(None)
        a = self.active
        if a is not None:
            more = a.parse(limit)
        return more

    def busy(self) -> bool:
        a = self.active
        return bool(self.retired) or bool(self.pending) or (a is not None and (a.buf_len > 0 or (a.parked and a.read_pos < a.size)))

    def housekeeping(self, now: float) -> None:
        keep = []
        for r in self.retired:
            if now - r.last_data >= self.rotate_wait and r.buf_len == 0:
                self._overlong_closed += r.overlong
                r.finish()
                log.info("%s: closed the rotated file (inode %d)", self.path, r.ino)
            else:
                keep.append(r)
        self.retired = keep
        if len(self.accounted) > 4 * GEN_HISTORY + 64 and self.manager is not None:
            live = set(self.siblings().values())
            self.accounted = {i: a for i, a in self.accounted.items() if i in live}

    def close(self) -> None:
        for r in self.readers():
            r.close()
        self.retired = []
        self.active = None


class _Sink:
    """Feeds decompressed bytes of one generation through a reader into the pipeline, counting
    the bytes of complete lines (what ``consumed`` may advance by)."""

    def __init__(self, t: Tailer) -> None:
        self.t = t
        self.reader = Reader(t.max_line)
        self.fed = 0
        self.first = b""

    def feed(self, chunk: bytes) -> None:
        if len(self.first) < FP_LEN:
            self.first += chunk[: FP_LEN - len(self.first)]
        self.fed += len(chunk)
        lines = self.reader.feed(chunk)
        if lines:
            self.t.pipe.feed_lines(self.t.source, lines)

    def finish(self, complete: bool) -> int:
        """Bytes accounted for: all when the file was complete, else up to the last full line."""
        if not complete:
            return self.fed - self.reader.pending
        lines = self.reader.flush()
        if lines:
            self.t.pipe.feed_lines(self.t.source, lines)
        return self.fed


@contextlib.contextmanager
def _zopen(fd: int, opener):
    """A decompressing reader over a copy of ``fd`` (a dup shares the offset: rewound first)."""
    with os.fdopen(os.dup(fd), "rb") as f:
        f.seek(0)
        with opener(f) as z:
            yield z


def _compressed_head(fd: int, opener) -> tuple[bytes | None, int]:
    """First bytes and (for gzip, from its trailer) size of a compressed file; (None, 0) if it
    cannot be read yet."""
    try:
        with _zopen(fd, opener) as z:
            head = z.read(FP_LEN)
    except (EOFError, OSError, lzma.LZMAError, zlib.error):
        return None, 0
    size = 1 << 62
    if opener is gzip.open:
        try:
            st = os.fstat(fd)
            if st.st_size >= 18 and st.st_size < 1 << 32:
                size = struct.unpack("<I", os.pread(fd, 4, st.st_size - 4))[0]
        except OSError:
            pass
    return head, size


def _pread_iter(fd: int, pos: int):
    while True:
        chunk = os.pread(fd, CHUNK, pos)
        if not chunk:
            return
        pos += len(chunk)
        yield chunk


def _skip_iter(z, skip: int):
    while skip > 0:
        n = len(z.read(min(skip, CHUNK)))
        if n == 0:
            return
        skip -= n
    while True:
        chunk = z.read(CHUNK)
        if not chunk:
            return
        yield chunk


class DirState:
    """One directory: its last listing (name -> inode) and the tailers of the files in it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.names: dict[str, int] | None = None
        self.stamps: dict[str, int] = {}  # rotated-looking siblings -> mtime (see _list)
        self.sorted: list[str] = []  # the names, sorted: siblings of a file by prefix in O(log n)
        self.tailers: dict[str, Tailer] = {}  # basename (of the real path) -> tailer
        self.dirty = True

    def _list(self) -> tuple[dict[str, int], dict[str, int]]:
        """Names -> inode numbers (free from the directory), and for rotated-looking siblings of
        our files also -> modification time: a file replaced under the same name can get the
        inode number of one just deleted (ext4 reuses them at once), the time tells them apart."""
        names: dict[str, int] = {}
        stamps: dict[str, int] = {}
        try:
            with os.scandir(self.path) as it:
                for ent in it:
                    names[ent.name] = ent.inode()
                    if self.owner(ent.name) is not None:
                        try:
                            stamps[ent.name] = ent.stat(follow_symlinks=False).st_mtime_ns
                        except OSError:
                            stamps[ent.name] = 0
        except OSError:
            pass
        return names, stamps

    def refresh(self) -> dict[str, int]:
        """List the directory; hand each entry that is new since the last listing (name -> inode)
        to the tailer it concerns (its own path changed, or a rotated-looking sibling appeared)."""
        new, stamps = self._list()
        old, old_stamps = self.names, self.stamps
        self.names, self.stamps = new, stamps
        self.dirty = False
        if old is None or new.keys() != old.keys():
            self.sorted = sorted(new)
        if old is None:
            return {}
        diff = {n: i for n, i in new.items() if old.get(n) != i or stamps.get(n) != old_stamps.get(n)}
        for name, ino in diff.items():
            t = self.tailers.get(name)
            if t is not None:
                t.dirty = True
                continue
            owner = self.owner(name)
            if owner is not None:
                owner.candidate(name, ino)
        return diff

    def with_prefix(self, base: str) -> list[str]:
        i = bisect.bisect_left(self.sorted, base)
        out = []
        while i < len(self.sorted) and self.sorted[i].startswith(base):
            out.append(self.sorted[i])
            i += 1
        return out

    def refresh_all(self) -> dict[str, int]:
        self.refresh()
        return self.names or {}

    def owner(self, name: str) -> Tailer | None:
        """The tailer whose rotated generation ``name`` looks like (``x.log.1`` -> ``x.log``)."""
        tailers = self.tailers
        for parent in rotation_parents(name):
            t = tailers.get(parent)
            if t is not None:
                return t
        return None


class Manager:
    """Discovers files (paths and globs), runs the tailing loop, saves positions."""

    def __init__(
        self,
        pipe: Pipeline,
        specs: list[tuple[str | None, str]],
        *,
        from_beginning: bool = False,
        positions: Positions | None = None,
        positions_interval: float = 5.0,
        poll_interval: float = 0.0,
        rotate_wait: float = 5.0,
        max_line: int = DEFAULT_MAX_LINE,
        glob_interval: float = 10.0,
        fd_budget: int | None = None,
    ) -> None:
        self.pipe = pipe
        self.specs = specs  # (source name or None, path or glob), '-' excluded
        self.from_beginning = from_beginning
        self.positions = positions
        self.positions_interval = positions_interval
        self.poll_interval = poll_interval
        self.rotate_wait = rotate_wait
        self.max_line = max_line
        self.glob_interval = glob_interval
        self.fd_budget = fd_budget
        self.open_fds = 0
        self.tailers: dict[str, Tailer] = {}
        self.by_real: dict[str, Tailer] = {}
        self.dirs: dict[str, DirState] = {}
        self.lock = threading.Lock()  # guards the tailers dict against the collector
        self.cond = threading.Condition()
        self.dirty = False
        self.stopping = False
        self.started = False
        self.saved: dict[str, list[dict]] = {}
        self.saved_at_ns = 0
        self.thread: threading.Thread | None = None
        self.observer = None
        self.watched: set[str] = set()
        self.mode = "poll" if poll_interval > 0 else "inotify"
        self.loop_errors = 0
        self._next_glob = 0.0
        self._next_save = 0.0
        self._saved_key: tuple = ()
        self._save_anyway = 0.0
        self._next_sweep = 0.0
        self._glob_dirs: set[str] = set()
        self._wild_dirs = any(GLOB_CHARS.search(os.path.dirname(spec)) for _, spec in specs)
        # paths created in a glob's directory (inotify thread appends, this thread pops)
        self._created: collections.deque[str] = collections.deque()
        # more discovery (exporter/kubernetes.py), called with ``startup`` after the specs, in this
        # thread; it may call add() and remove()
        self.discoverers: list = []

    # discovery -----------------------------------------------------------------------------
    def _add(self, name: str | None, path: str, startup: bool) -> None:
        key = os.path.abspath(path)
        if key in self.tailers:
            return
        saved = self.saved.pop(key, None) if self.positions is not None else None
        seen = self.positions.seen.get(key) if self.positions is not None and self.positions.seen is not None else None
        if saved is not None and seen is None and self.positions is not None and self.positions.seen is not None:
            seen = []
        t = Tailer(
            key,
            name or source_name(path),
            self.pipe,
            start_at_end=startup and not self.from_beginning,
            saved=saved,
            saved_at_ns=self.saved_at_ns,
            saved_seen=seen,
            rotate_wait=self.rotate_wait,
            max_line=self.max_line,
            manager=self,
        )
        self.pipe.source(t.source)
        if self.positions is not None:
            self.positions.restore_state(self.pipe, t.source)
        with self.lock:
            self.tailers[key] = t
        self._home(t)
        self._watch(os.path.dirname(key))

    def _home(self, t: Tailer) -> None:
        """Register the tailer with its (real) directory; siblings present now are not ours."""
        d = self.dirs.get(os.path.dirname(t.real))
        if d is None:
            d = self.dirs[os.path.dirname(t.real)] = DirState(os.path.dirname(t.real))
            d.refresh()
        d.tailers[os.path.basename(t.real)] = t
        self.by_real[t.real] = t
        if t.saved is None:
            for name in t.siblings():
                t._not_ours(name)
        self._watch(d.path)

    def rehome(self, t: Tailer, real: str) -> None:
        """The path is a symlink that now points elsewhere (a container restarted)."""
        old = self.dirs.get(os.path.dirname(t.real))
        if old is not None and old.tailers.get(os.path.basename(t.real)) is t:
            del old.tailers[os.path.basename(t.real)]
        self.by_real.pop(t.real, None)
        t.real = real
        self._home(t)

    def dir_of(self, t: Tailer) -> DirState | None:
        return self.dirs.get(os.path.dirname(t.real))

    def _discover(self, startup: bool) -> None:
        for name, spec in self.specs:
            if not GLOB_CHARS.search(spec):
                self._add(name, spec, startup)
                continue
            matches = sorted(p for p in glob.glob(spec) if os.path.isfile(p))
            known = {os.path.basename(p) for p in matches} | {os.path.basename(k) for k in self.tailers}
            for p in matches:
                if os.path.abspath(p) in self.tailers or _looks_rotated(os.path.basename(p), known):
                    continue
                self._add(name, p, startup)
            d = _static_dir(spec)
            self._glob_dirs.add(d)
            self._watch(d)
        for disc in self.discoverers:
            disc(startup)

    def add(self, name: str, path: str, startup: bool) -> None:
        """Tail ``path`` as source ``name`` (for discoverers, in the tailer thread)."""
        self._add(name, path, startup)

    def remove(self, path: str) -> None:
        """Stop tailing ``path`` and forget its position (for discoverers, in the tailer thread)."""
        with self.lock:
            t = self.tailers.pop(os.path.abspath(path), None)
        if t is None:
            return
        t.close()
        self.by_real.pop(t.real, None)
        d = self.dirs.get(os.path.dirname(t.real))
        if d is not None and d.tailers.get(os.path.basename(t.real)) is t:
            del d.tailers[os.path.basename(t.real)]

    def _match_created(self, paths: list[str]) -> None:
        """Files created in a glob's directory: added now, without globbing the directory again."""
        for name, spec in self.specs:
            if not GLOB_CHARS.search(spec):
                continue
            d, pat = os.path.split(os.path.abspath(spec))
            if GLOB_CHARS.search(d):
                self._next_glob = min(self._next_glob, time.monotonic() + 0.5)  # wildcard directories: glob soon
                continue
            known = {os.path.basename(k) for k in self.tailers if os.path.dirname(k) == d}
            for p in paths:
                b = os.path.basename(p)
                if os.path.dirname(p) != d or not fnmatch.fnmatchcase(b, pat) or p in self.tailers:
                    continue
                if b.startswith(".") and not pat.startswith("."):
                    continue
                if _looks_rotated(b, known) or not os.path.isfile(p):
                    continue
                self._add(name, p, False)
                known.add(b)

    # watching ------------------------------------------------------------------------------
    def _wake(self, *_a) -> None:
        with self.cond:
            self.dirty = True
            self.cond.notify()

    def _event(self, event) -> None:
        """A file event (watchdog thread): mark what it concerns, wake the loop."""
        kind = event.event_type
        if kind in ("opened", "closed_no_write"):
            return
        for p in (event.src_path, getattr(event, "dest_path", None)):
            if not p:
                continue
            if isinstance(p, bytes):
                p = os.fsdecode(p)
            t = self.by_real.get(p) or self.tailers.get(p)
            if t is not None:
                t.dirty = True
            if kind in ("created", "moved", "deleted"):
                d = self.dirs.get(os.path.dirname(p))
                if d is not None:
                    d.dirty = True
                if kind != "deleted" and os.path.dirname(p) in self._glob_dirs:
                    self._created.append(p)
        self._wake()

    def _start_observer(self) -> None:
        if self.mode != "inotify":
            return
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer

            on_event = self._event

            class _H(FileSystemEventHandler):
                def on_any_event(self, event):
                    try:
                        on_event(event)
                    except Exception:  # the sweep catches up; the observer thread must live on
                        log.debug("file event not handled", exc_info=True)

            self._handler = _H()
            self.observer = Observer()
            self.observer.daemon = True
            self.observer.start()
        except Exception as e:  # pragma: no cover - platform without inotify
            log.warning("file events unavailable (%s); polling every 1s", e)
            self.mode = "poll"
            self.poll_interval = 1.0
            self.observer = None

    def _watch(self, d: str) -> None:
        if self.observer is None or not d or d in self.watched:
            return
        if not os.path.isdir(d):
            return  # retried at the sweep
        try:
            self.observer.schedule(self._handler, d, recursive=False)
            self.watched.add(d)
        except Exception as e:
            log.warning("cannot watch %s (%s); it is polled instead", d, e)
            self.watched.add(d)

    # descriptors ---------------------------------------------------------------------------
    def make_room(self, target: int | None = None) -> None:
        """Keep open descriptors within the budget: close the idlest files (their buffers and
        partial lines are kept; they are reopened by identity when written again)."""
        if self.fd_budget is None:
            return
        if target is None:
            if self.open_fds < self.fd_budget:
                return
            target = self.fd_budget * 7 // 8
        readers = [t.active for t in self.tailers.values() if t.active is not None and t.active.fd >= 0]
        readers.sort(key=lambda r: r.last_data)
        for r in readers:
            if self.open_fds <= target:
                break
            r.park()

    # loop ----------------------------------------------------------------------------------
    def start(self) -> None:
        soft = raise_nofile_limit()
        if self.fd_budget is None:
            self.fd_budget = max(16, soft - FD_RESERVE - soft // 16)
        if self.positions is not None:
            self.saved = self.positions.load()
            self.saved_at_ns = self.positions.saved_at_ns
        self._start_observer()
        self._discover(startup=True)
        self.thread = threading.Thread(target=self._run, name="tailer", daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        """Whether the tailing thread runs (for /healthz)."""
        return self.thread is None or self.thread.is_alive() or self.stopping

    def _run(self) -> None:
        while not self.stopping:
            try:
                self._loop()
            except Exception:
                # a bug outside any one source: log, count, keep going
                self.loop_errors += 1
                log.exception("tailer loop error; continuing")
                time.sleep(1.0)

    def _loop(self) -> None:
        tick = self.poll_interval if self.mode == "poll" else 1.0
        while not self.stopping:
            busy = self._cycle()
            self.started = True
            if busy:
                continue
            with self.cond:
                if not self.dirty and not self.stopping:
                    self.cond.wait(tick)
                self.dirty = False

    def _guard(self, t: Tailer, what: str, fn, *args):
        """Run one source's step; an unexpected error is logged, counted, and retried next cycle."""
        try:
            return fn(*args)
        except Exception as e:
            t.errors += 1
            t.dirty = True
            t._note(f"exc:{what}:{type(e).__name__}", logging.ERROR, "%s: error while %s: %r (retried)", t.path, what, e)
            if t._logged == f"exc:{what}:{type(e).__name__}" and t.errors == 1:
                log.debug("traceback", exc_info=True)
            return None

    def _cycle(self) -> bool:
        now = time.monotonic()
        full = self.mode == "poll" or now >= self._next_sweep
        if full and self.mode != "poll":
            self._next_sweep = now + SWEEP_INTERVAL
        for d in list(self.dirs.values()):
            if d.dirty or full:
                d.refresh()
        tailers = list(self.tailers.values())
        # a file still missing is looked for every tick (its directory may not exist to be watched)
        work = [t for t in tailers if full or t.dirty or t.busy() or t.active is None]
        for t in work:
            t.dirty = False
            self._guard(t, "looking at the file", t.check)
            self._guard(t, "reading", t.fill)
            self._guard(t, "looking at rotated files", t.consider_pending)
        more = False
        for t in work:
            if self.stopping:
                return False
            more = bool(self._guard(t, "parsing", t.parse, PARSE_SLICE)) or more
        now = time.monotonic()
        for t in work:
            if t.retired or len(t.accounted) > 4 * GEN_HISTORY + 64:
                self._guard(t, "closing rotated files", t.housekeeping, now)
        if self._created:
            created = []
            while self._created:
                created.append(self._created.popleft())
            self._match_created(created)
        if now >= self._next_glob:
            # inotify: files created in a watched glob directory are added on their event; globbing
            # again is a safety net (sooner when the glob has wildcard directories, not watched)
            every = self.glob_interval if self._wild_dirs else 6 * self.glob_interval
            self._next_glob = now + (self.poll_interval if self.mode == "poll" else every)
            self._discover(startup=False)
            for t in tailers:
                self._watch(os.path.dirname(t.path))
                self._watch(os.path.dirname(t.real))
        if self.fd_budget is not None and self.open_fds > self.fd_budget:
            self.make_room(self.fd_budget)
        if self.positions is not None and now >= self._next_save:
            self._next_save = now + self.positions_interval
            self.save(force=False)
        return more

    def wake_globs(self) -> None:
        self._next_glob = 0.0
        self._wake()

    def _change_key(self) -> tuple:
        """Changes whenever anything the positions file holds may have changed (cheap to compute:
        an idle exporter with thousands of files does not rebuild the document every interval)."""
        n = rb = rot = gens = acc = 0
        for t in self.tailers.values():
            n += 1
            rb += t.read_bytes
            rot += t.rotations + t.truncations
            gens += len(t.gens) + len(t.retired) + (t.active is not None)
            acc += len(t.accounted)
        return (n, rb, rot, gens, acc, len(self.saved))

    def save(self, force: bool = True) -> None:
        if self.positions is None:
            return
        key = self._change_key()
        now = time.monotonic()
        if not force and key == self._saved_key and now < self._save_anyway:
            return
        self._saved_key, self._save_anyway = key, now + 60.0  # and once a minute (gauges folded at scrapes)
        try:
            files = {k: t.entries() for k, t in self.tailers.items()}
            # keep saved generations of files not (re)opened yet
            for k, v in self.saved.items():
                files.setdefault(k, v)
            for k, t in self.tailers.items():
                if not files[k] and t.saved:
                    files[k] = t.saved
            seen = {k: t.seen_entries() for k, t in self.tailers.items()}
            self.positions.save(files, self.pipe, sorted({t.source for t in self.tailers.values()}), seen)
        except Exception:
            log.exception("cannot save positions")
            self.positions.write_errors += 1

    def ready(self) -> bool:
        return self.started and all(t.state in (OPEN, WAITING) for t in self.tailers.values())

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()
        if self.thread is not None:
            self.thread.join(timeout=30)
        if self.observer is not None:
            with contextlib.suppress(Exception):
                self.observer.stop()
        self.save()
        for t in self.tailers.values():
            t.close()

    def snapshot(self) -> list[Tailer]:
        with self.lock:
            return list(self.tailers.values())


def _looks_rotated(base: str, known: set[str]) -> bool:
    """Whether ``base`` is a rotated generation of a known name (one set lookup per separator)."""
    return any(p in known for p in rotation_parents(base))


def _static_dir(pattern: str) -> str:
    """The longest directory prefix of a glob without wildcards."""
    parts = os.path.abspath(pattern).split(os.sep)
    out = []
    for p in parts[:-1]:
        if GLOB_CHARS.search(p):
            break
        out.append(p)
    return os.sep.join(out) or os.sep


__all__ = ["Manager", "Tailer", "FileReader", "WAITING", "OPEN", "ERROR"]
