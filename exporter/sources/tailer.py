"""One tailed path: the file currently there plus rotated generations still being drained.

Rotation, truncation and restarts are handled by identity, not by timing (generations:
exporter.sources.generations):

* rename rotation (``create``, Docker, kubelet): the path's inode changes; the old descriptor is
  drained and kept ("retired") for ``rotate_wait`` seconds for late writes; the new file is read
  from 0;
* truncation, copies and generations that appear next to the path, and the restart from a
  positions file: exporter.sources.siblings (a base of :class:`Tailer`).

A :class:`Tailer` is driven by the manager's loop (exporter.sources.manager): ``check`` (look at
the path), ``fill`` (read ahead), ``consider_pending`` (siblings), ``parse`` (a slice),
``housekeeping`` (close drained rotated files).
"""

from __future__ import annotations

import logging
import os
import stat

from ..reading.lines import DEFAULT_MAX_LINE
from ..reading.reader import Reader, file_year
from ..state.pipeline import Pipeline
from .filereader import FileReader
from .generations import FP_LEN, GEN_HISTORY, Gen, open_file
from .recovery import DETECT_BYTES, recover
from .siblings import Home, Siblings

log = logging.getLogger("hybrid_cache_exporter.tailer")

WAITING = "waiting"
OPEN = "open"
ERROR = "error"


class Tailer(Siblings):
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
        manager: Home | None = None,
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
        self.recovered_lines = 0  # lines read back at start for the current boot's facts (not counted)
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
        self.seq = 0  # the manager's order of the tailers (the order they are worked in)
        self._dirty = False
        self.dirty = True
        self.had_saved = False
        self.resume_offset: int | None = None
        self.resume_gen: Gen | None = None
        self.mtime: float | None = None
        self._logged: str | None = None
        self._renamed = False  # the path changed inode since siblings were last looked at
        self._moved = False

    @property
    def dirty(self) -> bool:
        """Something happened to the file (an event, a sibling, an error): look at it next cycle.
        Setting it tells the manager, which otherwise looks only at the files with work left."""
        return self._dirty

    @dirty.setter
    def dirty(self, v: bool) -> None:
        self._dirty = v
        if v and self.manager is not None:
            self.manager.marked.append(self)  # a deque: safe from the inotify thread

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
        if best is None and 0 < len(head) < FP_LEN:
            # a file shorter than a fingerprint is a copy still being written (logrotate's copy seen
            # half made) or a short generation: the known content that starts with all of it
            best = next((g for g in reversed(self.gens) if g.head and g.head.startswith(head)), None)
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
                log.warning(
                    "%s: rotated while its descriptor was closed (budget) and gone; bytes after %d are read from a copy if one turns up, else lost",
                    self.path,
                    a.read_pos,
                )
                a.close()
            else:
                self._drain(a)
                self.retired.append(a)
            self.active = None
            log.info("%s: %s; draining the old file for %.0fs", self.path, "deleted" if st is None else "rotated", self.rotate_wait)
            if st is None:
                self._logged = WAITING  # said: no 'does not exist' line too while it is recreated
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
        if self.first:
            # unreadable before it was ever read (a directory Docker made for a missing bind
            # mount, a symlink loop, permission denied): once readable, all of it is new, as for
            # a path that appears after the start
            self.start_at_end = False
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
            fd = open_file(self.path)
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
            offset, gen, back = self._start_offset(fd, st)
            if back:
                self._recover(fd, offset)
            self._set_year(fd, offset, st)
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

    def _start_offset(self, fd: int, st: os.stat_result) -> tuple[int, Gen | None, bool]:
        """Where the first file opened is read from, and whether the current boot is read back
        from before that offset (exporter.sources.recovery)."""
        if not self.first:
            return 0, None, False  # a file that appeared after we started: all of it is new
        if self.resume_offset is not None:
            off, self.resume_offset = self.resume_offset, None
            gen, self.resume_gen = self.resume_gen, None
            if gen is not None and (gen.dev, gen.ino) != (st.st_dev, st.st_ino):
                gen = None
            off = min(off, st.st_size)
            return off, gen, off > 0  # recovered only if the saved facts are missing (_recover)
        if self.had_saved:
            return 0, None, False  # created after the generations recorded in the positions file
        if self.start_at_end:
            # read back even from an empty file: the boot may be in a copy rotated just before
            return self._tail_start(fd, st.st_size), None, True
        return 0, None, False

    def _said_nothing(self) -> bool:
        with self.pipe.lock:
            src = self.pipe.sources.get(self.source)
            return src is None or not (src.servers or src.config or src.last_ts is not None)

    def _recover(self, fd: int, end: int) -> None:
        """The source has said nothing and its file holds lines before ``end``: read the current
        boot back for its facts (not counted; exporter.sources.recovery)."""
        make = getattr(self.manager, "recover_pipeline", None)
        if make is None or not self._said_nothing():
            return
        sibs = [os.path.join(self._dir(), n) for n in self.siblings()]
        if end == 0 and not sibs:
            return  # nothing was written before the start
        res = recover(self.pipe, make, self.source, self.path, fd, end, sibs, self.max_line)
        self.recovered_lines += res.lines
        log.info(
            "%s: read back %d lines before offset %d for the current boot's facts (boot %s; searched %d bytes; %.2fs); not counted",
            self.path,
            res.lines,
            end,
            res.boot or "not found: the newest lines only",
            res.scanned,
            res.seconds,
        )

    def _set_year(self, fd: int, offset: int, st: os.stat_result) -> None:
        """A source's first lines: the year of vLLM's year-less times from the file (its
        modification time and first dated line: exporter.reading.reader.file_year), not from the clock."""
        if offset >= st.st_size or not self._said_nothing():
            return
        r = Reader(self.max_line)
        r.detect_from(os.pread(fd, DETECT_BYTES, 0))
        lines = r.feed(os.pread(fd, DETECT_BYTES, offset))
        if lines:
            year = file_year(lines, st.st_mtime, self.pipe.engine)
            with self.pipe.lock:
                self.pipe.source(self.source).year = year

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

    def finish(self) -> None:
        """The file is complete (its writer is gone): parse what is buffered, flush its last line."""
        for r in self.readers():
            if r.fd >= 0:
                r.fill()
            r.parse(None)
            r.flush()

    def close(self) -> None:
        for r in self.readers():
            r.close()
        self.retired = []
        self.active = None
