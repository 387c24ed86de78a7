"""DaemonSet mode (``serve --kubernetes-pods /var/log/pods``): one exporter per node reads the
logs of the inference pods on that node, and tells them apart by ``namespace``, ``pod`` and
``container`` taken from the kubelet's log layout::

    /var/log/pods/<namespace>_<pod>_<pod uid>/<container>/<restart count>.log

Only the newest ``<n>.log`` of a container is read (the kubelet keeps the previous container's
for ``kubectl logs --previous``; reading both would interleave two servers' lines); when the
container restarts the next file takes over the same source, so the exporter sees a server
restart. The number of sources is bounded (``max_sources``; the containers beyond are counted in
``hybrid_cache_exporter_sources_over_limit``, not read), and a source whose pod's logs are gone is
forgotten, series and all, ``forget_after`` seconds later (so a deleted pod's last values do not
linger; the delay lets the last scrapes see them).

The scan runs in the tailer thread (``Manager.discoverers``) at the glob interval.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

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
    found: dict[str, ContainerLog] = {}
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
            best: tuple[int, str] | None = None
            try:
                for f in os.scandir(cd.path):
                    fm = LOG_FILE.match(f.name)
                    if fm and (best is None or int(fm[1]) > best[0]):
                        best = (int(fm[1]), f.path)
            except OSError:
                continue
            if best is None:
                continue
            try:
                mtime = os.stat(best[1]).st_mtime
            except OSError:
                continue
            c = ContainerLog(m["namespace"], m["pod"], cd.name, best[1], mtime)
            old = found.get(c.source)
            if old is None or c.mtime > old.mtime:
                found[c.source] = c
    return found


@dataclass
class Tracked:
    log: ContainerLog
    gone_since: float | None = None


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
        self.retiring: list[str] = []  # logs of restarted containers, removed once read to the end

    def labels(self) -> dict[str, dict[str, str]]:
        """namespace/pod/container of every source being read (or still remembered)."""
        return self._labels

    def __call__(self, startup: bool) -> None:
        now = self.clock()
        found = scan(self.root, self.include)
        keep = []
        for p in self.retiring:
            t = self.manager.tailers.get(os.path.abspath(p))
            if t is not None and t.lag() > 0:
                keep.append(p)
            else:
                self.manager.remove(p)
        self.retiring = keep
        for source, t in list(self.tracked.items()):
            cur = found.pop(source, None)
            if cur is None:
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
            if cur.path != t.log.path:  # the container restarted: <n+1>.log
                log.info("%s: container restarted, now reading %s", source, cur.path)
                self.manager.add(source, cur.path, False)  # all of it is new
                self.retiring.append(t.log.path)  # the old container's last lines are read first
                t.log = cur
        over = 0
        for source in sorted(found):
            if len(self.tracked) >= self.max_sources:
                over += 1
                continue
            c = found[source]
            self.tracked[source] = Tracked(c)
            self.manager.add(source, c.path, startup)
            log.info("%s: reading %s", source, c.path)
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
