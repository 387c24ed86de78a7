"""The exporter's own log (stderr) in the formats of the Prometheus ecosystem: ``--log.format``
``logfmt`` (the default, like node_exporter and the exporter-toolkit's promslog) or ``json``, at
``--log.level``. One record per line, so log shippers need no multi-line rules.
"""

from __future__ import annotations

import json
import logging
import sys
import time

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "warning": logging.WARNING, "error": logging.ERROR}
FORMATS = ("logfmt", "json")
_NAMES = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn", logging.ERROR: "error", logging.CRITICAL: "error"}


def _ts(record: logging.LogRecord) -> str:
    t = time.gmtime(record.created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, str]:
    out = {
        "ts": _ts(record),
        "level": _NAMES.get(record.levelno, record.levelname.lower()),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    if record.exc_info:
        out["err"] = logging.Formatter().formatException(record.exc_info)
    return out


def _logfmt_value(v: str) -> str:
    if v and not any(c in v for c in ' "=\\\n\t') and v.isprintable():
        return v
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _fields(record).items())


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), ensure_ascii=False)


def configure(level: str = "info", fmt: str = "logfmt", stream=None) -> None:
    """Set up the root logger (replacing earlier handlers: ``serve`` calls this once at start)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
