"""Re-render an engine log in the formats a server or its platform may write it in
(docs/formats/README.md#formats-read), with the real formatters: the standard library's
``logging.Formatter`` for a logging config's header, python-json-logger for JSON (vLLM's
``--logging-config.formatter json`` uses it), structlog's ``JSONRenderer`` and ``LogfmtRenderer``,
and the shapes Docker's json-file driver, CRI runtimes, ``journalctl -o short-iso`` and a
collector's ``[date time] `` stamp give.

A line with an engine's default header becomes one record (its time, level, rank tags, process,
file, line number and message); any other line (tracebacks, uvicorn's prints, tqdm) is what a
program printed past the logging system, and stays as it is in the record formats (JSON, logfmt,
a config's header) or gets the wrapper's own prefix (collectors, Docker, CRI, journald). The
zone is the process's (the suite pins UTC), the year of vLLM's year-less times the one the
exporter gives them (the current year, with its Dec -> Jan rollover).
"""

from __future__ import annotations

import calendar
import io
import json
import logging
import re
import time
from dataclasses import dataclass

from parsers.clock import minute_epoch, sglang_ts
from parsers.header.prefix import SGLANG_HEADER_RE, VLLM_HEADER_RE, sglang_tags

FORMATS = ("default", "config", "json", "structlog", "logfmt", "collector", "docker", "cri", "journald")


@dataclass
class Rec:
    epoch: float
    engine: str
    msg: str
    tags: str = ""  # ' DP1 TP0' (SGLang)
    level: str = "INFO"
    proc: str | None = None  # vLLM process name
    pid: int = 1
    file: str = "scheduler.py"
    lineno: int = 1


_WRAPPER_YEAR = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")


def records(lines: list[str], year: int | None = None) -> list[Rec | str]:
    year = year or time.localtime().tm_year
    out: list[Rec | str] = []
    last = None
    for line in lines:
        m = SGLANG_HEADER_RE.match(line)
        if m is not None:
            ymdhm, sec, ms, tags = m.groups()
            rest = line[m.end() :]
            if rest[:1] in (" ", "\t") or not rest:
                out.append(line)  # a header with nothing or blanks after it: keep the line as it is
                continue
            out.append(Rec(sglang_ts(ymdhm, sec, ms), "sglang", rest, tags))
            continue
        plain = _ANSI.sub("", line).rstrip("\r")
        m = VLLM_HEADER_RE.search(plain)  # after a VLLM_LOGGING_PREFIX or a collector's prefix too
        if m is not None:
            md, t = m.group("md"), m.group("time")
            if _WRAPPER_YEAR.match(plain):  # a wrapper's own stamp (docker logs -t) dates the line: its year, as the exporter reads it
                year, last = int(plain[:4]), None
            ts = minute_epoch(f"{year:04d}-{md} {t[:5]}") + int(t[6:8])
            if last is not None and ts < last - 180 * 86400:  # the exporter's Dec -> Jan rollover
                year += 1
                ts = minute_epoch(f"{year:04d}-{md} {t[:5]}") + int(t[6:8])
            last = ts if last is None else max(last, ts)
            pid = 1
            pm = plain[: m.start("level")]
            if " pid=" in pm:
                pid = int(pm.split(" pid=", 1)[1].split(")")[0].split(",")[0])
            proc = m.group("proc") or (pm.rsplit("(", 1)[-1].split(" ")[0] if " pid=" in pm else None)
            r = Rec(
                ts, "vllm", plain[m.end() :], "", m.group("level"), proc, pid, m.group("file").rsplit("/", 1)[-1], int(m.group("lineno"))
            )
            out.append(r if plain == line and m.start() == 0 else _Timed(line, ts))
            continue
        out.append(line)
    return out


class _Timed(str):
    """A line kept as it is (a prefix, colours or a carriage return the record formats would not
    print) whose time is known: the time a wrapper around it gives."""

    epoch: float

    def __new__(cls, line: str, epoch: float) -> _Timed:
        self = super().__new__(cls, line)
        self.epoch = epoch
        return self


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _log_record(r: Rec) -> logging.LogRecord:
    rec = logging.makeLogRecord(
        {"name": f"{r.engine}.srt" if r.engine == "sglang" else "vllm.v1", "levelname": r.level, "levelno": getattr(logging, r.level),
         "pathname": f"/src/{r.file}", "filename": r.file, "lineno": r.lineno, "msg": r.msg, "args": None,
         "created": r.epoch, "msecs": round((r.epoch % 1) * 1000, 3), "process": r.pid, "processName": r.proc or "MainProcess"}
    )  # fmt: skip
    dp, tp, pp = sglang_tags(r.tags) if r.tags else ("0", None, None)
    if r.tags:  # what a logging filter adding the ranks would put on the record
        rec.dp_rank = int(dp)
        if tp is not None:
            rec.tp_rank = tp
        if pp is not None:
            rec.pp_rank = pp
    return rec


