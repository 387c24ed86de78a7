"""The positions file: where each tailed file was read up to, so a restart resumes exactly there.

One JSON document, keyed by the path as given on the command line (globs: the matched path).
Each path maps to a list of file *generations*, oldest first: rotated files still being drained,
then the file currently at the path. A generation is identified by ``(dev, ino)`` plus the SHA-1
of its first ``fp_len`` bytes (up to 256), which tells a truncated-and-rewritten file or a reused
inode from the file that was read. ``offset`` is the byte offset just after the last *complete*
line fed to the pipeline, so a held partial line is read again after a restart, never half-counted.

The file is written atomically (temporary file, fsync, rename, fsync of the directory). A file that
cannot be parsed is reported (log + ``hybrid_cache_exporter_positions_corrupt_total``) and replaced
by the next write; it never stops the exporter.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading

log = logging.getLogger("hybrid_cache_exporter.positions")

VERSION = 1
FIELDS = ("dev", "ino", "fp", "fp_len", "offset")


def _valid_entry(e: object) -> bool:
    if not isinstance(e, dict):
        return False
    for k in ("dev", "ino", "fp_len", "offset"):
        v = e.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return False
    return isinstance(e.get("fp"), str)


class Positions:
    def __init__(self, path: str) -> None:
        self.path = path
        self.write_errors = 0
        self.corrupt = 0
        self.lock = threading.Lock()
        self._last: bytes | None = None

    def load(self) -> dict[str, list[dict]]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return {}
        except OSError as e:
            self.corrupt += 1
            log.error("positions file %s unreadable (%s): starting without positions; it will be replaced", self.path, e)
            return {}
        try:
            doc = json.loads(data.decode("utf-8"))
            if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(doc.get("files"), dict):
                raise ValueError("not a positions document")
            out: dict[str, list[dict]] = {}
            for path, entries in doc["files"].items():
                if not isinstance(entries, list) or not all(_valid_entry(e) for e in entries):
                    raise ValueError(f"bad entry for {path!r}")
                out[path] = [{k: e[k] for k in FIELDS} for e in entries]
            self._last = data
            return out
        except (ValueError, UnicodeDecodeError) as e:
            self.corrupt += 1
            log.error("positions file %s is corrupt (%s): starting without positions; it will be replaced", self.path, e)
            return {}

    def save(self, files: dict[str, list[dict]]) -> bool:
        data = json.dumps({"version": VERSION, "files": files}, sort_keys=True, separators=(",", ":")).encode()
        with self.lock:
            if data == self._last:
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
            self._last = data
            return True
