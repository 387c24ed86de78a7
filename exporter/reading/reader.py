"""The one reading layer: bytes of a log -> the lines the pipeline parses.

Every entry point reads through :class:`Reader` (``replay``, ``report``, ``serve``'s tailers and
``--log -``), so they all see the same lines for the same bytes, whatever the read chunking.

API::

    r = Reader(max_line=DEFAULT_MAX_LINE)   # format detected from the first line
    lines = r.feed(chunk)        # the complete lines in the bytes so far (list of str)
    text = r.feed_text(chunk)    # the same lines as one block, each ending in '\\n' ('' if none)
    text, n = r.read_text(f)     # read a chunk of a binary file and feed_text it (n = 0: EOF)
    lines = r.flush()            # at the end of a finished input: what was held back
    r.pending                    # bytes fed but not returned yet: offset of the next line to
                                 # parse = bytes fed - r.pending (what positions save)
    r.fmt, r.overlong            # 'plain' / 'docker' / 'cri' (None until the first line); cut lines
    r.detect_from(head)          # a reader starting mid-file: the format from the file's first bytes

    open_log(path)               # binary file object: '-' = stdin; gzip, bzip2, xz read transparently
    read_blocks(path) / read_chunks(path) / read_lines(path)   # a whole file through a Reader
    read_ahead(read_blocks(path))  # the same blocks, read by a thread of their own ahead of their use

Whole offline files as users have them (rotated generations, compressed, in any order):
exporter.reading.offline (``order_generations``, ``replay_files``).

What a line is:

* Plain files: a line ends at ``\\n``; a partial last line is held until its newline, or handed on
  as a :class:`~exporter.reading.lines.Fragment` by ``flush`` (the end of a finished input) and
  ``ends_before`` (a truncation ended it): the pipeline reads a fragment only when its message is
  whole.
* Container formats (:mod:`exporter.reading.container`): records are decoded, Docker records
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
import queue
import re
import sys
import threading
from collections.abc import Generator, Iterable, Iterator
from typing import BinaryIO, TypeVar

from parsers import VLLM, clock, parse_line
from parsers.header.prefix import SGLANG_HEADER_RE

from . import container
from .container import CRI, DOCKER, PLAIN, UNWRAP_CODES, Record, detect, record_parser
from .lines import DEFAULT_MAX_LINE, Fragment, LineSplitter, read_behind

CHUNK = 1 << 20
DETECT_MAX = 1 << 16  # a first line longer than this is classified from its start
_BOM = b"\xef\xbb\xbf"
RECORD_SLACK = 1 << 16  # room for the container wrapping around a message of max_line bytes
# the start of a line a server writes: a whole SGLang or vLLM header, or a collector's RFC3339
# time. The rest of a line cut anywhere does not start so (Reader.ends_before); a line cut just
# after vLLM's process prefix is the one exception, told by the held part (PROC_END_RE)
LINE_START_RE = re.compile(
    rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d"
    rb"|\([A-Za-z][\w ]*?(?: rank=\d+)? pid=\d+|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"
)
PROC_END_RE = re.compile(rb"pid=\d+(?:, ip=[^)]*)?\) ?$")

__all__ = [
    "CHUNK",
    "DEFAULT_MAX_LINE",
    "PLAIN",
    "DOCKER",
    "CRI",
    "Reader",
    "open_log",
    "read_ahead",
    "read_blocks",
    "read_chunks",
    "read_lines",
    "lines_of",
    "source_name",
    "file_year",
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
        "_code",
        "_arr",
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
        self._code: str | None = None  # the C unwrapper's name of the format ('d', 'c'), when it reads it
        self._arr: bytearray | None = None  # read_text's buffer for container records, reused from read to read
        if fmt is not None:
            self._set_fmt(fmt)

    # format --------------------------------------------------------------------------------
    def _set_fmt(self, fmt: str) -> None:
        self.fmt = fmt
        self._record = record_parser(fmt)
        self._code = UNWRAP_CODES.get(fmt) if container.native_unwrap is not None else None

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
        data = self._buf + chunk if self._buf else chunk
        text = self._records_text(data, len(data))
        return text[:-1].split("\n") if text else []

    def feed_text(self, chunk: bytes) -> str:
        """Like :meth:`feed`, as one block of lines each ending in ``\\n`` (``''`` if none): ``replay``
        scans a plain block without splitting it into a list first."""
        if self.fmt is None:
            chunk = self._detect(chunk)
            if chunk is None:
                return ""
        if self._record is None:
            return self.splitter.feed_text(chunk)
        data = self._buf + chunk if self._buf else chunk
        return self._records_text(data, len(data))

    def read_text(self, f: BinaryIO, n: int = CHUNK) -> tuple[str, int]:
        """Read up to ``n`` bytes of ``f`` and feed them: ``(feed_text of them, bytes read)``, 0 bytes
        at EOF. A plain file reads into the splitter's reused buffer (:meth:`LineSplitter.read_text`)."""
        if self._record is None and self.fmt is not None:
            return self.splitter.read_text(f, n)
        if self._code is not None:
            # container records the C unwrapper reads: into one buffer kept from read to read,
            # behind the held partial record, as a plain file's reads go (LineSplitter.read_text)
            held = len(self._buf)
            self._arr, k = read_behind(self._arr, self._buf, f, n)
            return (self._records_text(self._arr, held + k) if k else ""), k
        chunk = f.read(n)
        return (self.feed_text(chunk) if chunk else ""), len(chunk)

    def ends_before(self, data: bytes) -> list[str]:
        """Bytes from elsewhere come next (the next generation of a log, or a file's content after
        it was truncated): when they start a line of their own (an engine header, or a record of
        the container format), the held partial line was never finished (its writer died or was
        restarted) and ends here: returned, as :meth:`flush` returns it. Else ``[]``: the bytes
        continue it (``copytruncate`` leaves the rest of a line to the new content)."""
        if not self.pending or not data:
            return []
        if self.fmt not in (None, PLAIN):
            nl = data.find(b"\n", 0, DETECT_MAX)
            return self.flush() if detect(data[: nl if nl >= 0 else DETECT_MAX]) == self.fmt else []
        held = self._head if self.fmt is None else self.splitter.buf
        if LINE_START_RE.match(data) and not PROC_END_RE.search(held[-200:]):
            return self.flush()
        return []

    def flush(self) -> list[str]:
        """The end of a finished input: the held partial line (or unfinished message), if any, as a
        :class:`~exporter.reading.lines.Fragment` (the lines before it in an unfinished message are whole)."""
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
            if self._record(raw) is None and out:  # a record cut short: not one of the format's
                out[-1] = Fragment(out[-1])
        if self._first is not None:  # a message whose final record never came
            self._join(out)
            if out:
                out[-1] = Fragment(out[-1])
        return out

    # container records ---------------------------------------------------------------------
    def _records_text(self, data: bytes | bytearray, size: int) -> str:
        """The complete messages of the records in ``data[:size]`` (what was held, then the new
        bytes), one block of lines each ending in ``\\n``; the bytes after the last newline are held.
        Runs of whole records go through the C unwrapper (``container.native_unwrap``) when it is
        there; the records it leaves (split ones, other layouts, non-ASCII, overlong) are read here,
        one by one, in their place."""
        nl = data.rfind(b"\n", 0, size)
        blocks: list[str] = []
        out: list[str] = []
        if nl >= 0:
            self._buf = bytes(data[nl + 1 : size])
            pos, end = 0, nl + 1
            if self._skip:
                self._skip = False
                pos = data.index(b"\n", 0, end) + 1  # the unseen tail of an overlong record
            unwrap, code, one = container.native_unwrap, self._code, self._one
            while pos < end:
                if code is not None and self._first is None:
                    text, pos = unwrap(data, pos, end, code, self.max_line)
                    if text:
                        blocks.append(text)
                    if pos >= end:
                        break
                e = data.index(b"\n", pos, end)
                one(bytes(data[pos:e]), out)
                if out:
                    blocks.append("\n".join(out) + "\n")
                    out.clear()
                pos = e + 1
        else:
            self._buf = bytes(data[:size])
        if len(self._buf) > self.max_line + RECORD_SLACK:
            # a record without newline beyond any real one: keep its head as a line, drop the rest
            if not self._skip:
                self._overlong += 1
                self._join(out)
                out.append(self._buf[: self.max_line].decode("utf-8", "replace"))
            self._skip = True
            self._buf = b""
        if out:
            blocks.append("\n".join(out) + "\n")
        return "".join(blocks)

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