def _iso(epoch: float, sep: str = "T", digits: int = 6, zone: str = "Z") -> str:
    frac = f"{epoch % 1:.{digits}f}"[1:] if digits else ""
    return time.strftime(f"%Y-%m-%d{sep}%H:%M:%S", time.gmtime(epoch)) + frac + zone


def render(fmt: str, lines: list[str]) -> str:
    """The text of ``lines`` (one engine log) in format ``fmt`` (one of FORMATS)."""
    if fmt == "default":
        return "".join(ln + "\n" for ln in lines)
    recs = records(lines)
    if fmt in ("collector", "docker", "cri", "journald"):
        return _wrapped(fmt, lines, recs)
    out = io.StringIO()
    if fmt == "config":
        sgl = logging.Formatter("[%(asctime)s.%(msecs)03d][%(filename)s:%(lineno)d][%(levelname)s]: %(message)s", "%Y-%m-%d %H:%M:%S")
        sgl_tags = logging.Formatter(
            "[%(asctime)s.%(msecs)03d][%(ranks)s][%(filename)s:%(lineno)d][%(levelname)s]: %(message)s", "%Y-%m-%d %H:%M:%S"
        )
        vl = logging.Formatter(
            "[%(asctime)s.%(msecs)03d][%(processName)s pid=%(process)d][%(filename)s:%(lineno)d][%(levelname)s]: %(message)s",
            "%Y-%m-%d %H:%M:%S",
        )
        for r in recs:
            if isinstance(r, str):
                out.write(r + "\n")
                continue
            rec = _log_record(r)
            if r.engine == "vllm":
                f = vl
            elif r.tags:
                rec.ranks = r.tags.strip()
                f = sgl_tags
            else:
                f = sgl
            out.write(f.format(rec) + "\n")
    elif fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        jf = JsonFormatter("%(asctime)s %(levelname)s %(name)s %(processName)s %(process)d %(message)s")
        for r in recs:
            out.write((r if isinstance(r, str) else jf.format(_log_record(r))) + "\n")
    else:  # structlog's renderers: the event dict a processor chain builds
        import structlog

        render_ = (
            structlog.processors.JSONRenderer()
            if fmt == "structlog"
            else structlog.processors.LogfmtRenderer(key_order=["timestamp", "level", "event"])
        )
        for r in recs:
            if isinstance(r, str):
                out.write(r + "\n")
                continue
            ev = {"event": r.msg, "level": r.level.lower(), "timestamp": _iso(r.epoch), "logger": r.engine}
            if r.proc:
                ev["process_name"] = r.proc
            if r.tags:
                dp, tp, pp = sglang_tags(r.tags)
                ev["dp_rank"] = int(dp)
                if tp is not None:
                    ev["tp_rank"] = tp
                if pp is not None:
                    ev["pp_rank"] = pp
            out.write(render_(None, None, ev) + "\n")
    return out.getvalue()


def _wrapped(fmt: str, lines: list[str], recs: list[Rec | str]) -> str:
    """A wrapper around every line as printed: the time of the line (or of the last one before it)."""
    times = []
    last = next((r.epoch for r in recs if hasattr(r, "epoch")), calendar.timegm((2026, 1, 1, 0, 0, 0)))
    for r in recs:
        if hasattr(r, "epoch"):
            last = r.epoch
        times.append(last)
    out = io.StringIO()
    for line, t in zip(lines, times, strict=True):
        if fmt == "collector":
            out.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(t))}] {line}\n")
        elif fmt == "docker":
            out.write(json.dumps({"log": line + "\n", "stream": "stderr", "time": _iso(t, digits=9)}) + "\n")
        elif fmt == "cri":
            out.write(f"{_iso(t, digits=9)} stderr F {line}\n")
        else:  # journalctl -o short-iso
            out.write(f"{_iso(t, digits=0, zone='+0000')} gpu-node-3 sglang[4242]: {line}\n")
    return out.getvalue()
