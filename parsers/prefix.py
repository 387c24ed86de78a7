"""Line prefixes: collector wrappers, ANSI colours, and each engine's logging header.

Pure functions, no I/O. The order follows the reference's pitfalls list: collector prefix
(docker compose ``svc | ``, RFC3339 ``...Z ``, CRI ``... stdout F ``, journald), ANSI codes,
``\\r``; then the engine header: SGLang ``[YYYY-MM-DD HH:MM:SS(.mmm)? TAGS] `` (not anchored:
junk and Ray prefixes may precede it) or vLLM ``[(Name pid=N) ]LEVEL MM-DD HH:MM:SS [file:N] ``.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from dataclasses import dataclass

import regex

from .events import SGLANG, VLLM

ANSI_RE = regex.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# RFC3339 timestamp a collector put in front (docker logs -t, CRI, kubectl --timestamps)
_RFC3339 = r"(?P<cts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))"
COLLECTOR_RE = regex.compile(
    r"^(?:"
    + _RFC3339
    + r"\s+(?:(?:stdout|stderr)\s+[FP]\s+)?"  # CRI: '<ts> stdout F <msg>'
    + r"|(?P<dcts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?) \| "  # compose with timestamps
    + r"|[\w.-]{1,64}\s{1,32}\| "  # docker compose service prefix 'sglang-1  | ' (bounded: no backtracking on long lines)
    + r"|[A-Za-zА-Яа-я]{3}\.? {1,2}\d{1,2} \d{2}:\d{2}:\d{2} \S+ [\w.\-/]+(?:\[\d+\])?: "  # journald
    + r")"
)

# stdlib re: ~3x faster than `regex` for these short patterns (measured on the bench log)
SGLANG_HEADER_RE = re.compile(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}):(\d{2})(?:\.(\d{3}))?([^\]\[]*)\] ")
SGLANG_TAG_RE = re.compile(r"\b(DP|PP|ATTN_CP|MOE_DP|TP|EP)(\d+)\b")

VLLM_HEADER_RE = re.compile(
    r"(?:\((?P<proc>[A-Za-z][\w ]*?)(?: rank=\d+)? pid=\d+(?:, ip=[^)]*)?\) ?)?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<md>\d{2}-\d{2}) (?P<time>\d{2}:\d{2}:\d{2})(?:[.,]\d+)? "
    r"\[?(?P<file>[^\]\s:]+):(?P<lineno>\d+)\] "
)
# a process prefix without a level (tracebacks, prints under the stdout wrapper)
VLLM_PROC_RE = re.compile(r"\((?P<proc>[A-Za-z][\w ]*?)(?: rank=\d+)? pid=\d+(?:, ip=[^)]*)?\) ")
VLLM_DP_RE = re.compile(r"(?:EngineCore|Worker)_(?:DP)?(\d+)")


# Damaged headers (pasted into issues, cut by terminals or collectors): a header that lost parts
# but still sits at the start of the line. Only tried where no whole header matched; the message
# after it is then parsed like a bare message (its text decides the engine), with what the
# remains say (rank tags, a vLLM process name, the time when the date survived).
_SGLANG_TAGS = r"(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*"
SGLANG_PARTIAL_RE = re.compile(
    # '[16:08:49 TP0] ', '2026-04-14 16:08:49 TP0] ' (lost its '['), '16:08:49] ', '[04-14 16:08:49] ',
    # '[2026-04-14 16:08:49 TP0]Decode' (lost the space), '[2026-04-14T16:08:49,123 TP0] ' (ISO, comma)
    r"(?:\[?(?P<date>(?:\d{4}-)?\d{2}-\d{2})[ T]|\[)?(?P<time>\d{2}:\d{2}):(?P<sec>\d{2})(?:[.,](?P<ms>\d{3}))?"
    r"(?P<tags>" + _SGLANG_TAGS + r")\] ?"
    # '[TP0] ', '[DP1 TP1 EP1] ': the time stripped, the rank tags kept
    r"|\[(?P<only_tags>(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] ?"
    # '2026-04-14 16:08:49 TP0 ': both brackets lost (only with the whole date: a bare time of day
    # followed by a space is too common in other programs' lines)
    r"|(?P<ydate>\d{4}-\d{2}-\d{2})[ T](?P<ytime>\d{2}:\d{2}):(?P<ysec>\d{2})(?:[.,](?P<yms>\d{3}))?"
    r"(?P<ytags>" + _SGLANG_TAGS + r") "
)
VLLM_PARTIAL_RE = re.compile(
    # '[loggers.py:127] ', 'INFO [loggers.py:127] ', '09-30 16:03:10 [gpu_worker.py:298] ' (the level or the
    # time stripped, or both), with or without the '(EngineCore_DP0 pid=200) ' process prefix
    r"(?:\((?P<proc>[A-Za-z][\w ]*?)(?: rank=\d+)? pid=\d+(?:, ip=[^)]*)?\) ?)?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) )?"
    r"(?:(?P<md>\d{2}-\d{2}) (?P<time>\d{2}:\d{2}:\d{2})(?:[.,]\d+)? )?"
    r"(?:\[(?P<file>[\w.-]+\.py):\d+\] "
    # 'INFO 09-30 16:03:10 ' with the '[file:N] ' stripped
    r"|(?<=\d ))"
)
_LEVELS = ("DEBUG ", "INFO ", "WARNING ", "ERROR ", "CRITICAL ")
_BLANK = (" ", "\t")  # a second space or a tab after a header (pastes, collectors): not the message


@dataclass(slots=True)
class Header:
    engine: str | None
    msg: str
    ts: float | None = None
    dp_rank: str = "0"
    tp_rank: int | None = None
    pp_rank: int | None = None
    level: str | None = None
    process: str | None = None
    tod: float | None = None  # seconds since midnight of a damaged header that lost its date


_EPOCH_CACHE: dict[str, float] = {}
_TAGS_CACHE: dict[str, tuple[str, int | None, int | None]] = {}


def minute_epoch(ymdhm: str) -> float:
    """Unix time of local ``YYYY-MM-DD HH:MM`` (cached: one mktime per minute of log)."""
    v = _EPOCH_CACHE.get(ymdhm)
    if v is None:
        if len(_EPOCH_CACHE) > 4096:
            _EPOCH_CACHE.clear()
        v = time.mktime((int(ymdhm[:4]), int(ymdhm[5:7]), int(ymdhm[8:10]), int(ymdhm[11:13]), int(ymdhm[14:16]), 0, 0, 0, -1))
        _EPOCH_CACHE[ymdhm] = v
    return v


def sglang_ts(ymdhm: str, sec: str, ms: str | None) -> float:
    """Unix time of an SGLang header's ``YYYY-MM-DD HH:MM``, ``SS`` and optional ``mmm``."""
    m = _EPOCH_CACHE.get(ymdhm)  # minute_epoch's cache, read here: every sample comes this way
    ts = (minute_epoch(ymdhm) if m is None else m) + int(sec)
    if ms:
        ts += int(ms) / 1000.0
    return ts


