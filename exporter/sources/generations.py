"""Generations: what identifies one content a log path has held, wherever it turns up.

Each content a path has held is a :class:`Gen`, known by the inode it was read from and by its
first bytes (up to ``FP_LEN``), with the number of bytes of it already read (``consumed``). A copy
of a content (logrotate ``copy``/``copytruncate``, a ``.gz`` made later) starts with the same
bytes, so it is recognised as that generation wherever it turns up, and only what lies beyond
``consumed`` is ever read from it. This module holds that identity (and the names a rotated
generation takes, and how a compressed one is opened), apart from the readers and the loop that
use it: the tailer, the sibling handling and the positions file all compare generations the same
way.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import lzma
import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Protocol

from .positions import FP_MAX

FP_LEN = FP_MAX  # bytes of a generation's start that identify it
CHUNK = 1 << 20  # one read() call
GEN_HISTORY = 16  # finished generations remembered per path (their copies are recognised)
COPIES_PER_GEN = 8
MAX_SEEN = 1024  # siblings remembered as looked at, per path
COMPRESSED = re.compile(r"\.(gz|bz2|xz|zst|lz4|zip)$")
OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
COARSE_CLOCK_NS = 20_000_000  # file timestamps come from the kernel's coarse clock (one tick behind)
ROTATED_SUFFIX = re.compile(r"^[.-](\d+|\d{4}-?\d\d-?\d\d\S*)(\.(gz|bz2|xz|zst|lz4))?$|^\.(gz|bz2|xz|zst|lz4)$")
# logrotate ``extension .log``: the number or date goes before the extension (x.1.log, x-20260814.log)
ROTATED_INNER = re.compile(r"^(?:\.\d+|-\d{8,}(?:[-_]?\d+)*)(\.[^.]+)(\.(?:gz|bz2|xz|zst|lz4))?$")


def rotation_parents(name: str) -> list[str]:
    """The names ``name`` is a rotated generation of (``x.log.1``, ``x.log-20260814.gz`` ->
    ``x.log``; ``x.1.log``, ``x-20260814.log.gz`` -> ``x.log``)."""
    out = []
    for i in range(1, len(name)):
        if name[i] in ".-":
            rest = name[i:]
            if ROTATED_SUFFIX.match(rest):
                out.append(name[:i])
            m = ROTATED_INNER.match(rest)
            if m:
                out.append(name[:i] + m.group(1))
    return out


def looks_rotated(base: str, known: set[str]) -> bool:
    """Whether ``base`` is a rotated generation of a known name (one set lookup per separator)."""
    return any(p in known for p in rotation_parents(base))


def open_file(path: str) -> int:
    return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))


def sha(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


class OpenReader(Protocol):
    """What a generation needs of the reader that has it open (exporter.sources.filereader)."""

    def committed(self) -> int: ...


@dataclass(slots=True, eq=False)  # eq=False: a generation is itself, two with equal fields are not one
class Gen:
    """One content a path has held: where it was read from, its first bytes, how much was read.

    ``head`` (the bytes) is known for generations read by this process; generations loaded from
    the positions file carry only the SHA-1 and length of theirs. ``reader`` is the open reader
    while there is one (its descriptor is then the authority; copies are only remembered)."""

    head: bytes | None = b""
    consumed: int = 0
    dev: int = 0
    ino: int = 0
    fp: str = ""
    fp_len: int = 0
    reader: OpenReader | None = None
    copies: list[tuple[str, int]] = field(default_factory=list)  # (path, inode) of copies seen while it was read

    def ident(self) -> tuple[str, int]:
        if self.head is not None:
            return sha(self.head), len(self.head)
        return self.fp, self.fp_len

    def matches(self, cand: bytes) -> bool:
        """Whether content starting with ``cand`` (up to FP_LEN bytes) is this generation."""
        if self.head is not None:
            n = len(self.head)
            return n > 0 and len(cand) >= n and cand[:n] == self.head
        return self.fp_len > 0 and len(cand) >= self.fp_len and sha(cand[: self.fp_len]) == self.fp

    def entry(self) -> dict:
        fp, fp_len = self.ident()
        r = self.reader
        off = r.committed() if r is not None else self.consumed
        e = {"dev": self.dev, "ino": self.ino, "fp": fp, "fp_len": fp_len, "offset": off}
        if r is None:
            e["done"] = True
        return e


@contextlib.contextmanager
def zopen(fd: int, opener):
    """A decompressing reader over a copy of ``fd`` (a dup shares the offset: rewound first)."""
    with os.fdopen(os.dup(fd), "rb") as f:
        f.seek(0)
        with opener(f) as z:
            yield z


def compressed_head(fd: int, opener) -> tuple[bytes | None, int]:
    """First bytes and (for gzip, from its trailer) size of a compressed file; (None, 0) if it
    cannot be read yet."""
    try:
        with zopen(fd, opener) as z:
            head = z.read(FP_LEN)
    except (EOFError, OSError, lzma.LZMAError, zlib.error):
        return None, 0
    size = 1 << 62
    if opener is gzip.open:
        try:
            st = os.fstat(fd)
            if st.st_size >= 18 and st.st_size < 1 << 32:
                size = struct.unpack("<I", os.pread(fd, 4, st.st_size - 4))[0]
        except OSError:
            pass
    return head, size


def pread_iter(fd: int, pos: int):
    while True:
        chunk = os.pread(fd, CHUNK, pos)
        if not chunk:
            return
        pos += len(chunk)
        yield chunk


def skip_iter(z, skip: int):
    while skip > 0:
        n = len(z.read(min(skip, CHUNK)))
        if n == 0:
            return
        skip -= n
    while True:
        chunk = z.read(CHUNK)
        if not chunk:
            return
        yield chunk
