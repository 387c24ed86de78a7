"""Container log formats, unwrapped before parsing.

Docker's json-file driver writes ``{"log":"<message>\\n","stream":"stderr","time":"..."}`` per
line; a message longer than 16 KiB is split into several records and only the last one's ``log``
ends in ``\\n``. The CRI format (containerd, CRI-O, ``/var/log/pods``) writes
``<RFC3339> <stream> <P|F> <message>``; ``P`` records are partial and are joined until the ``F``.
The format is detected per file from its first line; plain files pass through untouched.
"""

from __future__ import annotations

import json
import re

PLAIN = "plain"
DOCKER = "docker"
CRI = "cri"

CRI_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\S+) (stdout|stderr) ([PF])(?: (.*))?$", re.S)


def detect(first_line: str) -> str:
    """The format of a file whose first line is ``first_line``."""
    s = first_line.lstrip("\ufeff")
    if s.startswith("{") and '"log"' in s:
        try:
            obj = json.loads(s)
        except ValueError:
            return PLAIN
        if isinstance(obj, dict) and isinstance(obj.get("log"), str):
            return DOCKER
        return PLAIN
    if CRI_RE.match(s):
        return CRI
    return PLAIN


class Unwrapper:
    """Turns the raw lines of a file into log messages (joining partial records).

    ``pending_bytes`` is the size in the file of the records held for an unfinished message, so
    the caller can compute the offset of the last complete message.
    """

    __slots__ = ("fmt", "parts", "pending_bytes", "max_line", "overlong")

    def __init__(self, fmt: str | None = None, max_line: int = 1 << 20) -> None:
        self.fmt = fmt  # None = not detected yet (decided by the first line)
        self.parts: list[str] = []
        self.pending_bytes = 0
        self.max_line = max_line
        self.overlong = 0

    def reset(self) -> None:
        self.parts.clear()
        self.pending_bytes = 0

    def unwrap(self, lines: list[str]) -> list[str]:
        if not lines:
            return lines
        if self.fmt is None:
            self.fmt = detect(lines[0])
        if self.fmt == PLAIN:
            return lines
        out: list[str] = []
        docker = self.fmt == DOCKER
        for raw in lines:
            if docker:
                msg, done = self._docker(raw)
            else:
                msg, done = self._cri(raw)
            if msg is None:  # not in the container format: pass through as is
                if self.parts:
                    out.append(self._join())
                out.append(raw)
                continue
            if not done:
                if sum(len(p) for p in self.parts) < self.max_line:
                    self.parts.append(msg)
                self.pending_bytes += len(raw.encode("utf-8", "replace")) + 1
                continue
            if self.parts:
                self.parts.append(msg)
                out.append(self._join())
            else:
                out.append(msg)
        return out

    def _join(self) -> str:
        s = "".join(self.parts)
        self.reset()
        if len(s) > self.max_line:
            self.overlong += 1
            s = s[: self.max_line]
        return s

    @staticmethod
    def _docker(raw: str) -> tuple[str | None, bool]:
        if not raw.startswith("{"):
            return None, True
        try:
            obj = json.loads(raw)
            msg = obj["log"]
        except (ValueError, KeyError, TypeError):
            return None, True
        if not isinstance(msg, str):
            return None, True
        if msg.endswith("\n"):
            return msg[:-1], True
        return msg, False

    @staticmethod
    def _cri(raw: str) -> tuple[str | None, bool]:
        m = CRI_RE.match(raw)
        if m is None:
            return None, True
        return m.group(4) or "", m.group(3) == "F"

    def flush(self) -> str | None:
        """The held partial message at the end of a finished file."""
        if not self.parts:
            self.pending_bytes = 0
            return None
        return self._join()
