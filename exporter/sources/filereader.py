"""One open generation of a file: its descriptor, read-ahead buffer and line reader.

Reading goes into a bounded read-ahead buffer (reading is far faster than parsing, so bytes are
captured before a rotation or truncation can take them away); parsing then takes that buffer in
slices. A reader notices, at each look, when the content under its descriptor was truncated or
rewritten (size below what was read, or first bytes changed) and hands the old generation's rest
to its owner (read from the copy) before reading the new content from 0. Its descriptor can be
closed while idle and reopened by identity (the descriptor budget, exporter.sources.descriptors).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import time
from typing import Protocol

from ..reading.reader import Reader
from ..state.pipeline import Pipeline
from .generations import CHUNK, FP_LEN, Gen, open_file

log = logging.getLogger("hybrid_cache_exporter.tailer")

READAHEAD = 16 << 20  # bytes read ahead of the parser, per file


class Owner(Protocol):
    """What a reader needs of the tailer of its path (exporter.sources.tailer.Tailer)."""

    source: str
    pipe: Pipeline
    max_line: int
    read_bytes: int
    truncations: int

    def remember(self, gen: Gen) -> None: ...

    def finish_from_copies(self, g: Gen, r: FileReader) -> None: ...

    def mgr_fds(self, delta: int) -> None: ...


class FileReader:
    """One open generation of a file: descriptor, read-ahead buffer, reader (exporter.reading.reader)."""

    def __init__(self, tailer: Owner, fd: int, offset: int, name: str, gen: Gen | None = None) -> None:
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
        self._restarted = False  # truncated: the next bytes parsed may end the held partial line
        self.expected = b""  # the first bytes, known from a copy before any was read (expect)
        if offset > 0:
            # the container format is the file's, detected from its first line
            self.reader.detect_from(os.pread(fd, 65536, 0))

    # offsets -------------------------------------------------------------------------------
    def committed(self) -> int:
        """Offset just after the last complete line handed to the pipeline."""
        return max(0, self.read_pos - self.buf_len - self.reader.pending)

    def lag(self) -> int:
        """Bytes of the file not handed to the pipeline yet, against its size now: a scrape (another thread) may come
        before the tailing thread has seen the newest write, and the size of its last look would then hide it (a read
        lag of 0 with the newest line unread). The descriptor is this reader's only while it names the same file."""
        size = self.size
        fd = self.fd
        if fd >= 0:
            with contextlib.suppress(OSError):
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) == (self.dev, self.ino):
                    size = max(size, st.st_size)
        return max(0, size - self.committed())

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
        if not head and self.expected and os.pread(self.fd, len(self.expected), 0) != self.expected:
            return "truncated before its first read (its content is in a copy)"
        return None

    def expect(self, copy_head: bytes) -> None:
        """A copy of this content was seen before any of it was read (copytruncate's copy, made
        while the file still held it): keep the first bytes both hold, so that a truncation before
        the first read is seen as one (``_changed``), and the content is read from the copy. Without
        them a reader at offset 0 cannot tell a truncated file from an empty one."""
        if self.gen.head or self.fd < 0:
            return
        now = os.pread(self.fd, len(copy_head), 0)
        n = len(os.path.commonprefix([now, copy_head]))
        if n:
            self.expected = now[:n]

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
                self.size = st.st_size  # the new content's (the lag is of it, not of the old one)
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
        if not old.head:
            old.head = self.expected  # its first bytes, known from its copy (expect): how the copy is found
        old.reader = None
        if not self.retired:
            t.finish_from_copies(old, self)
        new = Gen(b"", 0, self.dev, self.ino)
        new.reader = self
        t.remember(new)
        self.gen = new
        self.read_pos = 0
        self.expected = b""
        self._checked = (-1, -1)
        self._restarted = True

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
            done += len(chunk)
            try:
                if self._restarted:
                    # the first bytes after a truncation: a new writer's first line (a restart that
                    # truncated the log) ends the held partial line; copytruncate's rest continues it
                    self._restarted = False
                    self._emit(self.reader.ends_before(chunk))
                self._emit(self.reader.feed(chunk))
            finally:
                # only now are the chunk's lines in the pipeline: a scrape (another thread) reading the
                # lag before this saw 0 while the gauges did not show them yet
                self.buf_len -= len(chunk)
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
        self.park()
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
            fd = open_file(path)
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
