"""A bounded timeline per server, in log time, for the pictures (status page and ``report --html``).

The exporter's state holds only the newest value of each gauge and the rules' summaries; a chart
needs the recent past. :class:`History` is a pipeline observer (the composition root attaches it
*after* the rules, so each sample sees the findings the rules just decided) that keeps, per
(source, DP rank), one row per ``BUCKET_SECONDS`` of log time: KV and mamba usage, running and
queued requests, the effective request cap, and a bit per firing runtime finding.

Rows live in a :class:`Timeline`, a columnar ring of fixed capacity (``array`` columns, 49 bytes
per row), so the memory per server is fixed however long the exporter runs:

* ``serve`` keeps the last ``LIVE_ROWS`` rows (one hour of log time at 10 s); older rows fall off.
* ``report`` must draw the whole log: its timelines *compact* instead of dropping, i.e. when full,
  neighbouring rows are merged pairwise and the row width doubles (a day of log at 10 s fits in
  ``REPORT_ROWS`` rows at 20-40 s).

Rows of one bucket are merged: usages and request counts keep the maximum (a chart of a pool
limit must not hide the peaks), the cap keeps the newest value, finding bits are OR-ed.
Timestamps are the log's (``Line.ts``), never the wall clock, so ``replay``/``report`` of a file
and ``serve`` tailing it draw the same picture.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

from parsers import events as ev

from ..catalogues.rulebook import SHADED_RULES
from ..state.facts import effective_max_running
from ..state.store import ServerState, SourceState

BUCKET_SECONDS = 10.0  # the pipeline samples batch lines per 10 s of log clock
LIVE_ROWS = 360  # serve: one hour of log time
REPORT_ROWS = 4096  # report: the whole log, compacted
FIELDS = ("kv", "mamba", "running", "queued", "cap")
# the findings drawn as shaded intervals (rulebook.SHADED_RULES; mamba_capped is a fact of the boot: shown as text)
_NAN = float("nan")


class Timeline:
    """Fixed-capacity columnar ring of rows ``(t, kv, mamba, running, queued, cap, bits)``."""

    __slots__ = ("bits", "bucket", "capacity", "cols", "compact", "last_b", "last_i", "n", "start", "t")

    def __init__(self, capacity: int = LIVE_ROWS, bucket: float = BUCKET_SECONDS, compact: bool = False) -> None:
        if capacity < 2:
            raise ValueError("a timeline needs at least 2 rows")
        self.capacity = capacity
        self.bucket = bucket  # row width in seconds of log time (doubles on each compaction)
        self.compact = compact
        self.t = array("d", bytes(8 * capacity))  # bucket start, log time
        self.cols = [array("d", bytes(8 * capacity)) for _ in FIELDS]
        self.bits = array("B", bytes(capacity))
        self.start = 0  # index of the oldest row
        self.n = 0
        self.last_b = -math.inf  # bucket start of the newest row ...
        self.last_i = -1  # ... and its index

    def __len__(self) -> int:
        return self.n

    def nbytes(self) -> int:
        """Bytes held by the columns (the part that scales with the capacity)."""
        return self.t.itemsize * len(self.t) + sum(c.itemsize * len(c) for c in self.cols) + len(self.bits)

    def add(self, ts: float, values: tuple[float | None, ...], bits: int) -> None:
        """One sample: merged into the newest row if it falls in the same bucket, else a new row.
        A sample older than the newest row's bucket (out-of-order line) merges into the newest row."""
        b = ts - ts % self.bucket
        if b <= self.last_b:  # most samples: the other batch kind of the same 10 s
            self._merge(self.last_i, values, bits)
            return
        cap = self.capacity
        if self.n == cap:
            if self.compact:
                self._halve()
                b = ts - ts % self.bucket
                if b <= self.last_b:
                    self._merge(self.last_i, values, bits)
                    return
            else:
                self.start = (self.start + 1) % cap
                self.n -= 1
        self._append(b, values, bits)

    def _append(self, b: float, values: tuple[float | None, ...], bits: int) -> None:
        i = (self.start + self.n) % self.capacity
        self.n += 1
        self.t[i] = b
        for col, v in zip(self.cols, values, strict=True):
            col[i] = _NAN if v is None else v
        self.bits[i] = bits
        self.last_b, self.last_i = b, i

    def _merge(self, i: int, values: tuple[float | None, ...], bits: int) -> None:
        """Usages and request counts keep the maximum (NaN = none yet), the cap the newest value."""
        kv, mamba, running, queued, cap = values
        c = self.cols
        if kv is not None and not c[0][i] >= kv:
            c[0][i] = kv
        if mamba is not None and not c[1][i] >= mamba:
            c[1][i] = mamba
        if running is not None and not c[2][i] >= running:
            c[2][i] = running
        if queued is not None and not c[3][i] >= queued:
            c[3][i] = queued
        if cap is not None:
            c[4][i] = cap
        if bits:
            self.bits[i] |= bits

    def _halve(self) -> None:
        """Merge neighbouring rows pairwise (row width doubles); rows are re-laid from index 0."""
        rows = list(self.rows())
        self.bucket *= 2
        self.start = self.n = 0
        self.last_b, self.last_i = -math.inf, -1
        for t, vals, bits in rows:
            b = t - t % self.bucket
            if b <= self.last_b:
                self._merge(self.last_i, vals, bits)
            else:
                self._append(b, vals, bits)

    def columns(self) -> tuple[list[float], list[list[float | None]], list[int]]:
        """Bucket starts, the value columns (None for missing) and the finding bits, oldest first."""
        n, cap, start = self.n, self.capacity, self.start

        def ordered(a: array) -> list:
            lst = a.tolist()
            return (lst[start:] + lst[: (start + n) - cap] if start + n > cap else lst[start : start + n]) if n else []

        cols = [[None if v != v else v for v in ordered(c)] for c in self.cols]
        return ordered(self.t), cols, ordered(self.bits)

    def rows(self) -> Iterator[tuple[float, tuple[float | None, ...], int]]:
        """Rows oldest first: ``(bucket start, values with None for missing, finding bits)``."""
        cap = self.capacity
        for k in range(self.n):
            i = (self.start + k) % cap
            yield self.t[i], tuple(None if c[i] != c[i] else c[i] for c in self.cols), self.bits[i]


