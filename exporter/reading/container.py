"""Container log formats: what a record is, decoded from the raw bytes of one line.

Docker's json-file driver writes ``{"log":"<message>\\n","stream":"stderr","time":"..."}`` per
line; a message longer than 16 KiB is split into several records and only the last one's ``log``
ends in ``\\n``. The CRI format (containerd, CRI-O, kubelet's ``/var/log/pods``) writes
``<RFC3339> <stream> <P|F> <message>``; ``P`` records are partial and continue until the ``F``.
The format of a file is detected from its first line (``detect``); plain files pass through.

The format knowledge lives here, outside ``exporter.sources``, because every reader needs it
(replay and report too). Joining records into messages, the byte accounting and the line cap live in
:mod:`exporter.reading.reader`, the one reading layer every entry point uses.
"""

from __future__ import annotations

import json
import os
import re
from typing import NamedTuple

PLAIN = "plain"
DOCKER = "docker"
CRI = "cri"

_BOM = b"\xef\xbb\xbf"
_DOCKER_HEAD = re.compile(rb'\{\s*"log"\s*:')
CRI_RE = re.compile(rb"(\d{4}-\d\d-\d\dT[^ ]+) (stdout|stderr) ([PF])(?: (.*))?", re.S)


def detect(first_line: bytes | str) -> str:
    """The format of a file whose first line (raw, without its newline) is ``first_line``. Only the
    start of the line is looked at, so a first record cut by the line cap is still recognised."""
    b = first_line.encode("utf-8", "replace") if isinstance(first_line, str) else first_line
    if b.startswith(_BOM):
        b = b[3:]
    if _DOCKER_HEAD.match(b):
        return DOCKER
    if CRI_RE.match(b[:200]) or CRI_RE.fullmatch(b):
        return CRI
    return PLAIN


class Record(NamedTuple):
    """One container record: its message bytes, whether it ends the message, its time and stream."""

    msg: bytes
    final: bool
    time: str | None
    stream: str


def docker_record(raw: bytes) -> Record | None:
    """A json-file record, or None when ``raw`` is not one (passed through as a plain line)."""
    if raw[:1] != b"{":
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    msg = obj.get("log")
    if not isinstance(msg, str):
        return None
    t = obj.get("time")
    stream = obj.get("stream")
    final = msg.endswith("\n")
    if final:
        msg = msg[:-1]
    return Record(
        msg.encode("utf-8", "surrogatepass"),
        final,
        t if isinstance(t, str) and t[:4].isdigit() and " " not in t else None,
        stream if stream in ("stdout", "stderr") else "stdout",
    )


def cri_record(raw: bytes) -> Record | None:
    """A CRI record, or None when ``raw`` is not one."""
    m = CRI_RE.fullmatch(raw)
    if m is None:
        return None
    return Record(m.group(4) or b"", m.group(3) == b"F", m.group(1).decode("ascii", "replace"), m.group(2).decode("ascii"))


def record_parser(fmt: str):
    """The record decoder of a container format (None for plain)."""
    return {DOCKER: docker_record, CRI: cri_record}.get(fmt)


# The same records read in bulk, in C (exporter/_scan.c ``unwrap``): the whole ASCII records a
# chunk holds that need no joining or cutting, handed on as the Reader hands them on; the Reader
# reads the rest itself. None without the extension (or with HCE_PURE_PYTHON=1, as the scanner).
try:
    if os.environ.get("HCE_PURE_PYTHON"):
        raise ImportError("HCE_PURE_PYTHON is set")
    from .._scan import unwrap as native_unwrap  # type: ignore[attr-defined]
except ImportError:
    native_unwrap = None
UNWRAP_CODES = {DOCKER: "d", CRI: "c"}