def sglang_tags(tags: str) -> tuple[str, int | None, int | None]:
    """``' DP1 PP0 TP4 EP4'`` -> (dp_rank, tp_rank, pp_rank); cached, tag strings are few."""
    v = _TAGS_CACHE.get(tags)
    if v is None:
        dp, tp, pp = "0", None, None
        for name, num in SGLANG_TAG_RE.findall(tags):
            if name == "DP":
                dp = num
            elif name == "TP":
                tp = int(num)
            elif name == "PP":
                pp = int(num)
        v = (dp, tp, pp)
        if len(_TAGS_CACHE) < 4096:
            _TAGS_CACHE[tags] = v
    return v


def rfc3339_epoch(s: str) -> float:
    """Unix time of an RFC3339 timestamp with any number of fraction digits."""
    date, _, rest = s.partition("T")
    tz = 0
    if rest.endswith("Z"):
        rest = rest[:-1]
    else:
        sign = 1 if rest[-6 if rest[-3] == ":" else -5] == "+" else -1
        off = rest[-6:] if rest[-3] == ":" else rest[-5:]
        rest = rest[: -len(off)]
        off = off[1:].replace(":", "")
        tz = sign * (int(off[:2]) * 3600 + int(off[2:]) * 60)
    hms, _, frac = rest.partition(".")
    y, mo, d = (int(x) for x in date.split("-"))
    h, mi, se = (int(x) for x in hms.split(":"))
    return calendar.timegm((y, mo, d, h, mi, se, 0, 0, 0)) - tz + (float("0." + frac) if frac else 0.0)


