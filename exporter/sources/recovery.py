"""The current boot, read back at start: the facts of the server's boot for the first scrape.

A server prints its capacity, caps, configuration and version once, when it boots. ``serve``
started on a log that already holds that boot (a sidecar restarted after an OOM kill, a rolling
update of the sidecar alone, the DaemonSet on a node whose pods already run) reads from the end,
so without this it would export none of those facts for the life of the server.

So when a file is first opened at an offset past its start and its source has said nothing yet
(no positions, a position without its saved facts, a pod that already runs), the newest boot
before that offset is found and read back, bounded:

1. **Find the boot.** A backwards scan for the last boot line: SGLang's ``server_args=`` dump,
   vLLM's ``Initializing ... LLM engine (v...)`` (its banner ``vLLM API server version`` and
   ``non-default args`` are printed just before it: the boot starts at the first of them within
   ``BOOT_SPAN`` before). The current file first, then its rotated copies, newest first
   (compressed ones decompressed), at most ``SCAN_MAX`` bytes in all. The engine, when not given,
   is told by the last lines before the offset, so only its marker is searched (one ``rfind`` per
   chunk: a 2 GB file whose boot is at its start costs about 1.2 s, docs/reliability.md).
2. **Read it back.** The boot section (``HEAD_BYTES`` from the boot's first line) and the newest
   lines before the offset (``TAIL_BYTES``: the last gauges, findings, what the lines prove) go,
   in order, through a *scratch* pipeline built like the real one; the lines between are skipped.
3. **Keep the facts, not the counts.** What that pipeline learnt is moved into the real one as a
   snapshot (exporter.state.snapshot, the same facts a ``--positions`` restart restores: capacity, caps,
   configuration, version, year, findings, recommendations, last gauges). Its counters are thrown
   away: the lines were written before the exporter started, and counting them now would show
   in ``rate()`` as a burst of lines that the server did not just write. How many lines were read
   back is the ``hybrid_cache_exporter_recovered_lines`` gauge.

The state reads the lines as replay does (a boot line after runtime lines is a restart), so the
facts recovered are those replay of the file reports, for a boot whose facts lie in its first
4 MiB; with no boot line found, what the newest 4 MiB say.
"""

from __future__ import annotations

import bz2
import gzip
import logging
import lzma
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from parsers import SGLANG, VLLM, parse_line

from ..reading.reader import Reader, file_year
from ..state.pipeline import Pipeline
from ..state.snapshot import capture, restore

log = logging.getLogger("hybrid_cache_exporter.tailer")

ANCHORS = {SGLANG: (b"server_args=",), VLLM: (b"LLM engine",)}
VLLM_CONFIRM = b"Initializing"  # the vLLM anchor counts only in 'Initializing a V1 LLM engine (v...)'
VLLM_BEFORE = (b"vLLM API server version", b"vLLM server version", b"non-default args")
BOOT_SPAN = 1 << 20  # how far before vLLM's engine line its banner and arguments may be
HEAD_BYTES = 4 << 20  # read from the boot's first line
TAIL_BYTES = 4 << 20  # read before the start offset
SCAN_MAX = 4 << 30  # bytes searched for the boot (files and rotated copies together)
SCAN_CHUNK = 4 << 20
DETECT_BYTES = 64 << 10  # the first bytes of a file: its container format, its engine
OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
DECOMPRESS_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)


@dataclass
class Recovered:
    """What one recovery did (logged, and ``lines`` exported)."""

    lines: int = 0
    boot: str | None = None  # 'path@offset' of the boot's first line, None when none was found
    scanned: int = 0  # bytes searched for it
    seconds: float = 0.0