def close_log(f: BinaryIO) -> None:
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
            text, k = r.read_text(f, CHUNK)
            if not k:
                break
            if nbytes is not None:
                nbytes[0] += k
            if text:
                yield text
        rest = r.flush() if flush else None
        if rest:
            yield "\n".join(rest) + "\n"
    finally:
        close_log(f)


T = TypeVar("T")
_END = object()
AHEAD = 2  # blocks read ahead of the one being fed: memory is this many blocks (CHUNK each) more


def read_ahead(blocks: Generator[T, None, None], depth: int = AHEAD) -> Iterator[T]:
    """``blocks`` as they are, made by a thread of their own up to ``depth`` blocks ahead: the file is read and
    decoded while the block before is fed (the bulk scanner runs without the GIL, exporter/_scan.c ``scan_text``).
    Everything the generator does (its reader's held line, its byte count) is done when the last block has been
    taken; an error it raises is raised here, after the blocks it made before it. Closed early (the consumer
    failed), the thread stops and closes the generator. Only for files: a read from a pipe may block for ever."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for b in blocks:
                if not put((b, None)):
                    return
            put((_END, None))
        except BaseException as e:  # handed to the consumer, raised in its thread
            put((_END, e))
        finally:
            blocks.close()

    t = threading.Thread(target=run, name="read-ahead", daemon=True)
    t.start()
    try:
        while True:
            item, err = q.get()
            if item is _END:
                if err is not None:
                    raise err
                return
            yield item
    finally:
        stop.set()
        t.join()


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


YEAR_SLACK = 2 * 86400  # a line's local time may run ahead of the file's clock by a time zone's offset
YEAR_LOOK = 1000  # lines looked at for the first dated one


def file_year(lines: Iterable[str], mtime: float, engine: str | None = None) -> int:
    """The year of the first lines of a file whose headers carry none (vLLM's ``MM-DD``), taken
    from the file rather than from the machine's clock: the year of the file's modification time
    (its last write), or the year before when the first dated line, taken in that year, would lie
    after the modification time (a December line in a file last written in January). It holds for
    files that span less than a year; from that line on, the state's rollover (a line more than
    180 days before the newest starts a new year) carries it (docs/serve.md, "The vLLM year").
    A year set with ``--log.year`` (``parsers.clock.set_year``) is taken instead, whatever the file."""
    fixed = clock.fixed_year()
    if fixed is not None:
        return fixed
    year = clock.wall(mtime).tm_year
    for i, line in enumerate(lines):
        if i >= YEAR_LOOK:
            break
        p = parse_line(line, engine, year)
        if p.ts is None:
            continue
        if (p.engine or engine) != VLLM:
            return year
        return year - 1 if p.ts > mtime + YEAR_SLACK else year
    return year