def strip_collector(line: str) -> tuple[str, float | None]:
    """Remove a collector prefix and ANSI codes and ``\\r``; return the line and the collector's
    timestamp (Unix seconds) when it carried one."""
    if "\r" in line:
        # vLLM's multi-line messages end in '\r\n'; tqdm bars overwrite with '\r': keep the last
        line = line.rstrip("\r\n")
        if "\r" in line:
            line = line.rsplit("\r", 1)[-1] or line.replace("\r", "")
    if "\x1b" in line:
        line = ANSI_RE.sub("", line)
    cts = None
    c = line[:1]
    if c == "[":  # an SGLang header right away: no collector prefix starts with '['
        return line, None
    if c == "{":
        return unwrap_json(line)
    m = COLLECTOR_RE.match(line)
    if m is not None:
        try:
            if m.group("cts"):
                cts = rfc3339_epoch(m.group("cts"))
            elif m.group("dcts"):
                d = m.group("dcts")
                cts = minute_epoch(d[:16]) + float(d[17:])
        except (ValueError, IndexError):
            cts = None
        line = line[m.end() :]
        if line[:1] == "{":
            line, jts = unwrap_json(line)
            cts = jts if jts is not None else cts
    return line, cts


def unwrap_json(line: str) -> tuple[str, float | None]:
    """JSON-per-line wrappers: Docker's json-file ``{"log": ..., "time": ...}`` and vLLM's
    ``--logging-config.formatter json`` (0.32+) ``{"asctime", "levelname", "processName",
    "message"}``. The vLLM form is rebuilt as a classic header line so one parser serves both.
    Anything else (or broken JSON) is returned unchanged."""
    try:
        obj = json.loads(line)
    except ValueError:
        return line, None
    if not isinstance(obj, dict):
        return line, None
    if isinstance(obj.get("log"), str):
        cts = None
        t = obj.get("time")
        if isinstance(t, str):
            try:
                cts = rfc3339_epoch(t)
            except (ValueError, IndexError):
                cts = None
        inner, its = strip_collector(obj["log"].rstrip("\n"))
        return inner, its if its is not None else cts
    msg = obj.get("message")
    asctime = obj.get("asctime")
    if isinstance(msg, str) and isinstance(asctime, str) and len(asctime) >= 19:
        level = obj.get("levelname") or "INFO"
        proc = obj.get("processName")
        head = f"({proc} pid={obj.get('process', 0)}) " if proc else ""
        name = str(obj.get("name") or "vllm").rsplit(".", 1)[-1]
        return f"{head}{level} {asctime[5:10]} {asctime[11:19]} [{name}.py:0] {msg}", minute_epoch(asctime[:16]) + int(asctime[17:19])
    return line, None


