"""DaemonSet mode (``serve --kubernetes-pods /var/log/pods``): one exporter per node reads the
logs of the inference pods on that node, and tells them apart by ``namespace``, ``pod`` and
``container`` taken from the kubelet's log layout::

    /var/log/pods/<namespace>_<pod>_<pod uid>/<container>/<restart count>.log

Every generation the kubelet keeps is read, one after the other, as one source: the ``<n>.log``
of each container start (the kubelet keeps the previous one for ``kubectl logs --previous``),
oldest first, each once the one before is read to its end (the container that wrote it is dead),
so two servers' lines never interleave and the exporter sees a server restart. A container that
crash-looped between two looks therefore has its earlier log (with the boot failure) read too.
For pods already running when the exporter starts only the current ``<n>.log`` is read (from its
end, its current boot read back: exporter.sources.recovery), or all of them, oldest first, with
``--from-beginning``. The number of sources is bounded (``max_sources``; the containers beyond are
counted in ``hybrid_cache_exporter_sources_over_limit``, not read), and a source whose pod's logs
are gone is forgotten, series and all, ``forget_after`` seconds later (so a deleted pod's last
values do not linger; the delay lets the last scrapes see them).

The scan runs in the tailer thread (``Manager.discoverers``): when an entry under the root is
created, moved or deleted (one recursive inotify watch on the root, ``watch_root``), when a
forgotten pod is due (``next_due``), and at the glob interval as a safety net.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("hybrid_cache_exporter.kubernetes")

POD_DIR = re.compile(r"^(?P<namespace>[a-z0-9][a-z0-9-]*)_(?P<pod>[a-z0-9][a-z0-9.-]*)_(?P<uid>[0-9a-fA-F-]+)$")
LOG_FILE = re.compile(r"^(\d+)\.log$")


@dataclass(frozen=True)
class ContainerLog:
    namespace: str
    pod: str
    container: str
    path: str
    mtime: float

    @property
    def source(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container}"

    def labels(self) -> dict[str, str]:
        return {"namespace": self.namespace, "pod": self.pod, "container": self.container}


def parse_path(path: str) -> tuple[str, str, str] | None:
    """(namespace, pod, container) of a kubelet log path, or None when it is not one."""
    parts = os.path.normpath(path).split(os.sep)
    if len(parts) < 3 or not LOG_FILE.match(parts[-1]):
        return None
    m = POD_DIR.match(parts[-3])
    if m is None:
        return None
    return m["namespace"], m["pod"], parts[-2]


def scan(root: str, include: re.Pattern | None = None) -> dict[str, ContainerLog]:
    """The current log of every container under ``root`` (newest restart; a pod name reused by a
    new pod uid: the most recently written), by source name."""
    return {src: gens[-1] for src, gens in generations(root, include).items()}


def generations(root: str, include: re.Pattern | None = None) -> dict[str, list[ContainerLog]]:
    """Every ``<n>.log`` of every container under ``root``, oldest start first, by source name (a
    pod name reused by a new pod uid: the pod directory most recently written)."""
    found: dict[str, list[ContainerLog]] = {}
    try:
        pods = list(os.scandir(root))
    except OSError:
        return found
    for pd in pods:
        m = POD_DIR.match(pd.name)
        if m is None or not pd.is_dir(follow_symlinks=False):
            continue
        try:
            containers = list(os.scandir(pd.path))
        except OSError:
            continue
        for cd in containers:
            if not cd.is_dir(follow_symlinks=False):
                continue
            if include is not None and not include.search(f"{m['namespace']}/{m['pod']}/{cd.name}"):
                continue
            logs: list[tuple[int, str, float]] = []
            try:
                for f in os.scandir(cd.path):
                    fm = LOG_FILE.match(f.name)
                    if fm:
                        try:
                            logs.append((int(fm[1]), f.path, f.stat().st_mtime))
                        except OSError:
                            continue
            except OSError:
                continue
            if not logs:
                continue
            gens = [ContainerLog(m["namespace"], m["pod"], cd.name, p, mt) for _, p, mt in sorted(logs)]
            old = found.get(gens[0].source)
            if old is None or gens[-1].mtime > old[-1].mtime:
                found[gens[0].source] = gens
    return found


@dataclass
class Tracked:
    log: ContainerLog  # the generation being read
    gone_since: float | None = None
    queue: list[str] = field(default_factory=list)  # later generations, read after it, in order


class PodLogs:
    """Keeps the tailer's set of files equal to the current container logs under ``root``."""

    def __init__(
        self,
        root: str,
        manager,
        forget: Callable[[str], None],
        *,
        max_sources: int = 100,
        forget_after: float = 600.0,
        include: re.Pattern | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.watch_root = os.path.abspath(root)  # the manager watches it recursively (inotify)
        self.manager = manager
        self.forget = forget  # drops a source's state (and so its series) from the pipeline
        self.max_sources = max_sources
        self.forget_after = forget_after
        self.include = include
        self.clock = clock
        self.tracked: dict[str, Tracked] = {}
        self.over_limit = 0
        self._labels: dict[str, dict[str, str]] = {}
        self._warned_limit = False

    def labels(self) -> dict[str, dict[str, str]]:
        """namespace/pod/container of every source being read (or still remembered)."""
        return self._labels

    def next_due(self) -> float | None:
        """When to be called back: a pod whose logs are gone is due to be forgotten, or a
        container's next generation waits for the one being read to end (looked at each cycle)."""
        if any(t.queue for t in self.tracked.values()):
            return 0.0  # due now (a time before any the manager compares it with)
        due = [t.gone_since + self.forget_after for t in self.tracked.values() if t.gone_since is not None]
        return min(due) if due else None

    def _drained(self, path: str) -> bool:
        """Whether the file being read was read to its end (its container is dead: a later one
        started), so the next generation may take over. A file not opened yet is not."""
        t = self.manager.tailers.get(os.path.abspath(path))
        if t is None:
            return True
        if not t.had_file:
            return not os.path.exists(path)  # gone before it could be opened
        a = t.active
        return not t.retired and not t.pending and (a is None or (a.fd >= 0 and a.buf_len == 0 and a.read_pos >= a.size))

    def __call__(self, startup: bool) -> None:
        now = self.clock()
        found = generations(self.root, self.include)
        for source, t in list(self.tracked.items()):
            gens = found.pop(source, None)
            if gens is None:
                if t.gone_since is None:
                    t.gone_since = now
                    log.info("%s: its logs are gone; forgetting it in %.0fs", source, self.forget_after)
                elif now - t.gone_since >= self.forget_after:
                    self.manager.remove(t.log.path)
                    self.forget(source)
                    del self.tracked[source]
                    log.info("%s: forgotten (logs gone for %.0fs)", source, now - t.gone_since)
                continue
            t.gone_since = None
            cur = _restart_count(t.log.path)
            for g in gens:  # new starts of the container, in order
                if _restart_count(g.path) > cur and g.path not in t.queue:
                    t.queue.append(g.path)
            # one generation at a time: the next once this one is read to its end (next_due
            # brings the manager back each cycle while one waits)
            while t.queue and self._drained(t.log.path):
                nxt = t.queue.pop(0)
                if not os.path.exists(nxt):
                    continue  # deleted before it could be read (the kubelet keeps two)
                self.manager.remove(t.log.path, finish=True)  # its last, unterminated line too
                log.info("%s: container restarted, now reading %s", source, nxt)
                self.manager.add(source, nxt, False)  # all of it is new
                t.log = next(g for g in gens if g.path == nxt)
                break
        over = 0
        for source in sorted(found):
            if len(self.tracked) >= self.max_sources:
                over += 1
                continue
            gens = found[source]
            # a pod already running at the start: its current log (from the end unless
            # --from-beginning); a pod that appears later: every generation, oldest first
            every = not startup or getattr(self.manager, "from_beginning", False)
            first = gens[0] if every else gens[-1]
            t = self.tracked[source] = Tracked(first, queue=[g.path for g in gens[1:]] if every else [])
            self.manager.add(source, first.path, startup)
            log.info("%s: reading %s%s", source, first.path, f" (then {len(t.queue)} later start(s))" if t.queue else "")
        if over and not self._warned_limit:
            log.warning(
                "%d container log(s) under %s not read: --kubernetes-max-sources %d reached (narrow --kubernetes-include?)",
                over,
                self.root,
                self.max_sources,
            )
        self._warned_limit = bool(over)
        self.over_limit = over
        self._labels = {s: t.log.labels() for s, t in self.tracked.items()}


def _restart_count(path: str) -> int:
    m = LOG_FILE.match(os.path.basename(path))
    return int(m[1]) if m else -1
