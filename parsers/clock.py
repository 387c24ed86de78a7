"""Log time: how a time written in a log line becomes Unix seconds, and the zone rule.

A time written without a zone (SGLang's ``[2026-04-14 16:08:49]``, vLLM's year-less
``04-14 16:08:49``, a logging config's ``%(asctime)s``, a JSON ``asctime``) is read in one zone,
the same for every line the process reads: the exporter's local zone (``TZ``) by default, or the
one ``--log.timezone`` names (:func:`set_zone`; every command that reads logs has the flag). Times
that carry their zone (RFC3339 ``Z`` / ``+02:00``, journald's ``+0100``, epoch numbers in JSON)
are exact whatever the setting. Why local by default: the engine writes its own local time, and a
sidecar shares its container's zone settings (usually UTC); a log copied to a machine in another
zone is replayed with ``--log.timezone`` set to the server's zone. docs/formats/README.md#time.

The year of a time written without one (vLLM's ``MM-DD``, a syslog date) is the other such setting
(:func:`set_year`, ``--log.year``): by default it comes from the file (``exporter.reading.reader.file_year``:
its modification time and first dated line; docs/serve.md#the-vllm-year), and a year set here is
taken instead, whatever the file's time and the machine's clock (a copied log, goldens that must
pass in any year).

Pure functions apart from those two process-wide settings and the caches (one conversion per minute
of log). Nothing here raises on a bad date: out-of-range fields are normalised as ``mktime`` does.
"""

from __future__ import annotations

import calendar
import time
from datetime import datetime, timedelta, timezone, tzinfo

LOCAL = "local"
FROM_FILE = "file"  # --log.year's default: the year of year-less times from the file they are read from
YEAR_ENV = "HCE_LOG_YEAR"  # --log.year's default when set (the test suite pins it, as it pins TZ)

_ZONE: tzinfo | None = None  # None: the process's local zone (time.mktime / time.localtime)
_ZONE_NAME = LOCAL
_EPOCH_CACHE: dict[str, float] = {}  # 'YYYY-MM-DD HH:MM' -> Unix time of its first second
_MINUTE_TEXT: dict[float, str] = {}  # the reverse, for the sampler's 10-s buckets (bucket_of)
_UTC_MINUTES: dict[tuple[str, str, int], float] = {}  # RFC3339 (date, HH:MM, zone offset) -> Unix time
_YEAR: int | None = None  # --log.year; None: from the file (FROM_FILE)


def set_zone(name: str | None) -> None:
    """Read zone-less log times in ``name`` from now on: ``local`` (or None / ``''``: the process's
    zone), ``UTC``, an IANA name (``Europe/Berlin``) or a fixed offset (``+05:30``, ``-0800``).
    Raises ValueError for a name that is none of these."""
    global _ZONE, _ZONE_NAME
    zone = zone_of(name)
    _ZONE, _ZONE_NAME = zone, (name or LOCAL) if zone is not None else LOCAL
    _EPOCH_CACHE.clear()
    _MINUTE_TEXT.clear()


def zone_of(name: str | None) -> tzinfo | None:
    """The zone ``name`` means (None for the local zone); ValueError when it names none."""
    if not name or name == LOCAL:
        return None
    if name.upper() in ("UTC", "Z", "GMT"):
        return timezone.utc
    if name[0] in "+-" and name[1:].replace(":", "").isdigit() and len(name[1:].replace(":", "")) == 4:
        hhmm = name[1:].replace(":", "")
        off = timedelta(hours=int(hhmm[:2]), minutes=int(hhmm[2:]))
        if off > timedelta(hours=18):
            raise ValueError(f"offset out of range: {name!r}")
        return timezone(off if name[0] == "+" else -off)
    try:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    except ImportError:  # pragma: no cover - Python < 3.9 is not supported anyway
        raise ValueError(f"unknown time zone {name!r}") from None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown time zone {name!r} (an IANA name such as Europe/Berlin, UTC, local, or +HH:MM)") from None


def zone_name() -> str:
    """The zone zone-less times are read in, as set (``local`` by default)."""
    return _ZONE_NAME


def zone_label() -> str:
    """The zone as a reader wants it named: the set name, or ``local (CET)`` with the process's zone."""
    if _ZONE is None:
        return f"{LOCAL} ({time.strftime('%Z') or 'unnamed'})"
    return _ZONE_NAME


def year_of(text: str | int | None) -> int | None:
    """The year ``--log.year`` means: None for ``file`` (or None / ``''``), else a year 1970-9999.
    Raises ValueError for anything else."""
    if text is None or text == "" or text == FROM_FILE:
        return None
    try:
        y = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"not a year: {text!r} (a year such as 2026, or 'file')") from None
    if not 1970 <= y <= 9999:
        raise ValueError(f"year out of range: {text!r} (1970-9999)")
    return y


def set_year(year: str | int | None) -> None:
    """Date year-less log times in ``year`` from now on (``file`` or None: from each file, the default).
    Raises ValueError as :func:`year_of` does."""
    global _YEAR
    _YEAR = year_of(year)


def fixed_year() -> int | None:
    """The year set by :func:`set_year`, or None when it comes from the file."""
    return _YEAR


def default_year() -> int:
    """The year of a source's year-less times before its file tells one: the set year, else the
    current year of the configured zone (stdin, a pipe: no file to ask)."""
    return _YEAR if _YEAR is not None else wall(time.time()).tm_year