@dataclass
class History:
    """The observer: ``History()(src, srv, parsed_line, raw_line)`` records batch/stats samples."""

    capacity: int = LIVE_ROWS
    compact: bool = False

    def __post_init__(self) -> None:
        self.timelines: dict[tuple[str, str], Timeline] = {}

    def __call__(self, src: SourceState, srv: ServerState, line: ev.Line, raw: str) -> None:
        e = line.event
        if type(e) is not ev.BatchStats:
            return
        ts = line.ts if line.ts is not None else src.last_ts
        if ts is None:
            return
        key = (src.name, srv.dp_rank)
        tl = self.timelines.get(key)
        if tl is None:
            tl = self.timelines[key] = Timeline(self.capacity, compact=self.compact)
        running = e.running
        if running is not None and e.kind == "prefill" and e.new_seqs:
            running += e.new_seqs  # the prefill line prints the running batch before the new ones join
        f = srv.findings
        bits = 0
        if any(f.values()):
            for k, rule in enumerate(SHADED_RULES):
                if f.get(rule):
                    bits |= 1 << k
        # the cap changes only with startup lines: looked up once per new row, not per sample
        cap = None if ts - ts % tl.bucket <= tl.last_b else effective_max_running(src, srv)[0]
        tl.add(ts, (e.kv_usage, e.mamba_usage, running, e.queued, cap), bits)

    def timeline(self, source: str, dp_rank: str) -> Timeline | None:
        return self.timelines.get((source, dp_rank))


__all__ = ["FIELDS", "History", "SHADED_RULES", "Timeline"]
