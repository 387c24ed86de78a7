"""Directories of tailed files: one listing per directory, handed to the tailers it concerns.

A directory is listed (once per cycle, names and inode numbers only) when an entry in it was
created, moved or deleted (an inotify event) or at the safety sweep; each entry new since the last
listing goes to the tailer whose path it is, or whose rotated generation it looks like. Also the
glob helpers discovery uses (which directory a glob can be watched at).
"""

from __future__ import annotations

import bisect
import os
import re

from .generations import rotation_parents
from .tailer import Tailer

GLOB_CHARS = re.compile(r"[*?\[]")


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


def static_dir(pattern: str) -> str:
    """The longest directory prefix of a glob without wildcards."""
    parts = os.path.abspath(pattern).split(os.sep)
    out = []
    for p in parts[:-1]:
        if GLOB_CHARS.search(p):
            break
        out.append(p)
    return os.sep.join(out) or os.sep
