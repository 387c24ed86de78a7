"""File tailing: rotation, truncation and restart safe.

One manager thread owns every tailed file. It sleeps on a condition variable that inotify events
(watchdog) or the poll timer wake, then for each file: checks the path's identity, reads
everything available into a bounded read-ahead buffer (reading is far faster than parsing, so the
bytes are captured before a rotation or truncation can take them away), and parses that buffer in
slices. No busy loop: an idle exporter wakes once per housekeeping interval and does a few
``stat`` calls.

Identity of a file generation = ``(st_dev, st_ino)`` plus the SHA-1 of its first bytes (up to
256). While a file is open its inode cannot be reused, so a different ``(dev, ino)`` at the path
means rename+create rotation or delete+recreate: the old descriptor is drained to EOF and kept
("retired") for ``rotate_wait`` seconds for late writes, the new file is read from offset 0.
A size below the read offset, or a changed first-bytes fingerprint, means truncation
(copytruncate, ``: > file``, rewrite): reading restarts at 0. Bytes that were written before a
copytruncate but not read yet are taken from the copy (a sibling whose first bytes match and that
was written no earlier than the original), so a fast writer loses nothing.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import glob
import hashlib
import logging
import os
import re
import stat
import threading
import time

from ..lines import DEFAULT_MAX_LINE
from ..pipeline import Pipeline
from ..reading import Reader, source_name
from .positions import Positions

log = logging.getLogger("hybrid_cache_exporter.tailer")

FP_LEN = 256
CHUNK = 1 << 20  # one read() call
PARSE_SLICE = 256 << 10  # bytes parsed per file before the loop looks at the files again
READAHEAD = 16 << 20  # bytes read ahead of the parser, per file
GLOB_CHARS = re.compile(r"[*?\[]")
COMPRESSED = re.compile(r"\.(gz|bz2|xz|zst|lz4|zip)$")
COARSE_CLOCK_NS = 20_000_000  # file timestamps come from the kernel's coarse clock (one tick behind)
ROTATED_SUFFIX = re.compile(r"^[.-](\d+|\d{4}-?\d\d-?\d\d\S*)(\.(gz|bz2|xz|zst|lz4))?$|^\.(gz|bz2|xz|zst|lz4)$")

WAITING = "waiting"
OPEN = "open"
ERROR = "error"


def _fp(fd: int, n: int = FP_LEN) -> tuple[str, int]:
    data = os.pread(fd, n, 0)
    return hashlib.sha1(data).hexdigest(), len(data)


def _fp_matches(fd: int, fp: str, fp_len: int) -> bool:
    data = os.pread(fd, fp_len, 0)
    return len(data) == fp_len and hashlib.sha1(data).hexdigest() == fp


def _open(path: str) -> int:
    return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))


def _siblings(path: str):
    d = os.path.dirname(path) or "."
    try:
        with os.scandir(d) as it:
            for ent in it:
                p = os.path.join(d, ent.name)
                if p == path:
                    continue
                try:
                    st = ent.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    yield p, st
    except OSError:
        return


def _head(path: str, n: int) -> bytes | None:
    try:
        fd = _open(path)
    except OSError:
        return None
    try:
        return os.pread(fd, n, 0)
    finally:
        os.close(fd)


def _file_fp_matches(path: str, fp: str, fp_len: int) -> bool:
    data = _head(path, fp_len)
    return data is not None and len(data) == fp_len and hashlib.sha1(data).hexdigest() == fp


def find_rotated(path: str, dev: int, ino: int, fp: str, fp_len: int) -> str | None:
    """The file in ``path``'s directory that is the generation ``(dev, ino, fp)`` (rename rotation)."""
    for p, st in _siblings(path):
        if (st.st_dev, st.st_ino) == (dev, ino):
            try:
                fd = _open(p)
            except OSError:
                return None
            try:
                return p if _fp_matches(fd, fp, fp_len) else None
            finally:
                os.close(fd)
    return None