class _Plain:
    """A plain file by descriptor (not owned)."""

    def __init__(self, path: str, fd: int, size: int) -> None:
        self.path, self.fd, self.size = path, fd, size

    def read(self, off: int, n: int) -> bytes:
        out = []
        while n > 0:
            b = os.pread(self.fd, min(n, SCAN_CHUNK), off)
            if not b:
                break
            out.append(b)
            off += len(b)
            n -= len(b)
        return b"".join(out)

    def last(self, anchors: tuple[bytes, ...], budget: int) -> tuple[int, int]:
        """(offset of the last anchor, bytes searched); -1 when none within ``budget`` bytes."""
        over = max(len(a) for a in anchors) - 1
        buf = bytearray(SCAN_CHUNK + over)
        pos, scanned = self.size, 0
        while pos > 0 and scanned < budget:
            lo = max(0, pos - SCAN_CHUNK)
            with memoryview(buf) as mv:
                n = os.preadv(self.fd, [mv[: min(pos + over, self.size) - lo]], lo)
            scanned += pos - lo
            k = _last_in(buf, n, anchors)
            if k >= 0:
                return lo + k, scanned
            pos = lo
        return -1, scanned


class _Compressed:
    """A compressed rotated copy, read through its decompressor (forward only)."""

    def __init__(self, path: str, opener) -> None:
        self.path, self.opener = path, opener

    def read(self, off: int, n: int) -> bytes:
        with self.opener(self.path, "rb") as z:
            while off > 0:
                k = len(z.read(min(off, SCAN_CHUNK)))
                if not k:
                    return b""
                off -= k
            return z.read(n)

    def last(self, anchors: tuple[bytes, ...], budget: int) -> tuple[int, int]:
        over = max(len(a) for a in anchors) - 1
        best, pos, keep = -1, 0, b""
        with self.opener(self.path, "rb") as z:
            while pos < budget:
                chunk = z.read(SCAN_CHUNK)
                if not chunk:
                    break
                data = keep + chunk
                k = _last_in(data, len(data), anchors)
                if k >= 0:
                    best = pos - len(keep) + k
                keep = data[-over:] if over else b""
                pos += len(chunk)
        return best, pos


def _last_in(buf, n: int, anchors: tuple[bytes, ...]) -> int:
    """The last anchor in ``buf[:n]`` (vLLM's only on its 'Initializing' line), or -1."""
    best = -1
    for a in anchors:
        end = n
        while True:
            k = buf.rfind(a, 0, end)
            if k < 0 or a != ANCHORS[VLLM][0]:
                break
            ls = buf.rfind(b"\n", 0, k) + 1
            if buf.find(VLLM_CONFIRM, ls, k) >= 0:
                break
            end = k  # 'LLM engine' in some other line: look before it
        best = max(best, k)
    return best


def _boot_start(f, at: int, engine: str | None) -> int:
    """The first line of the boot whose anchor is at ``at``: the anchor's line, or for vLLM its
    banner or arguments just before it."""
    lo = max(0, at - BOOT_SPAN)
    before = f.read(lo, at - lo)
    ls = before.rfind(b"\n") + 1
    start = lo + ls if ls or lo == 0 else at
    if engine != SGLANG:
        for m in VLLM_BEFORE:
            k = before.rfind(m, 0, ls)
            if k >= 0:
                start = min(start, lo + before.rfind(b"\n", 0, k) + 1)
    return start


def _engine_of(tail: bytes) -> str | None:
    """The engine of the last lines before the start offset (their headers tell it)."""
    r = Reader()
    r.detect_from(tail[:DETECT_BYTES])
    for line in reversed(r.feed(tail)[1:]):  # the first may be cut
        p = parse_line(line)
        if p.engine:
            return p.engine
    return None


def _lines(data: bytes, file_head: bytes, cut: bool, max_line: int) -> list[str]:
    """The complete lines of ``data`` (``cut``: it starts mid-line, its first piece is dropped)."""
    if cut:
        nl = data.find(b"\n")
        data = data[nl + 1 :] if nl >= 0 else b""
    r = Reader(max_line)
    r.detect_from(file_head)
    return r.feed(data)  # a last line without its newline is left out (it is read live)