def split_header(line: str, engine: str | None, year: int) -> Header:
    """Find the engine's logging header in an already unwrapped line.

    ``engine`` restricts the search when the source's engine is known; ``year`` completes vLLM's
    year-less timestamps. Returns ``Header(engine=None, msg=line)`` when no header is present
    (continuations, tracebacks, third-party prints), so message parsers can still run.
    """
    if engine != VLLM:
        m = SGLANG_HEADER_RE.match(line) if line[:1] == "[" else SGLANG_HEADER_RE.search(line)
        if m is not None:
            ymdhm, sec, ms, tags = m.groups()
            ts = sglang_ts(ymdhm, sec, ms)
            if tags:
                dp, tp, pp = sglang_tags(tags)
                msg = line[m.end() :]
                return Header(SGLANG, msg.lstrip(" \t") if msg[:1] in _BLANK else msg, ts, dp, tp, pp)
            msg = line[m.end() :]
            return Header(SGLANG, msg.lstrip(" \t") if msg[:1] in _BLANK else msg, ts)
    if engine != SGLANG:
        m = VLLM_HEADER_RE.search(line)
        if m is not None:
            md = m.group("md")
            t = m.group("time")
            ts = minute_epoch(f"{year:04d}-{md} {t[:5]}") + int(t[6:8])
            proc = m.group("proc")
            if proc is None:
                pm = VLLM_PROC_RE.search(line, 0, m.start() + 1)
                proc = pm.group("proc") if pm else None
            msg = line[m.end() :]
            h = Header(VLLM, msg.lstrip(" \t") if msg[:1] in _BLANK else msg, ts, level=m.group("level"), process=proc)
            if proc:
                dm = VLLM_DP_RE.search(proc)
                if dm:
                    h.dp_rank = dm.group(1)
            return h
        if engine == VLLM:
            pm = VLLM_PROC_RE.search(line)
            if pm is not None and (".py:" not in line or VLLM_PARTIAL_RE.match(line, pm.start()) is None):
                h = Header(VLLM, line[pm.end() :], process=pm.group("proc"))
                dm = VLLM_DP_RE.search(pm.group("proc"))
                if dm:
                    h.dp_rank = dm.group(1)
                return h
    h = damaged_header(line, engine, year)
    return Header(None, line) if h is None else h


def damaged_header(line: str, engine: str | None, year: int) -> Header | None:
    """The remains of an SGLang or vLLM header at the start of ``line`` (see SGLANG_PARTIAL_RE and
    VLLM_PARTIAL_RE), or None. The header's engine stays unknown: the message decides, as for a
    line without header; the time is kept only where the date survived (vLLM's year-less date
    takes ``year``)."""
    c = line[:1]
    if engine != VLLM and (c == "[" or "0" <= c <= "9"):  # cheap gates: most header-less lines fail them
        m = SGLANG_PARTIAL_RE.match(line)
        if m is not None:
            h = Header(None, line[m.end() :].lstrip(" \t"))
            g = m.groupdict()
            if g["ydate"]:  # no bracket at all
                g["date"], g["time"], g["sec"], g["ms"], g["tags"] = g["ydate"], g["ytime"], g["ysec"], g["yms"], g["ytags"]
            tags = g["tags"] or g["only_tags"]
            if tags:
                h.dp_rank, h.tp_rank, h.pp_rank = sglang_tags(" " + tags if g["only_tags"] else tags)
            date, hm, sec, ms = g["date"], g["time"], g["sec"], g["ms"]
            if hm and not date:
                hh, mm = hm.split(":")
                h.tod = int(hh) * 3600 + int(mm) * 60 + int(sec) + (int(ms) / 1000.0 if ms else 0.0)
            if date:
                ymd = date if len(date) == 10 else f"{year:04d}-{date}"
                try:
                    h.ts = sglang_ts(f"{ymd} {hm}", sec, ms)
                except (ValueError, OverflowError):
                    h.ts = None
            return h
    if engine != SGLANG and (".py:" in line[:400] or line.startswith(_LEVELS)):
        m = VLLM_PARTIAL_RE.match(line)
        if m is not None and (m.group("file") or m.group("md")):
            h = Header(None, line[m.end() :], process=m.group("proc"))
            md = m.group("md")
            if md:
                t = m.group("time")
                try:
                    h.ts = minute_epoch(f"{year:04d}-{md} {t[:5]}") + int(t[6:8])
                except (ValueError, OverflowError):
                    h.ts = None
            if h.process:
                dm = VLLM_DP_RE.search(h.process)
                if dm:
                    h.dp_rank = dm.group(1)
            return h
    return None
