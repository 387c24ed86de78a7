"""The one reading layer: bytes of a log -> the lines the pipeline parses.

Every entry point reads through :class:`Reader` (``replay``, ``report``, ``serve``'s tailers and
``--log -``), so they all see the same lines for the same bytes, whatever the read chunking.

API::

    r = Reader(max_line=DEFAULT_MAX_LINE)   # format detected from the first line
    lines = r.feed(chunk)        # the complete lines in the bytes so far (list of str)
    text = r.feed_text(chunk)    # the same lines as one block, each ending in '\\n' ('' if none)
    lines = r.flush()            # at the end of a finished input: what was held back
    r.pending                    # bytes fed but not returned yet: offset of the next line to
                                 # parse = bytes fed - r.pending (what positions save)
    r.fmt, r.overlong            # 'plain' / 'docker' / 'cri' (None until the first line); cut lines
    r.detect_from(head)          # a reader starting mid-file: the format from the file's first bytes

    open_log(path)               # binary file object: '-' = stdin; gzip, bzip2, xz read transparently
    read_blocks(path) / read_chunks(path) / read_lines(path)   # a whole file through a Reader
    order_generations(paths)     # [(source name, paths oldest first)]: a log and its rotated generations
    replay_files(pipe, paths, source)   # what replay and report do (generations, errors, warnings)

What a line is:

* Plain files: a line ends at ``\\n``; a partial last line is held until its newline (or ``flush``).
* Container formats (:mod:`exporter.container`): records are decoded, Docker records
  without a final ``\\n`` and CRI ``P`` records are joined with the following ones into one
  message. The record time is kept: a message that does not start with an SGLang header (which
  carries its own time) is handed on as ``<record time> <stream> F <message>``, the CRI form the
  parsers' collector-prefix stripping reads the time from (vLLM's year, lines without a header).
  A joined message carries the time of its first record.
* A line (a joined message) longer than ``max_line`` bytes is cut to that length and counted in
  ``overlong``; memory stays bounded however long a line without newline grows.
* Invalid UTF-8 is replaced, never raises.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import BinaryIO

from parsers import parse_line
from parsers.prefix import SGLANG_HEADER_RE

from .container import CRI, DOCKER, PLAIN, Record, detect, record_parser
from .lines import DEFAULT_MAX_LINE, LineSplitter

CHUNK = 1 << 20
DETECT_MAX = 1 << 16  # a first line longer than this is classified from its start
_BOM = b"\xef\xbb\xbf"
RECORD_SLACK = 1 << 16  # room for the container wrapping around a message of max_line bytes

__all__ = [
    "CHUNK",
    "DEFAULT_MAX_LINE",
    "PLAIN",
    "DOCKER",
    "CRI",
    "Reader",
    "open_log",
    "read_blocks",
    "read_chunks",
    "read_lines",
    "lines_of",
    "generation_of",
    "order_generations",
    "replay_files",
    "source_name",
]


class Reader:
    """Bytes -> lines for one input (one file generation, or stdin). See the module docstring."""

    __slots__ = (
        "max_line",
        "fmt",
        "splitter",
        "_head",
        "_buf",
        "_skip",
        "_parts",
        "_parts_len",
        "_part_bytes",
        "_first",
        "_cut",
        "_record",
        "_overlong",
    )

    def __init__(self, max_line: int = DEFAULT_MAX_LINE, fmt: str | None = None) -> None:
        self.max_line = max_line
        self.fmt: str | None = None
        self.splitter = LineSplitter(max_line)
        self._head = b""  # bytes held before the format is known
        self._buf = b""  # container formats: the raw record without its newline yet
        self._skip = False  # container formats: inside the unseen tail of an overlong record
        self._parts: list[bytes] = []  # messages of the records of an unfinished message
        self._parts_len = 0
        self._part_bytes = 0  # raw bytes (with newlines) of those records
        self._first: Record | None = None  # the first record of the unfinished message
        self._cut = False
        self._record = None
        self._overlong = 0
        if fmt is not None:
            self._set_fmt(fmt)

    # format --------------------------------------------------------------------------------
    def _set_fmt(self, fmt: str) -> None:
        self.fmt = fmt
        self._record = record_parser(fmt)

    def detect_from(self, head: bytes) -> None:
        """Decide the format from the first bytes of the file (for a reader that starts mid-file)."""
        nl = head.find(b"\n")
        self._set_fmt(detect(head if nl < 0 else head[:nl]))

    # counters ------------------------------------------------------------------------------
    @property
    def overlong(self) -> int:
        return self.splitter.overlong + self._overlong

    @property
    def pending(self) -> int:
        """Bytes fed but not returned as complete lines yet."""
        if self.fmt is None:
            return len(self._head)
        if self._record is None:
            return self.splitter.pending
        return len(self._buf) + self._part_bytes

    # feeding -------------------------------------------------------------------------------
    def _detect(self, chunk: bytes) -> bytes | None:
        """Hold bytes until the first line is complete; then the bytes to feed (None: still held)."""
        data = self._head + chunk
        nl = data.find(b"\n")
        if nl < 0 and len(data) < DETECT_MAX:
            self._head = data
            return None
        self._head = b""
        if data.startswith(_BOM):  # a byte-order mark is not part of the first line
            data = data[3:]
            nl -= 3
        self._set_fmt(detect(data[: nl if nl >= 0 else DETECT_MAX]))
        return data

    def feed(self, chunk: bytes) -> list[str]:
        if self.fmt is None:
            chunk = self._detect(chunk)
            if chunk is None:
                return []
        if self._record is None:
            return self.splitter.feed(chunk)
        return self._feed_records(chunk)

    def feed_text(self, chunk: bytes) -> str:
        """Like :meth:`feed`, as one block of lines each ending in ``\\n`` (``''`` if none): ``replay``
        scans a plain block without splitting it into a list first."""
        if self.fmt is None:
            chunk = self._detect(chunk)
            if chunk is None:
                return ""
        if self._record is None:
            return self.splitter.feed_text(chunk)
        lines = self._feed_records(chunk)
        return "\n".join(lines) + "\n" if lines else ""

    def flush(self) -> list[str]:
        """The end of a finished input: the held partial line (or unfinished message), if any."""
        if self.fmt is None:
            if not self._head:
                return []
            data, self._head = self._head, b""
            if data.startswith(_BOM):
                data = data[3:]
            self._set_fmt(detect(data))
            self.feed(data)  # no newline in it: nothing comes out before the flush
        if self._record is None:
            last = self.splitter.flush()
            return [] if last is None else [last]
        out: list[str] = []
        raw, self._buf = self._buf, b""
        skip, self._skip = self._skip, False
        if raw and not skip:
            self._one(raw, out)
        self._join(out)
        return out

    # container records ---------------------------------------------------------------------
    def _feed_records(self, chunk: bytes) -> list[str]:
        data = self._buf + chunk if self._buf else chunk
        nl = data.rfind(b"\n")
        out: list[str] = []
        if nl >= 0:
            self._buf = data[nl + 1 :]
            raws = data[:nl].split(b"\n")
            if self._skip:
                self._skip = False
                del raws[0]  # the unseen tail of an overlong record
            one = self._one
            for raw in raws:
                one(raw, out)
        else:
            self._buf = data
        if len(self._buf) > self.max_line + RECORD_SLACK:
            # a record without newline beyond any real one: keep its head as a line, drop the rest
            if not self._skip:
                self._overlong += 1
                self._join(out)
                out.append(self._buf[: self.max_line].decode("utf-8", "replace"))
            self._skip = True
            self._buf = b""
        return out

    def _one(self, raw: bytes, out: list[str]) -> None:
        rec = self._record(raw)
        if rec is None:  # not a record of the format: a plain line, in order
            self._join(out)
            if len(raw) > self.max_line:
                self._overlong += 1
                raw = raw[: self.max_line]
            out.append(raw.decode("utf-8", "replace"))
            return
        if not rec.final:
            if self._first is None:
                self._first = rec
            self._add(rec.msg)
            self._part_bytes += len(raw) + 1
            return
        if self._first is None:  # the usual case: a whole message in one record
            msg = rec.msg
            if len(msg) > self.max_line:
                self._overlong += 1
                msg = msg[: self.max_line]
            self._emit(msg.decode("utf-8", "replace"), rec, out)
            return
        self._add(rec.msg)
        self._join(out)

    def _add(self, msg: bytes) -> None:
        room = self.max_line - self._parts_len
        if len(msg) > room:
            self._cut = True
            msg = msg[: max(room, 0)]
        if msg:
            self._parts.append(msg)
            self._parts_len += len(msg)

    def _join(self, out: list[str]) -> None:
        """Hand on the unfinished message (complete now, or ended by a non-record line / EOF)."""
        first = self._first
        if first is None:
            return
        msg = b"".join(self._parts).decode("utf-8", "replace")
        if self._cut:
            self._overlong += 1
        self._parts, self._parts_len, self._part_bytes, self._first, self._cut = [], 0, 0, None, False
        self._emit(msg, first, out)

    @staticmethod
    def _emit(msg: str, rec: Record, out: list[str]) -> None:
        t = rec.time
        for part in msg.split("\n") if "\n" in msg else (msg,):
            if t is None or not part or SGLANG_HEADER_RE.match(part):
                out.append(part)
            else:
                out.append(f"{t} {rec.stream} F {part}")


# ----------------------------------------------------------------------------------------
# whole files (replay, report)


def open_log(path: str) -> BinaryIO:
    """A binary file object for ``path`` (``-`` = stdin). Compressed files are recognised by their
    magic bytes, whatever the name: gzip, bzip2 and xz are decompressed transparently; zstd and lz4
    (no decoder in the standard library) raise ``OSError`` with a clear message."""
    if path == "-":
        return sys.stdin.buffer
    f = open(path, "rb")  # noqa: SIM115 - the caller closes it
    try:
        magic = f.peek(6)[:6] if isinstance(f, io.BufferedReader) else b""
    except OSError:
        magic = b""
    if magic[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    if magic[:3] == b"BZh":
        return bz2.BZ2File(f)  # type: ignore[return-value]
    if magic == b"\xfd7zXZ\x00":
        return lzma.LZMAFile(f)  # type: ignore[return-value]
    for sig, what in ((b"\x28\xb5\x2f\xfd", "zstd"), (b"\x04\x22\x4d\x18", "lz4")):
        if magic[:4] == sig:
            f.close()
            raise OSError(f"compressed with {what}, which this tool cannot read: decompress it first")
    return f


def _close(f: BinaryIO) -> None:
    if f is sys.stdin.buffer:
        return
    f.close()
    inner = getattr(f, "fileobj", None) or getattr(f, "_fp", None)
    if inner is not None and hasattr(inner, "close"):
        inner.close()


def read_blocks(path: str, reader: Reader | None = None, flush: bool = True, nbytes: list[int] | None = None) -> Iterator[str]:
    """The lines of a file (or ``-`` for stdin) as blocks of text, one per large binary read, each
    line ending in ``\\n``. ``flush=False`` keeps a last partial line in ``reader`` (the next
    generation of the same log continues it); ``nbytes[0]`` counts the bytes read."""
    r = reader or Reader()
    f = open_log(path)
    try:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            if nbytes is not None:
                nbytes[0] += len(chunk)
            text = r.feed_text(chunk)
            if text:
                yield text
        rest = r.flush() if flush else None
        if rest:
            yield "\n".join(rest) + "\n"
    finally:
        _close(f)


def read_chunks(path: str, reader: Reader | None = None) -> Iterator[list[str]]:
    """The lines of a file (or ``-`` for stdin), a list per large binary read."""
    for text in read_blocks(path, reader):
        yield text[:-1].split("\n")


def read_lines(path: str) -> Iterator[str]:
    """All lines of a file (or ``-`` for stdin)."""
    for lines in read_chunks(path):
        yield from lines


def lines_of(data: bytes, chunks: Iterable[int] | None = None, max_line: int = DEFAULT_MAX_LINE) -> list[str]:
    """All lines of ``data`` through one Reader, fed in pieces of the given sizes (tests, tools)."""
    r = Reader(max_line)
    out: list[str] = []
    pos = 0
    for n in chunks or ():
        out += r.feed(data[pos : pos + n])
        pos += n
    out += r.feed(data[pos:])
    out += r.flush()
    return out


def source_name(path: str) -> str:
    """Default ``source`` label: the file name without directory and extension."""
    if path == "-":
        return "stdin"
    base = os.path.basename(path.rstrip("/"))
    stem = os.path.splitext(base)[0]  # 'v0.5.10.log' -> 'v0.5.10', not 'v0'
    return stem or base or path


# ----------------------------------------------------------------------------------------
# offline files as users have them: rotated generations, compressed, in any order

# a rotated generation's suffix: '.1', '.2', '-20260814', '.2026-08-14', '-20260814-1723456789',
# then maybe a compression extension
_GEN_RE = re.compile(
    r"^(?P<base>.+?)(?P<gen>[.-](?:\d{1,4}|\d{8}(?:[-_]?\d{2,10})?|\d{4}-\d\d-\d\d(?:[-_T]\d\d(?::?\d\d){0,2})?))?"
    r"(?P<z>\.(?:gz|bz2|xz|zst|lz4))?$"
)
LOG_EXTENSIONS = (".log", ".out", ".err", ".txt", ".json", ".jsonl")
PRESCAN_BYTES = 16 << 20  # how far a file is read to find its first timestamp (the rest is fed anyway)


@dataclass
class Generation:
    """One file given to replay/report, as a generation of a log."""

    path: str
    base: str  # the log it is a generation of (the path without rotation/compression suffixes)
    age: tuple  # from the name: the live file is newest, '.1' before it, '.2' before that, dates by date
    first_ts: float | None = None  # first log timestamp in it (None: none in its first 16 MiB)
    engine: str | None = None  # the engine of its first line with an engine header
    head: bytes = b""  # its first 64 KiB (decompressed): tells a copy from a generation


def generation_of(path: str) -> tuple[str, tuple]:
    """``(base path, age key)``: ``/x/server.log.2.gz`` -> (``/x/server.log``, ...). Names that do
    not look rotated are their own base (a ``v0.5.10`` file is not generation 10 of ``v0.5``: a
    suffix counts only after a log-like name such as ``*.log``)."""
    d, name = os.path.split(path)
    m = _GEN_RE.match(name)
    if m is None or not (m.group("gen") or m.group("z")):
        return path, (1, 0, "")  # the live file: newest
    base = m.group("base")
    if m.group("gen") and not base.lower().endswith(LOG_EXTENSIONS):
        if not m.group("z"):
            return path, (1, 0, "")
        base = name[: m.start("z")]  # 'x.2.gz' of an unknown name: only the compression is stripped
        return os.path.join(d, base), (0, 0, "")
    gen = (m.group("gen") or "")[1:]
    if not gen:
        return os.path.join(d, base), (0, 0, "")  # 'server.log.gz': older than the live file
    if len(gen) <= 4 and gen.isdigit():
        return os.path.join(d, base), (0, -int(gen), "")  # '.1' is newer than '.2'
    return os.path.join(d, base), (0, 1, gen)  # dates: older first


HEAD_BYTES = 65536


def _scan_head(g: Generation, engine: str | None) -> None:
    """The first timestamp and engine of a file, and its first ``HEAD_BYTES`` (decompressed)."""
    f = open_log(g.path)
    try:
        g.head = f.read(HEAD_BYTES)
    finally:
        _close(f)
    year = time.localtime().tm_year
    seen = 0
    with closing(read_blocks(g.path)) as blocks:
        for text in blocks:
            seen += len(text)
            for line in text[:-1].split("\n"):
                p = parse_line(line, engine, year)
                if p.engine and g.engine is None:
                    g.engine = p.engine
                if p.ts is not None and (p.engine or g.engine):
                    g.first_ts = p.ts
                    return
            if seen >= PRESCAN_BYTES:
                return


def _length(path: str) -> int:
    n = 0
    f = open_log(path)
    try:
        while chunk := f.read(CHUNK):
            n += len(chunk)
    finally:
        _close(f)
    return n


def order_generations(paths: list[str], engine: str | None = None, err=sys.stderr) -> list[tuple[str, list[str]]]:
    """Group the given files into logs (a log and its rotated generations, compressed or not) and
    order each log's generations oldest first: by their first log timestamp when every generation
    has one, else by name (``.2`` before ``.1`` before the live file, dates by date). A generation
    given twice (the same first 64 KiB: ``server.log.1`` and ``server.log.1.gz``, or a ``copy``
    that the live file continues) is read once, the longest. Returns ``[(source name, paths)]`` in
    the order the logs were first named; unreadable paths are kept (the caller reports them)."""
    groups: dict[str, list[Generation]] = {}
    for p in paths:
        if p == "-" or os.path.isdir(p):
            groups.setdefault(p + "\0" + str(len(groups)), []).append(Generation(p, p, (1, 0, "")))
            continue
        base, age = generation_of(p)
        groups.setdefault(base, []).append(Generation(p, base, age))
    out: list[tuple[str, list[str]]] = []
    for key, gens in groups.items():
        base = gens[0].base
        if len(gens) > 1:
            for g in gens:
                try:
                    _scan_head(g, engine)
                except (OSError, EOFError, ValueError, lzma.LZMAError):
                    g.head = b""  # reported when it is fed
            gens = _dedup(gens, err)
            if all(g.first_ts is not None for g in gens):
                gens.sort(key=lambda g: (g.first_ts, g.age))
            else:
                gens.sort(key=lambda g: g.age)
        out.append((source_name(base) if "\0" not in key else source_name(gens[0].path), [g.path for g in gens]))
    return _distinct_names(out)


def _distinct_names(logs: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """Two different logs never share a source. Names that clash take the whole file name first
    (``v0.5.10`` and ``v0.5.11``, both ``v0.5`` by stem), then their parent folders until they
    differ (``a/server.log`` and ``b/server.log``: ``a/server`` and ``b/server``); before this,
    an SGLang and a vLLM log of one file name were fed into one source."""
    names = [n for n, _ in logs]

    def clashing() -> set[str]:
        return {n for n in names if names.count(n) > 1}

    clash = clashing()
    for i, (_, members) in enumerate(logs):
        if names[i] in clash and members[0] != "-":
            whole = os.path.basename(generation_of(members[0])[0].rstrip("/"))
            if (
                sum(
                    1
                    for j, (_, m) in enumerate(logs)
                    if names[j] == names[i] and m[0] != "-" and os.path.basename(generation_of(m[0])[0]) == whole
                )
                == 1
            ):
                names[i] = whole
    depth = [0] * len(logs)
    while clash := clashing():
        grew = False
        for i, (_, members) in enumerate(logs):
            parts = os.path.normpath(os.path.abspath(members[0])).split(os.sep)[:-1]
            if names[i] in clash and depth[i] < len(parts) and parts[-1 - depth[i]]:
                names[i] = parts[-1 - depth[i]] + "/" + names[i]
                depth[i] += 1
                grew = True
        if not grew:  # the same path given twice as two logs: number them
            seen: dict[str, int] = {}
            for i, n in enumerate(names):
                seen[n] = seen.get(n, 0) + 1
                if seen[n] > 1:
                    names[i] = f"{n}#{seen[n]}"
    return [(names[i], members) for i, (_, members) in enumerate(logs)]


def _dedup(gens: list[Generation], err) -> list[Generation]:
    """Drop a generation whose content another given file holds from its start: the same
    generation twice (``.1`` and ``.1.gz``), or a ``copy`` that a longer file continues."""
    keep: list[Generation] = []
    lengths: dict[str, int] = {}

    def length(g: Generation) -> int:
        if g.path not in lengths:
            lengths[g.path] = len(g.head) if len(g.head) < HEAD_BYTES else _length(g.path)
        return lengths[g.path]

    for g in sorted(gens, key=lambda g: -len(g.head)):
        cover = next((k for k in keep if g.head and k.head.startswith(g.head)), None)
        if cover is None:
            keep.append(g)
            continue
        if length(cover) < length(g):  # the same start, but this one goes on further: keep it
            keep[keep.index(cover)] = g
            cover, g = g, cover
        print(f"hybrid-cache-exporter: {g.path}: {cover.path} holds the same lines from its start: read once", file=err)
    return keep


def replay_files(pipe, paths: Iterable[str], source: str | None, err=sys.stderr) -> int:
    """Feed whole files into ``pipe``: the generations of one log (``server.log server.log.1
    server.log.2.gz``, in any order) as one source, oldest first (:func:`order_generations`).
    Unreadable files and files without a single SGLang or vLLM line are reported on ``err`` and
    count as failed (the other files still count); an empty file is a warning. Returns the number
    of files that failed."""
    failed = 0
    for name, members in order_generations(list(paths), getattr(pipe, "engine", None), err):
        name = source or name
        src = pipe.source(name)
        reader = Reader()  # one for the generations of a log: a line cut by copytruncate is joined
        for path in members:
            if path != "-" and os.path.isdir(path):
                print(f"hybrid-cache-exporter: {path}: is a directory, skipped", file=err)
                failed += 1
                continue
            before = src.lines.get("parsed", 0) + src.lines.get("unrecognized", 0)
            engine_before = src.engine
            got = [0]
            try:
                feed_text = pipe.feed_text
                for text in read_blocks(path, reader, flush=False, nbytes=got):
                    feed_text(name, text)
            except (OSError, EOFError, ValueError, lzma.LZMAError) as e:
                print(f"hybrid-cache-exporter: {path}: cannot read: {getattr(e, 'strerror', None) or e}", file=err)
                failed += 1
                continue
            if got[0] == 0:
                print(f"hybrid-cache-exporter: warning: {path}: empty file", file=err)
                continue
            after = src.lines.get("parsed", 0) + src.lines.get("unrecognized", 0)
            if after == before and not (engine_before is None and src.engine is not None) and not _has_header(path, src.engine):
                print(
                    f"hybrid-cache-exporter: {path}: no SGLang or vLLM log line in it (is it the engine's log? "
                    "see docs/reading.md for the formats read)",
                    file=err,
                )
                failed += 1
        rest = reader.flush()  # the log's last line, if it has no newline
        if rest:
            pipe.feed_text(name, "\n".join(rest) + "\n")
    return failed


def _has_header(path: str, engine: str | None) -> bool:
    """Whether a file that gave no parsed line still has a line with an engine's header (a piece of
    a log with only access lines): such a file is a log, only a quiet one."""
    if path == "-":
        return False
    g = Generation(path, path, (1, 0, ""))
    try:
        _scan_head(g, engine)
    except (OSError, EOFError, ValueError, lzma.LZMAError):
        return False
    return g.engine is not None
