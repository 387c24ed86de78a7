"""The tailing loop: discovers files (paths and globs), watches their directories, saves positions.

One manager thread owns every tailed file. It sleeps on a condition variable that inotify events
(watchdog) or the poll timer wake, and then works only on what changed: a directory is listed
(once per cycle, names and inode numbers only) when an entry in it was created, moved or deleted
(exporter.sources.directory); a file is looked at when it was written. A safety sweep looks at
everything every few seconds (inotify queues can overflow). Each file's reading, rotation and
restart are its :class:`~exporter.sources.tailer.Tailer`'s; the descriptor budget is
exporter.sources.descriptors.
"""

from __future__ import annotations

import collections
import contextlib
import fnmatch
import glob
import logging
import os
import threading
import time
from collections.abc import Callable

from ..reading.lines import DEFAULT_MAX_LINE
from ..reading.reader import source_name
from ..state.pipeline import Pipeline
from .descriptors import budget, park_idlest, raise_nofile_limit
from .directory import GLOB_CHARS, DirState, static_dir
from .generations import GEN_HISTORY, looks_rotated
from .positions import Positions
from .tailer import OPEN, WAITING, Tailer

log = logging.getLogger("hybrid_cache_exporter.tailer")

PARSE_SLICE = 256 << 10  # bytes parsed per file before the loop looks at the files again
SWEEP_INTERVAL = 5.0  # inotify mode: look at every file this often anyway (an overflowed event queue)
SWEEP_PER_FILE = 0.005  # ... or less often with many files: a sweep costs ~15 us per file (2,000 files: every 10 s)
WARM_BUDGET = 5.0  # seconds the first scrape may wait for the files found at start to be read


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
        recover_pipeline: Callable[[], Pipeline] | None = None,
        warm_budget: float = WARM_BUDGET,
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
        # a new pipeline like the real one, for reading a file's current boot back at start
        # (exporter.sources.recovery); None = no recovery (tests of the tailing alone)
        self.recover_pipeline = recover_pipeline
        # set once the files found at start were read up to their ends (or after warm_budget
        # seconds): /metrics waits for it, so the first scrape has the facts (docs/serve.md)
        self.warm = threading.Event()
        self.warm_budget = warm_budget
        self._warm_until = 0.0
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
        self._save_now = False
        self._saved_key: tuple = ()
        self._save_anyway = 0.0
        self._next_sweep = 0.0
        self._glob_dirs: set[str] = set()
        self._wild_dirs = any(GLOB_CHARS.search(os.path.dirname(spec)) for _, spec in specs)
        # paths created in a glob's directory (inotify thread appends, this thread pops)
        self._created: collections.deque[str] = collections.deque()
        # the tailers looked at next cycle (between sweeps): those marked dirty (from any thread)
        # and those with work left or no file yet; an idle tailer costs nothing per cycle
        self.marked: collections.deque[Tailer] = collections.deque()
        self._attention: set[Tailer] = set()
        self._seq = 0
        self._trees: list[str] = []  # directories watched recursively (a discoverer's root)
        self._rediscover = False  # an entry under one was created, moved or deleted
        # more discovery (exporter/sources/kubernetes.py), called with ``startup`` after the specs, in this
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
        # a position that was saved but had to be rejected: the file is read from its start (every
        # line at least once); without positions, or a path new to them: from the end
        lost = self.positions is not None and self.positions.unusable(key)
        t = Tailer(
            key,
            name or source_name(path),
            self.pipe,
            start_at_end=startup and not self.from_beginning and not lost,
            saved=saved,
            saved_at_ns=self.saved_at_ns,
            saved_seen=seen,
            rotate_wait=self.rotate_wait,
            max_line=self.max_line,
            manager=self,
        )
        self._seq += 1
        t.seq = self._seq
        self.pipe.source(t.source)
        if self.positions is not None:
            self.positions.restore_state(self.pipe, t.source)
        with self.lock:
            self.tailers[key] = t
        self._attention.add(t)
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
                if os.path.abspath(p) in self.tailers or looks_rotated(os.path.basename(p), known):
                    continue
                self._add(name, p, startup)
            d = static_dir(spec)
            self._glob_dirs.add(d)
            self._watch(d)
        self._rediscover = False
        for disc in self.discoverers:
            disc(startup)

    def _discoverers_due(self, now: float) -> bool:
        """A discoverer's root changed (inotify), or one has something due (a pod to forget)."""
        if self._rediscover:
            return True
        for disc in self.discoverers:
            due = getattr(disc, "next_due", None)
            at = due() if due is not None else None
            if at is not None and at <= now:
                return True
        return False

    def add(self, name: str, path: str, startup: bool) -> None:
        """Tail ``path`` as source ``name`` (for discoverers, in the tailer thread)."""
        self._add(name, path, startup)

    def remove(self, path: str, finish: bool = False) -> None:
        """Stop tailing ``path`` and forget its position (for discoverers, in the tailer thread).
        ``finish``: the file is complete (its writer is gone): what is buffered is parsed and its
        last, unterminated line flushed first."""
        with self.lock:
            t = self.tailers.pop(os.path.abspath(path), None)
        if t is None:
            return
        if finish:
            self._guard(t, "finishing", t.finish)
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
                if looks_rotated(b, known) or not os.path.isfile(p):
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
                if self._trees and any(p.startswith(r + os.sep) for r in self._trees):
                    self._rediscover = True  # a pod, a container or a log came or went
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

    def watch_tree(self, root: str) -> None:
        """Watch ``root`` and everything below it with one inotify watch (one instance, whatever
        the number of directories: a node's /var/log/pods). Directories below it are not watched
        again one by one (each watch of its own would be an inotify instance: 128 per user)."""
        if self.observer is None or root in self._trees:
            return
        try:
            self.observer.schedule(self._handler, root, recursive=True)
            self._trees.append(root)
        except Exception as e:
            log.warning("cannot watch %s (%s); it is looked at every %.0fs instead", root, e, self.glob_interval)

    def _watch(self, d: str) -> None:
        if self.observer is None or not d or d in self.watched:
            return
        if any(d == r or d.startswith(r + os.sep) for r in self._trees):
            self.watched.add(d)
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
        park_idlest([t.active for t in self.tailers.values() if t.active is not None], self.open_fds, target)

    # loop ----------------------------------------------------------------------------------
    def start(self) -> None:
        soft = raise_nofile_limit()
        if self.fd_budget is None:
            self.fd_budget = budget(soft)
        if self.positions is not None:
            self.saved = self.positions.load()
            self.saved_at_ns = self.positions.saved_at_ns
        self._start_observer()
        for disc in self.discoverers:
            root = getattr(disc, "watch_root", None)
            if root:
                self.watch_tree(root)
        self._warm_until = time.monotonic() + self.warm_budget
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
            if not self.warm.is_set() and (not busy or time.monotonic() >= self._warm_until):
                self.warm.set()
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
            self._next_sweep = now + max(SWEEP_INTERVAL, len(self.tailers) * SWEEP_PER_FILE)
        for d in list(self.dirs.values()):
            if d.dirty or full:
                d.refresh()
        marked, att = self.marked, self._attention
        while marked:
            att.add(marked.popleft())
        self._attention = set()
        if full:
            work = list(self.tailers.values())
        else:
            work = sorted((t for t in att if self.tailers.get(t.path) is t), key=lambda t: t.seq)
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
            # a file still missing is looked for every tick (its directory may not exist to be watched)
            if t.busy() or t.active is None:
                self._attention.add(t)
        if self._created:
            created = []
            while self._created:
                created.append(self._created.popleft())
            self._match_created(created)
        if self.discoverers and self._discoverers_due(now):
            self._rediscover = False
            for disc in self.discoverers:
                disc(False)
        if now >= self._next_glob:
            # inotify: files created in a watched glob directory are added on their event; globbing
            # again is a safety net (sooner when the glob has wildcard directories, not watched)
            every = self.glob_interval if self._wild_dirs else 6 * self.glob_interval
            self._next_glob = now + (self.poll_interval if self.mode == "poll" else every)
            self._discover(startup=False)
            for t in list(self.tailers.values()):
                self._watch(os.path.dirname(t.path))
                self._watch(os.path.dirname(t.real))
        if self.fd_budget is not None and self.open_fds > self.fd_budget:
            self.make_room(self.fd_budget)
        if self.positions is not None and (now >= self._next_save or self._save_now):
            force, self._save_now = self._save_now, False
            self._next_save = now + self.positions_interval
            self.save(force=force)
        return more

    def request_save(self) -> None:
        """Write the positions file at the next cycle of the tailing thread (SIGHUP, SIGUSR1)."""
        self._save_now = True
        self._wake()

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

    def save(self, force: bool = True) -> bool:
        """Write the positions file (unless nothing it holds changed and ``force`` is off); False
        when the write failed (logged and counted)."""
        if self.positions is None:
            return True
        key = self._change_key()
        now = time.monotonic()
        if not force and key == self._saved_key and now < self._save_anyway:
            return True
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
            return self.positions.save(files, self.pipe, sorted({t.source for t in self.tailers.values()}), seen)
        except Exception:
            log.exception("cannot save positions")
            self.positions.write_errors += 1
            return False

    def ready(self) -> bool:
        return self.started and all(t.state in (OPEN, WAITING) for t in self.tailers.values())

    def stop(self) -> None:
        self.warm.set()
        with self.cond:
            self.stopping = True
            self.cond.notify()
        if self.thread is not None:
            self.thread.join(timeout=30)
        if self.observer is not None:
            with contextlib.suppress(Exception):
                self.observer.stop()
        if self.positions is not None:
            # said after the write, as it went (before: "the positions written" came before its error)
            if self.save():
                log.info("positions written to %s", self.positions.path)
            else:
                log.error(
                    "positions not written to %s at exit (the error is above): the next start resumes from the last positions written, "
                    "and counts the lines read since again",
                    self.positions.path,
                )
        for t in self.tailers.values():
            t.close()

    def snapshot(self) -> list[Tailer]:
        with self.lock:
            return list(self.tailers.values())
