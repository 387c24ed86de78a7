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


# ---------------------------------------------------------------------------------------------
# Counts that feed counters. An engine prints per-line counts (tokens of one batch, requests
# retracted or preempted in one event or interval, speculative tokens of one interval, vLLM V0's
# running total of preemptions): none comes near a billion (a prefill batch holds at most
# --max-prefill-tokens / --max-num-batched-tokens, 10^4..10^6; a whole day at 10^6 tokens/s is
# 8.6*10^10 only summed over many lines). So a count is an integer 0 <= n <= MAX_COUNT (at most
# 9 digits, which is also what the bulk scanner accepts); anything else - negative, non-finite,
# fractional, 10 or more digits - is not something an engine printed, and the line carrying it is
# `unrecognized` instead of moving a counter (a counter must never decrease or jump by 10^31).

MAX_COUNT = 999_999_999
MAX_COUNT_DIGITS = 9

# event class name -> its fields that are counts (None = absent on this line)
_COUNT_FIELDS: dict[str, tuple[str, ...]] = {
    "BatchStats": ("new_tokens", "cached_tokens", "preemptions"),
    "Retraction": ("retracted", "aborted"),
    "Preemption": ("cumulative",),
    "SpecDecoding": ("accepted_tokens", "drafted_tokens"),
}
# signed per-event deltas (SGLang prints '#new_tokens_gained: -12'): only their size is bounded;
# what they add to a counter is clamped at 0 by the state
_SIGNED_FIELDS: dict[str, tuple[str, ...]] = {"Retraction": ("new_tokens_gained", "mamba_num_gained")}


def is_count(x: object) -> bool:
    """Whether ``x`` is a count an engine can print (see ``MAX_COUNT``). None (absent) is fine."""
    return x is None or (type(x) is int and 0 <= x <= MAX_COUNT)


def count_fields(name: str) -> tuple[str, ...]:
    """The fields of event type ``name`` that must be counts (``is_count``); the parsers' fast
    path checks these where it builds the event itself. BatchStats has no signed ones."""
    return _COUNT_FIELDS.get(name, ())


def bad_count(event: object) -> str | None:
    """The name of the first count field of ``event`` that is not a sane count, or None."""
    name = type(event).__name__
    for f in _COUNT_FIELDS.get(name, ()):
        if not is_count(getattr(event, f)):
            return f
    for f in _SIGNED_FIELDS.get(name, ()):
        x = getattr(event, f)
        if x is not None and not (type(x) is int and -MAX_COUNT <= x <= MAX_COUNT):
            return f
    return None


# ---------------------------------------------------------------------------------------------
# Values that feed gauges. A usage or hit ratio an engine prints lies in 0..1 (SGLang prints
# '0.80', vLLM '80.0%'); a request or token count is never negative; a throughput or acceptance
# length is a non-negative finite number. A line that says otherwise (NaN, +-Inf, -3, 1.7) was
# not printed by an engine: it is `unrecognized` (format drift or a damaged line), and no gauge
# takes its values (docs/reading.md#values-gauges-take).

RATIO_FIELDS: dict[str, tuple[str, ...]] = {
    "BatchStats": ("kv_usage", "mamba_usage", "swa_usage", "accept_rate", "prefix_hit_ratio", "cpu_kv_usage"),
    "SpecDecoding": ("accept_rate",),
}
NONNEGATIVE_FIELDS: dict[str, tuple[str, ...]] = {
    "BatchStats": (
        "running", "queued", "kv_used_tokens", "mamba_used", "swa_used_tokens", "gen_throughput",
        "input_throughput", "accept_length", "new_seqs", "pending_tokens", "swapped", "deferred",
    ),
    "SpecDecoding": ("mean_accept_length",),
}  # fmt: skip


def is_ratio(x: object) -> bool:
    """A ratio a gauge may take: 0 <= x <= 1 (NaN fails). None (absent) is fine."""
    return x is None or (type(x) is not bool and 0.0 <= x <= 1.0)  # type: ignore[operator]


def is_nonnegative(x: object) -> bool:
    """A count or rate a gauge may take: finite and >= 0 (NaN fails). None (absent) is fine."""
    return x is None or (type(x) is not bool and 0.0 <= x < float("inf"))  # type: ignore[operator]


def bad_value(event: object) -> str | None:
    """Why ``event`` is not something an engine printed, or None: a count out of range
    (:func:`bad_count`), a ratio outside 0..1, a negative or non-finite count or rate."""
    f = bad_count(event)
    if f is not None:
        return f"count out of range: {f}"
    name = type(event).__name__
    for f in RATIO_FIELDS.get(name, ()):
        if not is_ratio(getattr(event, f)):
            return f"ratio out of range: {f}"
    for f in NONNEGATIVE_FIELDS.get(name, ()):
        if not is_nonnegative(getattr(event, f)):
            return f"negative or not finite: {f}"
    return None
