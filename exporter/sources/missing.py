"""``--log`` paths that never appear (a typo, a volume not mounted): after ``--source-missing-after``
seconds such a path is a WARNING line (once), ``hybrid_cache_exporter_source_missing 1``, a row on
the landing page and a reason in ``/readyz``. Before that it is only "waiting", as a server that
has not started logging yet is normal.

Read from the tailers' public state (``state``, ``had_file``); the tailer itself keeps logging the
first "waiting" at INFO.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..reading.reader import source_name
from .directory import GLOB_CHARS
from .tailer import WAITING

log = logging.getLogger("hybrid_cache_exporter")


@dataclass
class Spec:
    source: str
    path: str  # absolute path or glob
    glob: bool
    warned: bool = False


class MissingPaths:
    def __init__(self, specs: list[tuple[str | None, str]], manager, after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.manager = manager
        self.after = after
        self.clock = clock
        self.started = clock()
        self.specs = [
            Spec(name or (spec if GLOB_CHARS.search(spec) else source_name(spec)), os.path.abspath(spec), bool(GLOB_CHARS.search(spec)))
            for name, spec in specs
        ]
        self._lock = threading.Lock()

    def _absent(self, s: Spec) -> bool:
        if s.glob:
            return not any(fnmatch.fnmatchcase(p, s.path) for p in list(self.manager.tailers))
        t = self.manager.tailers.get(s.path)
        return t is None or (t.state == WAITING and not t.had_file)

    def status(self) -> dict[str, bool]:
        """{source: missing} for every configured path; logs a WARNING when one becomes missing."""
        late = self.clock() - self.started >= self.after
        out: dict[str, bool] = {}
        with self._lock:
            for s in self.specs:
                missing = late and self._absent(s)
                if missing and not s.warned:
                    log.warning(
                        "%s: %s after %.0fs; check the --log path (source=%s)",
                        s.path,
                        "no file matches" if s.glob else "does not exist",
                        self.after,
                        s.source,
                    )
                elif s.warned and not missing:
                    log.info("%s: appeared (source=%s)", s.path, s.source)
                s.warned = missing
                out[s.source] = max(out.get(s.source, False), missing)
        return out

    def check(self, _startup: bool = False) -> None:
        """For ``Manager.discoverers``: the WARNING comes on time even when nobody scrapes."""
        self.status()

    def reasons(self) -> list[str]:
        st = self.status()
        return [f"{s.path}: not there after {self.after:.0f}s (source={s.source})" for s in self.specs if st.get(s.source) and s.warned]

    def rows(self) -> list[dict]:
        """Landing-page rows for globs that match nothing (a path's own row is its tailer's)."""
        st = self.status()
        return [
            {"source": s.source, "path": s.path, "engine": "", "state": f"missing (no match after {self.after:.0f}s)"}
            for s in self.specs
            if s.glob and st.get(s.source) and s.warned
        ]

    def missing_paths(self) -> set[str]:
        self.status()
        return {s.path for s in self.specs if s.warned and not s.glob}
