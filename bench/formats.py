"""The benchmark log in the formats other than the engine's default (docs/formats/README.md):
what a line costs when no fast path reads its header (bench/run.py, section "formats").

Each line of an SGLang log with the default header becomes the same record in:

* ``config``: a logging config's header, ``[2026-03-02 08:01:44.000][scheduler.py:212][INFO]: ``;
* ``json``: python-json-logger's shape, ``{"asctime": ..., "levelname": ..., "name": ..., "message": ...}``;
* ``logfmt``: ``ts=2026-03-02T08:01:44Z level=info msg="..."``;
* ``collector``: a collector's ``[date time] `` stamp before the whole default line;
* ``docker``: Docker's json-file record around the whole default line, as the driver writes it
  (``{"log":"...\\n","stream":"stderr","time":"<RFC 3339, nanoseconds>"}``, no blanks);
* ``cri``: a CRI runtime's record (``<RFC 3339> stderr F <line>``, containerd, CRI-O).

The rank tags go into the header (a ``[DP1 TP0]`` group, ``dp_rank``/``tp_rank`` fields) so the
exposition is the default's. Written without the real formatters (the benchmark has no test
extras); tests/formats_support.py renders with them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

FORMATS = ("default", "config", "json", "logfmt", "collector", "docker", "cri")
_HEADER = re.compile(r"\[(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})(?:\.(\d{3}))?([^\]\[]*)\] (.*)")
_TAG = re.compile(r"(DP|TP|PP)(\d+)")


def _one(fmt: str, line: str) -> str:
    m = _HEADER.fullmatch(line)
    if fmt in ("docker", "cri") and m is None:
        m = _HEADER.fullmatch("[2026-01-01 00:00:00] " + line)  # every line is a record (a time of its own)
    if m is None or fmt == "default":
        return line
    date, hms, ms, tags, msg = m.groups()
    if fmt == "collector":
        return f"[{date} {hms}] {line}"
    if fmt in ("docker", "cri"):
        # Go's RFC3339Nano, as the runtimes write it: nanoseconds without their trailing zeros
        frac = f"{int(ms or 0) * 1_000_000:09d}".rstrip("0")
        t = f"{date}T{hms}{'.' + frac if frac else ''}Z"
        if fmt == "cri":
            return f"{t} stderr F {line}"
        return json.dumps({"log": line + "\n", "stream": "stderr", "time": t}, separators=(",", ":"))
    ms = ms or "000"
    ranks = {f"{k.lower()}_rank": int(v) for k, v in _TAG.findall(tags)}
    if fmt == "config":
        group = f"[{tags.strip()}]" if tags.strip() else ""
        return f"[{date} {hms}.{ms}]{group}[scheduler.py:212][INFO]: {msg}"
    if fmt == "json":
        return json.dumps(
            {"asctime": f"{date} {hms},{ms}", "levelname": "INFO", "name": "sglang.srt.managers.scheduler", "message": msg, **ranks}
        )
    esc = msg.replace("\\", "\\\\").replace('"', '\\"')
    return f'ts={date}T{hms}.{ms}Z level=info {" ".join(f"{k}={v}" for k, v in ranks.items())}{" " if ranks else ""}msg="{esc}"'


def render_file(src: Path, fmt: str, dst: Path) -> Path:
    """``src`` rewritten in ``fmt`` at ``dst`` (kept when it exists and is newer)."""
    if dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime:
        return dst
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for line in f:
            out.write(_one(fmt, line.rstrip("\n")) + "\n")
    return dst
