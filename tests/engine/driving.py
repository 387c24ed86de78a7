"""Waiting for what a test asserts on, instead of a fixed count of requests (issue 37's rule for the suite): an
open-ended load that runs until told to stop, and a wait that drives until a condition is seen within a time bound
and otherwise fails saying what was seen.

No tests here. (Written beside harness.py and checks.py so that the engine-agnostic primitives the vLLM half is
getting can replace these in one place.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import harness as h


@dataclass
class OpenLoad(h.Load):
    """Completions from ``concurrency`` clients until :meth:`stop` (or ``max_seconds``, the bound of the whole
    load): ``n`` is only a bound too."""

    n: int = 10**9
    concurrency: int = 8
    max_seconds: float = 600.0

    def stop(self) -> OpenLoad:
        with self._lock:
            self._deadline = 0.0
        return self

    def in_flight(self) -> int:
        """Requests sent and not answered yet."""
        with self._lock:
            return self._next - self.done - self.failed


def drive_until(cond: Callable[[], object], timeout: float, what: str, seen: Callable[[], str], every: float = 0.5):
    """Poll ``cond`` until it returns something true (returned) within ``timeout`` seconds; otherwise fail with
    ``what`` was awaited and what was ``seen`` instead."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; seen: {seen()}")
        time.sleep(every)
