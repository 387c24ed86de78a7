"""A path's siblings: copies, compressed copies, generations not seen, and restarts.

Split from the tailer because it is one concern of its own, the files *next to* the path:

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

:class:`Siblings` is a base of :class:`exporter.sources.tailer.Tailer` and works on the tailer's
own bookkeeping (``gens``, ``accounted``, ``pending``, ``retired``); the directory listing it reads
comes from the tailer's manager (exporter.sources.directory.DirState).
"""

from __future__ import annotations

import contextlib
import logging
import lzma
import os
import stat
import time
import zlib
from typing import Protocol

from ..reading.reader import Reader
from ..state.pipeline import Pipeline
from .filereader import FileReader
from .generations import (
    COARSE_CLOCK_NS,
    COMPRESSED,
    COPIES_PER_GEN,
    FP_LEN,
    MAX_SEEN,
    OPENERS,
    Gen,
    compressed_head,
    open_file,
    pread_iter,
    rotation_parents,
    skip_iter,
    zopen,
)

log = logging.getLogger("hybrid_cache_exporter.tailer")

PENDING_GIVE_UP = 120.0  # seconds a compressed sibling may stay unreadable (still being written)
MOVED_RELISTS = 3  # listings again in one look when siblings moved since the last one


class Listing(Protocol):
    """What the sibling handling needs of a directory's listing (exporter.sources.directory)."""

    path: str
    names: dict[str, int] | None

    def refresh(self) -> dict[str, int]: ...

    def refresh_all(self) -> dict[str, int]: ...

    def with_prefix(self, base: str) -> list[str]: ...


class Home(Protocol):
    """What a tailer needs of the manager that runs it (exporter.sources.manager.Manager)."""

    open_fds: int

    def dir_of(self, t) -> Listing | None: ...

    def rehome(self, t, real: str) -> None: ...

    def make_room(self, target: int | None = None) -> None: ...

    def _watch(self, d: str) -> None: ...


class Siblings:
    """The sibling half of a :class:`~exporter.sources.tailer.Tailer` (see the module docstring)."""

    # set by Tailer.__init__
    path: str
    real: str
    source: str
    pipe: Pipeline
    manager: Home | None
    max_line: int
    gens: list[Gen]
    accounted: dict[int, tuple[Gen | None | bool, int]]
    pending: dict[str, tuple[int, float]]
    retired: list[FileReader]
    saved: list[dict] | None
    saved_at_ns: int
    saved_seen: list[list[int]] | None
    had_saved: bool
    resume_offset: int | None
    resume_gen: Gen | None
    read_bytes: int
    rotations: int
    truncations: int
    dirty: bool
    dirty_pending: bool
    _next_retry: float
    _renamed: bool
    _moved: bool  # a sibling was not where the listing said (renamed or removed since)
    # and uses Tailer's remember(), _gen_of(), _drain() and mgr_fds()

    # copies, compressed copies, generations we have not seen, compressed copies, generations we have not seen -----------------------
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
        for _ in range(MOVED_RELISTS + 1):
            self._moved = False
            items = sorted(self.pending.items(), key=lambda kv: self._mtime(kv[0]))
            for name, (ino, since) in items:
                self.pending.pop(name, None)
                done = self._consider(name, ino)
                if not done and time.monotonic() - since < PENDING_GIVE_UP:
                    self.pending[name] = (ino, since)
            d = self.manager.dir_of(self) if self.manager is not None else None
            if not self._moved or d is None:
                break
            # a sibling renamed (or compressed and removed) since the listing, by a logrotate run that
            # overlaps this look: list again, its new name is handed back (candidate) and looked at now,
            # before a later run renames it again or deletes it (rotate N)
            d.refresh()
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
            fd = open_file(p)
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
            fd = open_file(p)
        except OSError:
            self._moved = True
            return True  # gone: the next listing shows where it went
        try:
            st = os.fstat(fd)
            if st.st_ino != ino or not stat.S_ISREG(st.st_mode):
                self._moved = True
                return True  # not the file the listing showed (renamed again): the next listing shows it
            known = self.accounted.get(ino)
            seen = known is not None and known[1] == st.st_mtime_ns  # looked at before (renamed since)
            # (False: looked at before the restart; it may still hold the rest of a saved generation)
            if seen and (known[0] is None or known[0] is not False and (known[0].reader is not None or known[0].consumed >= st.st_size)):
                return True
            if opener is None:
                head = os.pread(fd, FP_LEN, 0)
                size = st.st_size
            else:
                head, size = compressed_head(fd, opener)
                if head is None:
                    return False  # still being written
            g = self._gen_of(head) if head else None
            if g is not None:
                self.accounted[ino] = (g, st.st_mtime_ns)
                if g.reader is not None and g.reader is self.active:
                    if (p, ino) not in g.copies:
                        g.copies = (g.copies + [(p, ino)])[-COPIES_PER_GEN:]
                    # a copy of what we are reading: read only if the file is truncated, which the
                    # reader sees even before it read anything (FileReader.expect)
                    self.active.expect(head)
                    return True
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
            with contextlib.suppress(EOFError, OSError, lzma.LZMAError, zlib.error), zopen(fd, opener) as z:
                sink.reader.detect_from(z.read(65536))
        try:
            with zopen(fd, opener) as z:
                for chunk in skip_iter(z, start):
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
        found: list[tuple[int, str, int]] = []  # (size, path, inode) of the copies with unread bytes
        for p, ino in cands:
            try:
                fd = open_file(p)
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
                    head, size = compressed_head(fd, opener)
                    if head is None:
                        continue
                if not g.matches(head):
                    continue
                self.accounted[ino] = (g, st.st_mtime_ns)
                self.pending.pop(os.path.basename(p), None)
                if size > g.consumed:
                    found.append((size, p, ino))
            finally:
                os.close(fd)
        g.copies = []
        start = g.consumed
        # the largest first; a compressed one still being written (logrotate compresses the previous
        # copy while the exporter looks) is left for the look that finds it complete (_consider)
        for _size, p, ino in sorted(found, reverse=True):
            try:
                fd = open_file(p)
            except OSError:
                continue
            try:
                if os.fstat(fd).st_ino != ino:
                    continue
                opener = OPENERS.get(os.path.splitext(p)[1])
                if opener is None:
                    g.consumed += r.read_extra(pread_iter(fd, start))
                else:
                    try:
                        with zopen(fd, opener) as z:
                            rest = list(skip_iter(z, start))  # whole before any of it is fed
                    except (EOFError, OSError, lzma.LZMAError, zlib.error) as e:
                        log.info("%s: the copy %s is not complete yet (%s); its rest is read once it is", self.path, p, e)
                        self.accounted.pop(ino, None)
                        self.candidate(os.path.basename(p), ino)
                        continue
                    g.consumed += r.read_extra(rest)
                log.info("%s: read %d unread bytes from the copy %s", self.path, g.consumed - start, p)
                return
            except OSError as e:
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
                fd = open_file(self.path)
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
                        sfd = open_file(os.path.join(self._dir(), name))
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
                        "%s: the file read before the restart (inode %d) is gone: whatever it held after offset %d (its size is gone with it: maybe nothing) was not read",
                        self.path,
                        g.ino,
                        g.consumed,
                    )
        finally:
            if fd >= 0:
                os.close(fd)


class _Sink:
    """Feeds decompressed bytes of one generation through a reader into the pipeline, counting
    the bytes of complete lines (what ``consumed`` may advance by)."""

    def __init__(self, t: Siblings) -> None:
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