def find_copy(path: str, fp: str, fp_len: int, min_size: int, exclude: tuple[int, int], min_mtime_ns: int = 0) -> str | None:
    """A copytruncate copy of ``path``: a sibling named like ``path`` plus a suffix, with the same
    first bytes, at least ``min_size`` bytes, modified no earlier than ``min_mtime_ns``; newest wins."""
    if fp_len == 0:
        return None
    base = os.path.basename(path)
    best: tuple[int, str] | None = None
    for p, st in _siblings(path):
        name = os.path.basename(p)
        if not name.startswith(base) or name == base or (st.st_dev, st.st_ino) == exclude:
            continue
        if st.st_size < min_size or st.st_mtime_ns < min_mtime_ns:
            continue
        try:
            fd = _open(p)
        except OSError:
            continue
        try:
            if _fp_matches(fd, fp, fp_len) and (best is None or st.st_mtime_ns > best[0]):
                best = (st.st_mtime_ns, p)
        finally:
            os.close(fd)
    return best[1] if best else None


class FileReader:
    """One open generation of a file: descriptor, read-ahead buffer, reader (exporter.reading)."""

    def __init__(self, tailer: Tailer, fd: int, offset: int, name: str) -> None:
        self.tailer = tailer
        self.fd = fd
        self.name = name  # where it was opened from (for logs)
        self.retired = False  # only the file at the path looks for copies and rotated generations
        st = os.fstat(fd)
        self.dev, self.ino = st.st_dev, st.st_ino
        self.size = st.st_size
        self.mtime_ns = st.st_mtime_ns
        self.read_pos = offset
        self.buf: collections.deque[bytes] = collections.deque()
        self.buf_len = 0
        self.reader = Reader(tailer.max_line)
        # the first bytes of this generation as we read them: its fingerprint
        self.head = os.pread(fd, min(FP_LEN, offset), 0) if offset > 0 else b""
        self.last_data = time.monotonic()
        self.opened_ns = time.time_ns()
        self._checked = (self.size, self.mtime_ns)
        tailer.seen[(self.dev, self.ino)] = (self.fp, self.fp_len)
        if offset > 0:
            # the container format is the file's, detected from its first line
            self.reader.detect_from(os.pread(fd, 65536, 0))

    # offsets -------------------------------------------------------------------------------
    def committed(self) -> int:
        """Offset just after the last complete line handed to the pipeline."""
        return max(0, self.read_pos - self.buf_len - self.reader.pending)

    def entry(self) -> dict:
        return {"dev": self.dev, "ino": self.ino, "fp": self.fp, "fp_len": self.fp_len, "offset": self.committed()}

    def lag(self) -> int:
        return max(0, self.size - self.committed())

    # reading -------------------------------------------------------------------------------
    @property
    def fp(self) -> str:
        return hashlib.sha1(self.head).hexdigest()

    @property
    def fp_len(self) -> int:
        return len(self.head)

    def _changed(self, st: os.stat_result) -> str | None:
        """Why the content read so far is no longer the file's content (or None)."""
        if st.st_size < self.read_pos:
            return "truncated"
        if self.head and os.pread(self.fd, len(self.head), 0) != self.head:
            return "rewritten (first bytes changed)"
        return None

    def fill(self) -> bool:
        """Read what is available (up to the read-ahead limit). Returns True if the file was
        truncated or rewritten (the caller restarts it)."""
        t = self.tailer
        st = os.fstat(self.fd)
        key = (st.st_size, st.st_mtime_ns)
        if key != self._checked:
            why = self._changed(st)
            if why:
                self._restart(self.mtime_ns, why)
                return True
        start_pos, start_chunks, got = self.read_pos, len(self.buf), 0
        while self.buf_len < READAHEAD:
            try:
                chunk = os.pread(self.fd, CHUNK, self.read_pos)
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EINTR):
                    break
                raise
            if not chunk:
                break
            if self.read_pos < FP_LEN and len(self.head) == self.read_pos:
                self.head += chunk[: FP_LEN - self.read_pos]
            got += len(chunk)
            self.buf.append(chunk)
            self.buf_len += len(chunk)
            self.read_pos += len(chunk)
        st = os.fstat(self.fd)
        self.size = st.st_size
        key = (st.st_size, st.st_mtime_ns)
        if key != self._checked or got:
            prev_mtime = self.mtime_ns
            why = self._changed(st)
            if why:
                # changed while we read: what this read returned may be new content; the old
                # content's rest comes from a copy (copytruncate) or the new content is read from 0
                while len(self.buf) > start_chunks:
                    self.buf_len -= len(self.buf.pop())
                self.read_pos = start_pos
                if start_pos < FP_LEN:
                    self.head = self.head[:start_pos]
                self._restart(prev_mtime, why)
                return True
            self._checked = key
            self.mtime_ns = st.st_mtime_ns
        if got:
            t.read_bytes += got
            self.last_data = time.monotonic()
            if start_pos == 0 and not self.retired:
                # first content: generations written, copied and truncated before we saw any byte
                self._adopt_copies(t.unseen_rotated(), self.head, None)
        return False

    def _adopt_copies(self, cands: list, cur_fp: bytes, own: tuple | None) -> None:
        """Read, from their start, copies of content that was truncated before we read it."""
        t = self.tailer
        for mtime_ns, p, _st in cands:
            if own is not None and (p == own[1] or mtime_ns < own[0]):
                continue
            if self.fp_len and _file_fp_matches(p, self.fp, self.fp_len):
                continue  # a copy of the content we are reading (not truncated after it)
            head = _head(p, len(cur_fp))
            n = min(len(head or b""), len(cur_fp))
            if head is None or (n > 0 and head[:n] == cur_fp[:n]):
                continue  # the path still starts like this copy: not truncated after it yet
            t.truncations += 1
            t._retire_from(p, 0, "copy of content truncated before it was read")

    def _restart(self, prev_mtime_ns: int, why: str) -> None:
        t = self.tailer
        t.truncations += 1
        log.info("%s: %s at offset %d; reading again from the start", self.name, why, self.read_pos)
        self.parse(None)  # what was read before the truncation belongs to the old content
        cands = t.unseen_rotated() if not self.retired else []
        cur_fp = os.pread(self.fd, FP_LEN, 0)
        own = None
        for mtime_ns, p, st in cands:
            # copytruncate: the copy of this content holds what was written but not read yet
            if st.st_size > self.read_pos and mtime_ns >= prev_mtime_ns - COARSE_CLOCK_NS and _file_fp_matches(p, self.fp, self.fp_len):
                own = (mtime_ns, p, st)
        if own is not None:
            self._read_copy(own[1], own[2])
        self._adopt_copies(cands, cur_fp, own)
        # a held partial line is kept: after copytruncate the writer finishes it in the new content
        self.read_pos = 0
        self.head = b""
        self._checked = (-1, -1)

    def _read_copy(self, path: str, st: os.stat_result) -> None:
        t = self.tailer
        try:
            fd = _open(path)
        except OSError as e:
            log.warning("%s: cannot read the copy %s: %s", self.name, path, e)
            return
        try:
            pos = self.read_pos
            while True:
                chunk = os.pread(fd, CHUNK, pos)
                if not chunk:
                    break
                pos += len(chunk)
                t.read_bytes += len(chunk)
                self._emit(self.reader.feed(chunk))
            t.seen[(st.st_dev, st.st_ino)] = _fp(fd)
            log.info("%s: read %d unread bytes from the copy %s", self.name, pos - self.read_pos, path)
        finally:
            os.close(fd)

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
        if not lines:
            return
        self.tailer.pipe.feed_lines(self.tailer.source, lines)

    def finish(self) -> None:
        """End of a retired file: parse the rest and flush a final unterminated line."""
        self.parse(None)
        self._emit(self.reader.flush())
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                self.tailer.seen[(self.dev, self.ino)] = _fp(self.fd)
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

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
        rotate_wait: float = 5.0,
        max_line: int = DEFAULT_MAX_LINE,
        engine: str | None = None,
    ) -> None:
        self.path = path
        self.source = source
        self.pipe = pipe
        self.engine = engine
        self.start_at_end = start_at_end
        self.saved = saved
        self.rotate_wait = rotate_wait
        self.max_line = max_line
        self.active: FileReader | None = None
        self.retired: list[FileReader] = []
        self.state = WAITING
        self.error: str | None = None
        self.read_bytes = 0
        self.rotations = 0
        self.truncations = 0
        self._overlong_closed = 0
        self.had_file = False
        self.first = True
        self.seen: collections.OrderedDict[tuple[int, int], tuple[str, int]] = collections.OrderedDict()
        self.had_saved = False
        self.scan_since = time.time_ns() - COARSE_CLOCK_NS  # rotated files older than this are not ours
        self.resume_offset: int | None = None
        self.mtime: float | None = None
        self._logged: str | None = None

    # metrics -------------------------------------------------------------------------------
    @property
    def overlong(self) -> int:
        n = self._overlong_closed
        if self.active is not None:
            n += self.active.overlong
        return n + sum(r.overlong for r in self.retired)

    def open_files(self) -> int:
        return (1 if self.active is not None else 0) + len(self.retired)

    def lag(self) -> int:
        return sum(r.lag() for r in self.readers())

    def readers(self) -> list[FileReader]:
        return self.retired + ([self.active] if self.active is not None else [])

    def offset(self) -> int | None:
        a = self.active
        return a.committed() if a is not None else None

    def entries(self) -> list[dict]:
        return [r.entry() for r in self.readers()]

    def _note(self, key: str, level: int, msg: str, *args) -> None:
        """Log a state once (not on every poll)."""
        if self._logged != key:
            self._logged = key
            log.log(level, msg, *args)

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
            self._drain(a)
            self.retired.append(a)
            self.active = None
            log.info("%s: %s; draining the old file for %.0fs", self.path, "deleted" if st is None else "rotated", self.rotate_wait)
            self._intermediate(a, st)
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

    def unseen_rotated(self) -> list[tuple[int, str, os.stat_result]]:
        """Rotated-looking siblings (``<name>.1``, ``<name>-20260814``; not compressed) written since
        the last scan that we have not read, oldest first."""
        base = os.path.basename(self.path)
        since, self.scan_since = self.scan_since, time.time_ns() - COARSE_CLOCK_NS
        found = []
        for p, st in _siblings(self.path):
            name = os.path.basename(p)
            if not name.startswith(base) or not ROTATED_SUFFIX.match(name[len(base) :]) or COMPRESSED.search(name):
                continue
            if st.st_mtime_ns < since:
                continue
            known = self.seen.get((st.st_dev, st.st_ino))
            if known is not None and _file_fp_matches(p, *known):
                continue
            found.append((st.st_mtime_ns, p, st))
        found.sort()
        return found

    def _intermediate(self, old: FileReader, cur: os.stat_result | None) -> None:
        """Generations that were at the path and rotated away between two looks (a writer rotating
        faster than we poll): rotated-looking siblings we never read, written since the last scan."""
        for _, p, _st in self.unseen_rotated():
            self.rotations += 1
            self._retire_from(p, 0, "rotated before it was seen")

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
        try:
            fd = _open(self.path)
        except FileNotFoundError:
            return
        except OSError as e:
            self._set_error(f"cannot open: {e.strerror or e}")
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                self._set_error("not a regular file")
                return
            offset = self._start_offset(fd, st)
            r = FileReader(self, fd, offset, self.path)
        except OSError as e:
            os.close(fd)
            self._set_error(f"cannot read: {e.strerror or e}")
            return
        if self.had_file and not self.first:
            self.rotations += 1
        self.first = False
        self.had_file = True
        self.active = r
        self.state = OPEN
        self.error = None
        self.mtime = st.st_mtime
        self._note(OPEN, logging.INFO, "%s: reading from offset %d (source=%s)", self.path, offset, self.source)

    def _start_offset(self, fd: int, st: os.stat_result) -> int:
        if not self.first:
            return 0  # a file that appeared after we started: all of it is new
        if self.resume_offset is not None:
            off, self.resume_offset = self.resume_offset, None
            return off
        if self.had_saved:
            return 0  # created after the generations recorded in the positions file
        if self.start_at_end:
            return self._tail_start(fd, st.st_size)
        return 0

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

    def _apply_saved(self, st: os.stat_result | None) -> None:
        """Apply the saved generations: drain rotated ones from their offsets, resume the current."""
        saved, self.saved = self.saved or [], None
        self.had_saved = bool(saved)
        fd = -1
        if st is not None and stat.S_ISREG(st.st_mode):
            try:
                fd = _open(self.path)
                st = os.fstat(fd)
            except OSError:
                fd = -1
        try:
            self.resume_offset = self._resume(fd, st, saved) if saved else None
        finally:
            if fd >= 0:
                os.close(fd)

    def _resume(self, fd: int, st: os.stat_result | None, saved: list[dict]) -> int | None:
        active_offset: int | None = None
        for e in saved:
            same_inode = fd >= 0 and st is not None and (st.st_dev, st.st_ino) == (e["dev"], e["ino"])
            if same_inode and _fp_matches(fd, e["fp"], e["fp_len"]):
                if st.st_size >= e["offset"]:
                    active_offset = e["offset"]
                else:
                    self.truncations += 1
                    log.info("%s: truncated while the exporter was down; reading from the start", self.path)
                    self._resume_copy(e, (st.st_dev, st.st_ino))
                    active_offset = 0
                continue
            p = find_rotated(self.path, e["dev"], e["ino"], e["fp"], e["fp_len"])
            if p is not None:
                self.rotations += 1
                self._retire_from(p, e["offset"], "rotated while the exporter was down")
                continue
            if same_inode and st is not None:
                self.truncations += 1
                log.info("%s: rewritten while the exporter was down; reading from the start", self.path)
                self._resume_copy(e, (st.st_dev, st.st_ino))
                active_offset = 0
                continue
            log.warning(
                "%s: the file read before the restart (inode %d) is gone; lines after offset %d in it are lost",
                self.path,
                e["ino"],
                e["offset"],
            )
            self.rotations += 1
        return active_offset

    def _resume_copy(self, e: dict, exclude: tuple[int, int]) -> None:
        p = find_copy(self.path, e["fp"], e["fp_len"], e["offset"] + 1, exclude)
        if p is not None:
            self._retire_from(p, e["offset"], "copy made by copytruncate while the exporter was down")

    def _retire_from(self, p: str, offset: int, why: str) -> None:
        try:
            fd = _open(p)
            r = FileReader(self, fd, offset, p)
            r.retired = True
        except OSError as e:
            log.warning("%s: cannot open %s: %s", self.path, p, e)
            return
        log.info("%s: %s: reading %s from offset %d", self.path, why, p, offset)
        self._drain(r)
        self.retired.append(r)

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

    def housekeeping(self, now: float) -> None:
        while len(self.seen) > 256:
            self.seen.popitem(last=False)
        keep = []
        for r in self.retired:
            if now - r.last_data >= self.rotate_wait and r.buf_len == 0:
                self._overlong_closed += r.overlong
                r.finish()
                log.info("%s: closed the rotated file (inode %d)", self.path, r.ino)
            else:
                keep.append(r)
        self.retired = keep

    def close(self) -> None:
        for r in self.readers():
            r.close()
        self.retired = []
        self.active = None


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
        self.tailers: dict[str, Tailer] = {}
        self.lock = threading.Lock()  # guards the tailers dict against the collector
        self.cond = threading.Condition()
        self.dirty = False
        self.stopping = False
        self.started = False
        self.saved: dict[str, list[dict]] = {}
        self.thread: threading.Thread | None = None
        self.observer = None
        self.watched: set[str] = set()
        self.mode = "poll" if poll_interval > 0 else "inotify"
        self._next_glob = 0.0
        self._next_save = 0.0
        # more discovery (exporter/kubernetes.py), called with ``startup`` after the specs, in this
        # thread; it may call add() and remove()
        self.discoverers: list = []

    # discovery -----------------------------------------------------------------------------
    def _add(self, name: str | None, path: str, startup: bool) -> None:
        key = os.path.abspath(path)
        if key in self.tailers:
            return
        saved = self.saved.pop(key, None) if self.positions is not None else None
        t = Tailer(
            key,
            name or source_name(path),
            self.pipe,
            start_at_end=startup and not self.from_beginning,
            saved=saved,
            rotate_wait=self.rotate_wait,
            max_line=self.max_line,
        )
        self.pipe.source(t.source)
        with self.lock:
            self.tailers[key] = t
        self._watch(os.path.dirname(key))

    def _discover(self, startup: bool) -> None:
        for name, spec in self.specs:
            if not GLOB_CHARS.search(spec):
                self._add(name, spec, startup)
                continue
            matches = sorted(p for p in glob.glob(spec) if os.path.isfile(p))
            known = {os.path.basename(p) for p in matches} | {os.path.basename(k) for k in self.tailers}
            for p in matches:
                if self._looks_rotated(os.path.basename(p), known):
                    continue
                self._add(name, p, startup)
            self._watch(_static_dir(spec))
        for d in self.discoverers:
            d(startup)

    def add(self, name: str, path: str, startup: bool) -> None:
        """Tail ``path`` as source ``name`` (for discoverers, in the tailer thread)."""
        self._add(name, path, startup)

    def remove(self, path: str) -> None:
        """Stop tailing ``path`` and forget its position (for discoverers, in the tailer thread)."""
        with self.lock:
            t = self.tailers.pop(os.path.abspath(path), None)
        if t is not None:
            t.close()

    @staticmethod
    def _looks_rotated(base: str, known: set[str]) -> bool:
        return any(k != base and base.startswith(k) and ROTATED_SUFFIX.match(base[len(k) :]) for k in known)

    # watching ------------------------------------------------------------------------------
    def _wake(self, *_a) -> None:
        with self.cond:
            self.dirty = True
            self.cond.notify()

    def _start_observer(self) -> None:
        if self.mode != "inotify":
            return
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer

            wake = self._wake

            class _H(FileSystemEventHandler):
                def on_any_event(self, event):  # noqa: ARG002
                    wake()

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
            return  # retried at housekeeping
        try:
            self.observer.schedule(self._handler, d, recursive=False)
            self.watched.add(d)
        except Exception as e:
            log.warning("cannot watch %s (%s); it is polled instead", d, e)
            self.watched.add(d)

    # loop ----------------------------------------------------------------------------------
    def start(self) -> None:
        if self.positions is not None:
            self.saved = self.positions.load()
        self._start_observer()
        self._discover(startup=True)
        self.thread = threading.Thread(target=self._run, name="tailer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # pragma: no cover - a bug; keep serving what we have
            log.exception("tailer loop crashed")
            raise

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

    def _cycle(self) -> bool:
        tailers = list(self.tailers.values())
        for t in tailers:
            t.check()
            t.fill()
        more = False
        for t in tailers:
            if self.stopping:
                return False
            more = t.parse(PARSE_SLICE) or more
        now = time.monotonic()
        for t in tailers:
            t.housekeeping(now)
        if now >= self._next_glob:
            self._next_glob = now + (self.poll_interval if self.mode == "poll" else self.glob_interval)
            self._discover(startup=False)
            for t in tailers:
                self._watch(os.path.dirname(t.path))
        if self.positions is not None and now >= self._next_save:
            self._next_save = now + self.positions_interval
            self.save()
        return more

    def wake_globs(self) -> None:
        self._next_glob = 0.0
        self._wake()

    def save(self) -> None:
        if self.positions is None:
            return
        files = {k: t.entries() for k, t in self.tailers.items()}
        # keep saved generations of files not (re)opened yet
        for k, v in self.saved.items():
            files.setdefault(k, v)
        for k, t in self.tailers.items():
            if not files[k] and t.saved:
                files[k] = t.saved
        self.positions.save(files)

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
