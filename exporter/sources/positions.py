"""The positions file: where each tailed file was read up to, so a restart resumes exactly there,
and what the log had said (``exporter.state.snapshot``), so a restart keeps it.

One JSON document, keyed by the path as given on the command line (globs: the matched path).
Each path maps to a list of file *generations*, oldest first: finished generations still
remembered (``"done": true``: their copies and compressed copies are recognised as read), rotated
files still being drained, then the file currently at the path. A generation is identified by
``(dev, ino)`` plus the SHA-1 of its first ``fp_len`` bytes (up to ``FP_MAX``), which tells a
truncated-and-rewritten file or a reused inode from the file that was read. ``offset`` is the byte
offset just after the last *complete* line fed to the pipeline, so a held partial line is read
again after a restart, never half-counted. ``seen`` lists, per path, the rotated siblings already
looked at (inode, modification time): after a restart, a sibling that is none of these and
continues no saved generation was rotated while the exporter was down and is read from its start.
(``saved_at_ns``, the save time, stands in for ``seen`` in files written before it existed.)

The file is written atomically (temporary file, fsync, rename, fsync of the directory). A file that
cannot be parsed is reported (log + ``hybrid_cache_exporter_positions_corrupt_total``) and replaced
by the next write, and every file is then read from its start (lines may be counted twice, none is
lost: the same rule as after SIGKILL). An entry that holds a value out of bounds (types, sizes,
fingerprint length) is rejected alone: its file is read from its start, the others resume. It
never stops the exporter.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time

log = logging.getLogger("hybrid_cache_exporter.positions")

VERSION = 1
FIELDS = ("dev", "ino", "fp", "fp_len", "offset")
FP_MAX = 256  # bytes of a generation's start in its fingerprint
MAX_FILE_BYTES = 64 << 20  # a positions file larger than this is not ours
MAX_ENTRIES = 64  # generations per path
MAX_SEEN = 1024  # siblings looked at, per path
U64 = 1 << 64
OFF_MAX = 1 << 63
SHA1 = re.compile(r"^[0-9a-f]{40}$")


def _int(v: object, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < hi


def valid_entry(e: object) -> bool:
    """Types and bounds of one generation entry (a hostile file must not reach the tailer)."""
    if not isinstance(e, dict):
        return False
    if not (_int(e.get("dev"), U64) and _int(e.get("ino"), U64) and _int(e.get("offset"), OFF_MAX)):
        return False
    if not _int(e.get("fp_len"), FP_MAX + 1):
        return False
    fp = e.get("fp")
    if not isinstance(fp, str) or not SHA1.match(fp):
        return False
    done = e.get("done", False)
    return isinstance(done, bool)


class Positions:
    def __init__(self, path: str) -> None:
        self.path = path
        self.write_errors = 0
        self.corrupt = 0
        self.lock = threading.Lock()
        self.saved_at_ns = 0
        self.state: dict = {}  # source name -> snapshot (exporter.state.snapshot), from the loaded file
        self.seen: dict[str, list[list[int]]] | None = None  # path -> [[inode, mtime_ns]] of siblings looked at
        self.rejected: set[str] = set()  # paths whose entries were rejected at load (read from the start)
        self.all_rejected = False  # the whole file was unusable (every file read from the start)
        self._last: bytes | None = None

    def load(self) -> dict[str, list[dict]]:
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
                st = os.fstat(f.fileno())
        except FileNotFoundError:
            return {}
        except OSError as e:
            self._reject_all(f"unreadable: {e}")
            return {}
        try:
            if len(data) > MAX_FILE_BYTES:
                raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
            doc = json.loads(data.decode("utf-8"))
            if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(doc.get("files"), dict):
                raise ValueError("not a positions document")
            seen = doc.get("seen")
            if seen is not None and not isinstance(seen, dict):
                raise ValueError("bad seen")
        except (ValueError, UnicodeDecodeError, RecursionError, MemoryError) as e:
            self._reject_all(str(e))
            return {}
        out: dict[str, list[dict]] = {}
        for path, entries in doc["files"].items():
            # one damaged entry costs its own path its position, never the others'
            if not isinstance(entries, list) or len(entries) > MAX_ENTRIES or not all(valid_entry(e) for e in entries):
                self._reject(path, "bad entry")
                continue
            out[path] = [{k: e[k] for k in FIELDS} | ({"done": True} if e.get("done") else {}) for e in entries]
        if seen is not None:
            good = {}
            for path, pairs in seen.items():
                if (
                    not isinstance(pairs, list)
                    or len(pairs) > MAX_SEEN
                    or not all(isinstance(p, list) and len(p) == 2 and _int(p[0], U64) and _int(p[1], OFF_MAX) for p in pairs)
                ):
                    self._reject(path, "bad seen entry")
                    out.pop(path, None)  # without its siblings looked at, its generations cannot be told apart
                    continue
                good[path] = pairs
            seen = good
        at = doc.get("saved_at_ns")
        self.saved_at_ns = at if _int(at, OFF_MAX) else st.st_mtime_ns
        self.seen = seen
        state = doc.get("state")
        self.state = state if isinstance(state, dict) else {}
        self._last = None  # the first save writes (with this process's save time)
        return out

    def _reject_all(self, why: str) -> None:
        self.corrupt += 1
        self.state = {}
        self.all_rejected = True
        log.error(
            "positions file %s is corrupt (%s): every file is read from its start (lines may be counted again); it will be replaced",
            self.path,
            why[:200],
        )

    def _reject(self, path: object, why: str) -> None:
        self.corrupt += 1
        key = str(path)[:4096]
        self.rejected.add(os.path.abspath(key) if key else key)
        log.error(
            "positions file %s: %s for %r rejected: that file is read from its start (lines may be counted again); the others resume",
            self.path,
            why,
            key[:200],
        )

    def unusable(self, path: str) -> bool:
        """Whether the saved position of ``path`` (an absolute path) was rejected at load, so the
        file is read from its start (at least once, like after SIGKILL) rather than from its end."""
        return self.all_rejected or path in self.rejected

    def restore_state(self, pipe, source: str) -> None:
        """Put back what the log had said for ``source`` (before any of its lines is read)."""
        snap = self.state.pop(source, None)
        if snap is None:
            return
        from ..state.snapshot import restore

        try:
            restore(pipe, source, snap)
        except Exception as e:  # a damaged snapshot costs the facts, never the exporter
            self.corrupt += 1
            log.error("positions file %s: the saved state of source %r is unusable (%s); starting without it", self.path, source, e)

    def save(self, files: dict[str, list[dict]], pipe=None, sources: list[str] | None = None, seen: dict | None = None) -> bool:
        doc: dict = {"version": VERSION, "files": files, "saved_at_ns": time.time_ns(), "seen": seen or {}}
        if pipe is not None and sources:
            from ..state.snapshot import capture

            doc["state"] = {s: capture(pipe, s) for s in sources}
            doc["state"] = {k: v for k, v in doc["state"].items() if v is not None}
        # the save time alone does not make a new write
        body = json.dumps({k: v for k, v in doc.items() if k != "saved_at_ns"}, sort_keys=True, separators=(",", ":")).encode()
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        with self.lock:
            if body == self._last:
                return True
            d = os.path.dirname(os.path.abspath(self.path))
            tmp = os.path.join(d, f".{os.path.basename(self.path)}.tmp.{os.getpid()}")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    view = memoryview(data)
                    while view:
                        n = os.write(fd, view)
                        view = view[n:]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, self.path)
                try:
                    dfd = os.open(d, os.O_RDONLY)
                    try:
                        os.fsync(dfd)
                    finally:
                        os.close(dfd)
                except OSError:
                    pass
            except OSError as e:
                self.write_errors += 1
                log.error("cannot write positions file %s: %s", self.path, e)
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                return False
            self._last = body
            return True