def recover(
    pipe: Pipeline,
    make: Callable[[], Pipeline],
    source: str,
    path: str,
    fd: int,
    end: int,
    siblings: list[str],
    max_line: int,
) -> Recovered:
    """Read back the newest boot before offset ``end`` of the file open as ``fd`` (its rotated
    copies ``siblings`` too), through a scratch pipeline from ``make``; move its facts into
    ``pipe`` for ``source``. See the module docstring."""
    t0 = time.monotonic()
    out = Recovered()
    cur = _Plain(path, fd, end)
    engine = getattr(pipe, "engine", None) or _engine_of(cur.read(max(0, end - DETECT_BYTES), min(end, DETECT_BYTES)))
    anchors = ANCHORS[engine] if engine in ANCHORS else ANCHORS[SGLANG] + ANCHORS[VLLM]
    found, budget = None, SCAN_MAX
    opened: list[int] = []
    try:
        for f in _files(cur, siblings, opened):
            try:
                at, n = f.last(anchors, budget)
            except DECOMPRESS_ERRORS as e:
                log.info("%s: cannot search %s for the boot: %s", path, f.path, e)
                continue
            out.scanned += n
            budget -= n
            if at >= 0:
                found = (f, at)
                break
            if budget <= 0:
                break
        pieces = _pieces(cur, found, engine, end, out)
    finally:
        for d in opened:
            os.close(d)
    scratch = make()
    first = True
    for data, file_head, cut, file_mtime in pieces:
        lines = _lines(data, file_head, cut, max_line)
        if first and lines:
            scratch.source(source).year = file_year(lines, file_mtime, engine)
            first = False
        if lines:
            scratch.feed_lines(source, lines)
    scratch.finish()
    src = scratch.source(source)
    out.lines = sum(src.lines.values())
    snap = capture(scratch, source)
    if snap is not None:
        restore(pipe, source, snap)
    out.seconds = time.monotonic() - t0
    return out


def _pieces(cur: _Plain, found, engine: str | None, end: int, out: Recovered) -> list[tuple[bytes, bytes, bool, float]]:
    """What is read back, in order: (bytes, the first bytes of their file, whether they start
    mid-line, the file's modification time). The boot section, then the newest lines before
    ``end`` (one piece when they meet)."""
    tail_lo = max(0, end - TAIL_BYTES)
    cur_head = cur.read(0, DETECT_BYTES)
    mtime = _mtime(cur.fd)
    pieces = []
    if found is not None:
        f, at = found
        start = _boot_start(f, at, engine)
        out.boot = f"{f.path}@{start}"
        if f is cur and start >= tail_lo - HEAD_BYTES:
            return [(cur.read(start, end - start), cur_head, False, mtime)]
        head = f.read(start, HEAD_BYTES)
        pieces.append((head, head if start == 0 else f.read(0, DETECT_BYTES), False, mtime if f is cur else _path_mtime(f.path)))
        if f is cur:
            tail_lo = max(tail_lo, start + HEAD_BYTES)
    if end > tail_lo:
        pieces.append((cur.read(tail_lo, end - tail_lo), cur_head, tail_lo > 0, mtime))
    return pieces


def _files(cur: _Plain, siblings: list[str], opened: list[int]):
    """The current file, then its rotated copies newest first (a rename keeps the modification
    time, and so does gzip), as searchable files; descriptors opened go to ``opened``."""
    yield cur
    for p in sorted(siblings, key=_path_mtime, reverse=True):
        ext = os.path.splitext(p)[1]
        if ext in OPENERS:
            yield _Compressed(p, OPENERS[ext])
        elif ext not in (".zst", ".lz4", ".zip"):
            try:
                fd = os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                continue
            opened.append(fd)
            yield _Plain(p, fd, os.fstat(fd).st_size)


def _mtime(fd: int) -> float:
    try:
        return os.fstat(fd).st_mtime
    except OSError:
        return time.time()


def _path_mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