def wall_epoch(y: int, mo: int, d: int, h: int, mi: int, s: float = 0.0) -> float:
    """Unix time of a wall-clock time in the configured zone. Out-of-range fields are normalised
    (month 13 is January of the next year, day 32 the next month's first), never an error."""
    try:
        if _ZONE is None:
            return time.mktime((y, mo, d, h, mi, 0, 0, 0, -1)) + s
        return datetime(y, mo, d, h, mi, tzinfo=_ZONE).timestamp() + s
    except (ValueError, OverflowError):
        y += (mo - 1) // 12
        mo = (mo - 1) % 12 + 1
        y = min(max(y, 1970), 9999)
        naive = calendar.timegm((y, mo, 1, 0, 0, 0)) + ((d - 1) * 24 + h) * 3600 + mi * 60
        return naive - _offset_at(naive) + s


def _offset_at(naive: float) -> float:
    """The configured zone's UTC offset (seconds) near the wall time ``naive`` read as UTC."""
    if _ZONE is None:
        return -time.altzone if time.localtime(naive).tm_isdst > 0 else -time.timezone
    off = _ZONE.utcoffset(datetime(1970, 1, 1) + timedelta(seconds=naive))
    return off.total_seconds() if off is not None else 0.0


def minute_epoch(ymdhm: str) -> float:
    """Unix time of ``YYYY-MM-DD HH:MM`` in the configured zone (cached: one conversion per minute)."""
    v = _EPOCH_CACHE.get(ymdhm)
    if v is None:
        if len(_EPOCH_CACHE) > 4096:
            _EPOCH_CACHE.clear()
            _MINUTE_TEXT.clear()
        v = wall_epoch(int(ymdhm[:4]), int(ymdhm[5:7]), int(ymdhm[8:10]), int(ymdhm[11:13]), int(ymdhm[14:16]))
        _EPOCH_CACHE[ymdhm] = v
        _MINUTE_TEXT.setdefault(v, ymdhm)
    return v


def sglang_ts(ymdhm: str, sec: str, ms: str | None) -> float:
    """Unix time of an SGLang header's ``YYYY-MM-DD HH:MM``, ``SS`` and optional ``mmm``."""
    m = _EPOCH_CACHE.get(ymdhm)  # minute_epoch's cache, read here: every sample comes this way
    ts = (minute_epoch(ymdhm) if m is None else m) + int(sec)
    if ms:
        ts += int(ms) / 1000.0
    return ts


def rfc3339_epoch(s: str) -> float:
    """Unix time of an RFC3339 timestamp with any number of fraction digits and a ``Z`` or
    ``±HH:MM`` / ``±HHMM`` zone (``YYYY-MM-DDTHH:MM:SS[.frac](Z|±hh:mm)``)."""
    date, _, rest = s.partition("T")
    tz = 0
    if rest.endswith(("Z", "z")):
        rest = rest[:-1]
    else:
        sign = 1 if rest[-6 if rest[-3] == ":" else -5] == "+" else -1
        off = rest[-6:] if rest[-3] == ":" else rest[-5:]
        rest = rest[: -len(off)]
        off = off[1:].replace(":", "")
        tz = sign * (int(off[:2]) * 3600 + int(off[2:]) * 60)
    hms, _, frac = rest.partition(".")
    key = (date, hms[:5], tz)
    m = _UTC_MINUTES.get(key)  # one conversion per minute of log (a JSON or logfmt log has one per line)
    if m is None:
        if len(_UTC_MINUTES) > 4096:
            _UTC_MINUTES.clear()
        y, mo, d = (int(x) for x in date.split("-"))
        h, mi = int(hms[:2]), int(hms[3:5])
        m = _UTC_MINUTES[key] = calendar.timegm((y, mo, d, h, mi, 0, 0, 0, 0)) - tz
    return m + int(hms[6:8]) + (float("0." + frac) if frac else 0.0)


def day_start(ts: float) -> float:
    """Unix time of the midnight (in the configured zone) that begins the day of ``ts``."""
    t = wall(ts)
    return ts - (ts % 1) - (t.tm_hour * 3600 + t.tm_min * 60 + t.tm_sec)


def bucket_of(ts: float) -> str:
    """The sampler's 10-second bucket of ``ts``: its wall time in the configured zone as
    ``YYYY-MM-DD HH:MM`` and the tens digit of the seconds, the key the sampler makes of an SGLang
    header's ``YYYY-MM-DD HH:MM`` and ``SS``."""
    m = ts - ts % 60.0
    ymdhm = _MINUTE_TEXT.get(m)
    if ymdhm is None:
        ymdhm = time.strftime("%Y-%m-%d %H:%M", wall(ts))
        m = minute_epoch(ymdhm)  # the minute's start as headers give it (whole-minute zones)
    return f"{ymdhm}{int(ts - m) // 10}"


def wall(ts: float) -> time.struct_time:
    """The wall time of ``ts`` in the configured zone (what the log's zone-less headers would print):
    the one conversion the report's and the pictures' times use."""
    if _ZONE is None:
        return time.localtime(ts)
    return datetime.fromtimestamp(ts, _ZONE).timetuple()


def wall_text(ts: float, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    """``ts`` as the log would print it: its wall time in the configured zone (``--log.timezone``)."""
    return time.strftime(fmt, wall(ts))


__all__ = [
    "FROM_FILE",
    "LOCAL",
    "YEAR_ENV",
    "bucket_of",
    "day_start",
    "default_year",
    "fixed_year",
    "minute_epoch",
    "rfc3339_epoch",
    "set_year",
    "set_zone",
    "sglang_ts",
    "wall",
    "wall_epoch",
    "wall_text",
    "year_of",
    "zone_label",
    "zone_name",
    "zone_of",
]
