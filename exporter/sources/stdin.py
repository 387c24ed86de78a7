"""``--log -``: read standard input (a pipe such as ``kubectl logs -f pod | hybrid-cache-exporter serve --log -``).

Read in large chunks as they arrive, through the same reader as files (:mod:`exporter.reading.reader`):
partial lines are held until their newline, container formats are unwrapped. At EOF the held partial line is flushed, ``source_up`` drops to
0 and the exporter keeps serving the metrics it has (it does not exit). No positions: a pipe
cannot be re-read.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from ..reading.lines import DEFAULT_MAX_LINE
from ..reading.reader import Reader
from ..state.pipeline import Pipeline

log = logging.getLogger("hybrid_cache_exporter.stdin")

CHUNK = 1 << 20


class StdinSource:
    path = "-"

    def __init__(self, pipe: Pipeline, source: str, fd: int = 0, max_line: int = DEFAULT_MAX_LINE) -> None:
        self.pipe = pipe
        self.source = source
        self.fd = fd
        self.reader = Reader(max_line)
        self.read_bytes = 0
        self.rotations = 0
        self.truncations = 0
        self.up = True
        self.state = "open"
        self.mtime: float | None = None
        self.thread: threading.Thread | None = None
        pipe.source(source)

    @property
    def overlong(self) -> int:
        return self.reader.overlong

    def open_files(self) -> int:
        return 1 if self.up else 0

    def lag(self) -> int:
        return 0  # bytes still in the pipe cannot be measured

    def offset(self) -> int:
        return self.read_bytes - self.reader.pending

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="stdin", daemon=True)
        self.thread.start()

    def _emit(self, lines: list[str]) -> None:
        if lines:
            self.pipe.feed_lines(self.source, lines)

    def _run(self) -> None:
        try:
            while True:
                try:
                    chunk = os.read(self.fd, CHUNK)
                except InterruptedError:
                    continue
                if not chunk:
                    break
                self.read_bytes += len(chunk)
                self.mtime = time.time()
                self._emit(self.reader.feed(chunk))
        except OSError as e:
            log.error("stdin: read error: %s", e)
        self._emit(self.reader.flush())
        self.up = False
        self.state = "closed"
        log.info("stdin: end of input after %d bytes; still serving the metrics read so far", self.read_bytes)
