"""Number formats found in the logs: thousands separators, percentages, GB vs GiB.

SGLang's ``GB`` is ``1 << 30`` bytes (it divides by ``GB = 1024 ** 3``); vLLM says ``GiB``.
Both therefore convert with the same factor; decimal gigabytes never appear.
"""

from __future__ import annotations

GIB = float(1 << 30)
MIB = float(1 << 20)


def to_int(s: str) -> int:
    """``'973,760'`` -> 973760; ``'1_000'`` -> 1000; ``'12.0'`` -> 12."""
    s = s.strip().replace(",", "").replace("_", "")
    try:
        return int(s)
    except ValueError:
        return int(float(s))


def to_float(s: str) -> float:
    """``'0.20'``, ``'1,872.3'``, ``'87.5%'`` (kept as 87.5: use :func:`percent` for ratios)."""
    return float(s.strip().rstrip("%").replace(",", ""))


def percent(s: str) -> float:
    """``'87.5%'`` or ``'87.5'`` -> 0.875."""
    return to_float(s) / 100.0


def gib_bytes(s: str) -> float:
    """A ``GB``/``GiB`` figure as printed (``'4.38'``) -> bytes."""
    return to_float(s) * GIB
