"""Offline files as users have them (``replay``, ``report``): rotated generations, compressed, in
any order, grouped by the log they belong to and fed oldest first.

Apart from exporter.reading.reader (which turns one file or byte stream into lines) because it is a
concern of its own: which files are generations of one log, in what order, and which are copies
of each other (:func:`order_generations`), then feeding them as one source (:func:`replay_files`).
"""

from __future__ import annotations

import contextlib
import lzma
import os
import re
import sys
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass

from parsers import parse_line

from .reader import CHUNK, Reader, close_log, file_year, open_log, read_ahead, read_blocks, source_name

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
        close_log(f)
    year = _year(g.path, g.head, engine)  # vLLM's MM-DD: the year from the file, not from the clock
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
        close_log(f)
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
        if members[0] != "-" and src.last_ts is None and os.path.isfile(members[0]):
            with contextlib.suppress(OSError, EOFError, ValueError, lzma.LZMAError):  # reported when it is fed
                src.year = _year(members[0], _first_bytes(members[0]), src.engine)
        reader = Reader()  # one for the generations of a log: a line cut by copytruncate is joined
        for path in members:
            if path != "-" and os.path.isdir(path):
                print(f"hybrid-cache-exporter: {path}: is a directory, skipped", file=err)
                failed += 1
                continue
            before = src.lines.get("parsed", 0) + src.lines.get("unrecognized", 0)
            engine_before = src.engine
            src.mark_file("stdin" if path == "-" else os.path.basename(path))  # where a fact's line is (explain, report)
            got = [0]
            try:
                if reader.pending:  # a line the previous generation left unfinished
                    ended = reader.ends_before(_first_bytes(path))
                    if ended:
                        pipe.feed_lines(name, ended)  # (its last line a fragment: read only when whole)
                feed_text = pipe.feed_text
                blocks = read_blocks(path, reader, flush=False, nbytes=got)
                # read ahead in a thread where there is a block to read ahead: a file of more than one (a pipe may
                # block for ever; a small file, a directory of rotated ones, would only pay for the thread)
                ahead = path != "-" and os.path.isfile(path) and os.path.getsize(path) > CHUNK
                for text in read_ahead(blocks) if ahead else blocks:
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
                forced = getattr(pipe, "engine", None)
                other = next((x for x in ("sglang", "vllm") if x != forced), None) if forced else None
                if other and _has_header(path, other):
                    print(
                        f"hybrid-cache-exporter: {path}: no {_ENGINE_NAMES[forced]} log line in it, but it looks like a "
                        f"{_ENGINE_NAMES[other]} log: --engine {forced} was given (use --engine {other}, or auto)".replace(
                            " a SGLang", " an SGLang"
                        ),
                        file=err,
                    )
                else:
                    print(
                        f"hybrid-cache-exporter: {path}: no SGLang or vLLM log line in it (is it the engine's log? "
                        "see docs/reading.md for the formats read)",
                        file=err,
                    )
                failed += 1
        rest = reader.flush()  # the log's last line, if it has no newline: a fragment, read only when whole
        if rest:
            pipe.feed_lines(name, rest)
    return failed


def _year(path: str, head: bytes, engine: str | None) -> int:
    """The year of the first lines of a file (exporter.reading.reader.file_year: its modification time
    and its first dated line; a rotated copy keeps the time of its last write)."""
    r = Reader()
    lines = r.feed(head)
    return file_year(lines, os.stat(path).st_mtime, engine)


def _first_bytes(path: str) -> bytes:
    if path == "-":
        return b""
    f = open_log(path)
    try:
        return f.read(HEAD_BYTES)
    finally:
        close_log(f)


_ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM"}


# Another engine's line that wears an engine's header: lmdeploy's metrics line (lmdeploy 0.18.0
# metrics/loggers.py, its one print: '[%Y-%m-%d %H:%M:%S DP{n}] Avg thr (in/out): ...') is SGLang's header
# to the letter, and says nothing SGLang prints. It does not make a file an engine's log.
_LOOKALIKE_RE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d DP\d+\] Avg thr \(in/out\): ")


def _has_header(path: str, engine: str | None) -> bool:
    """Whether a file that gave no parsed line still has a line with an engine's header (a piece of
    a log with only access lines): such a file is a log, only a quiet one. Another engine's
    lookalike line (``_LOOKALIKE_RE``) is not such a header."""
    if path == "-":
        return False
    seen = 0
    try:
        year = _year(path, _first_bytes(path), engine)
        with closing(read_blocks(path)) as blocks:
            for text in blocks:
                seen += len(text)
                for line in text[:-1].split("\n"):
                    if parse_line(line, engine, year).engine and not _LOOKALIKE_RE.search(line):
                        return True
                if seen >= PRESCAN_BYTES:
                    return False
    except (OSError, EOFError, ValueError, lzma.LZMAError):
        return False
    return False


__all__ = ["Generation", "generation_of", "order_generations", "replay_files"]
