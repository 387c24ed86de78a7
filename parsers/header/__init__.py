"""The header stage: what stands around an engine's message, peeled off in one step.

A line reaches the message parsers (:mod:`parsers.sglang`, :mod:`parsers.vllm`) as ``(time, rank
tags, engine, message)``: a :class:`Header`. What stood around the message is the line's
*envelope*, one of the :data:`ENVELOPES` below. The table is read top to bottom; each entry says
how its envelope is detected, how it is peeled, its fast form and the fixtures that hold it
(docs/formats/README.md#formats-read shows the same table).

Rules (the numbered invariants of this stage):

1. **Decided once per source.** A source's :class:`Stage` keeps the envelope its lines came in.
   The first line with an envelope decides it, the way the engine is decided; a line in another
   envelope (the server reconfigured, a second writer) re-decides it, and the change is counted
   (``Stage.changes``; ``serve``'s ``hybrid_cache_exporter_log_format_changes_total``). A line
   without any header (a traceback, a print) changes nothing.
2. **Peeled in one step.** A line of a shape the source printed before is read by the template
   learned from it (:mod:`parsers.header.templates`: one ``match``), and the bulk scanner reads
   runs of such lines without Python per line. Any other line is read by the generic chain,
   :func:`read_header`: a collector's prefix, a JSON or logfmt record (twice at most), then the
   engine's header or any other (``split_header``, ``preamble``).
3. **The same header either way.** A template is kept only when it reads the line it was made
   from exactly as the generic chain did, and it gives up on any line whose message the chain
   would read otherwise (tests/parsers/test_templates.py compares them on every fixture in every
   format). The level is the one field the fast path leaves unread (nothing downstream uses it).
4. **Pure apart from the source's own object.** Nothing here reads or writes anything but the
   :class:`Stage` it is called on; :meth:`Stage.read` learns and counts nothing (the samples are
   read again with it).

Docker's json-file and CRI records are envelopes too, but of bytes: their records are joined and
unwrapped by the reading layer (``exporter/reading/reader.py``, ``exporter/reading/container.py``) before a line
exists, and the line inside is then read here like any other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .. import sglang, vllm
from ..clock import minute_epoch, rfc3339_epoch
from ..events import SGLANG, VLLM, Line
from ..foreign import foreign
from . import learning, structured, templates
from .prefix import COLLECTOR_RE, SGLANG_HEADER_RE, Header, split_header, strip_collector
from .templates import Template

__all__ = ["ENVELOPES", "Envelope", "Header", "Stage", "envelope_of", "read_header"]

NONE = "none"  # no header at all: decides nothing


@dataclass(frozen=True)
class Envelope:
    """One entry of the catalogue: an envelope a line may come in."""

    name: str
    example: str
    detected: str  # how the stage (or the reading layer) tells it
    peeled: str  # what peels it, and its fast form
    fixtures: tuple[str, ...]  # files that hold it (the format-invariance test renders every engine fixture in each)


ENVELOPES: tuple[Envelope, ...] = (
    Envelope(
        "docker",
        '{"log":"[2026-03-02 08:01:44 TP0] Decode batch, ...\\n","stream":"stderr","time":"2026-03-02T08:01:44.123456789Z"}',
        "the reading layer, from the file's first line (`exporter/reading/container.py` `detect`)",
        "records decoded and split ones joined (`Reader`); a chunk of whole ASCII records by the C unwrapper (`_scan.unwrap`)",
        ("tests/formats_support.py docker",),
    ),
    Envelope(
        "cri",
        "2026-03-02T08:01:44.123456789Z stderr F [2026-03-02 08:01:44 TP0] Decode batch, ...",
        "the reading layer, from the file's first line (`exporter/reading/container.py` `detect`)",
        "`P` records joined (`Reader`); a chunk of whole ASCII `F` records by the C unwrapper (`_scan.unwrap`)",
        ("tests/formats_support.py cri",),
    ),
    Envelope(
        "collector",
        "[2026-03-02 08:01:44] [2026-03-02 08:01:44 TP0] Decode batch, ...",
        "a collector's prefix before the line: `docker logs -t`'s RFC 3339 time, CRI's `time stream F` in a text file, "
        "compose's `service | `, journald's `short-iso`, a `[date time] ` stamp before an engine header (`prefix.COLLECTOR_RE`)",
        "`prefix.strip_collector`, then what it wraps; a template (prefix + SGLang's header)",
        ("fixtures/formats/vllm-collector-stamp.log", "tests/formats_support.py collector, journald"),
    ),
    Envelope(
        "json",
        '{"asctime": "2026-03-02 08:01:44,123", "levelname": "INFO", "name": "sglang.srt", "message": "Decode batch, ..."}',
        "a line that starts with `{` and decodes to an object with a message key (`structured.MESSAGE_KEYS`)",
        "`structured.json_record` (the message, time and rank fields, nested ones too); a template of the object's keys",
        ("fixtures/formats/vllm-json.log", "fixtures/formats/sglang-structured.log", "tests/formats_support.py json, structlog"),
    ),
    Envelope(
        "logfmt",
        'ts=2026-03-02T08:01:44.123Z level=info msg="Decode batch, ..."',
        "a line of `key=value` pairs only, one of them a message key",
        "`structured.logfmt_record`; a template of its keys",
        ("fixtures/formats/sglang-structured.log", "tests/formats_support.py logfmt"),
    ),
    Envelope(
        "sglang",
        "[2026-03-02 08:01:44 DP1 TP0] Decode batch, ...",
        "`[YYYY-MM-DD HH:MM:SS(.mmm) TAGS] ` (`headers.sglang_header`)",
        "`prefix.split_header`; batch lines by the sampler's learned shapes and the bulk scanner, no header object",
        ("fixtures/sglang/", "fixtures/scenarios/"),
    ),
    Envelope(
        "vllm",
        "(EngineCore_DP0 pid=7) INFO 03-02 08:01:44 [loggers.py:127] Engine 000: ...",
        "`[(Name pid=N) ]LEVEL MM-DD HH:MM:SS [file:N] ` (`headers.VLLM_PROC`, `prefix.VLLM_HEADER_RE`)",
        "`prefix.split_header`; access lines by the sampler (`_is_vllm_access`)",
        ("fixtures/vllm/", "fixtures/formats/vllm-logging-prefix.log"),
    ),
    Envelope(
        "config",
        "[2026-03-02 08:01:44.123][DP1 TP0][scheduler.py:212][INFO]: Decode batch, ...",
        "header tokens (times, levels, rank tags, `[...]` groups, files, names) before a known message start",
        "`preamble.locate`; a template of the tokens when they are `[...]` groups, times, levels and tags after a `[`",
        ("fixtures/formats/sglang-logging-config.log", "fixtures/formats/pasted-bug-report.log", "tests/formats_support.py config"),
    ),
    Envelope(
        NONE,
        "Traceback (most recent call last):",
        "none of the above",
        "the line is the message",
        ("fixtures/sglang/", "fixtures/vllm/"),
    ),
)
_TEMPLATED = frozenset(("collector", "json", "logfmt", "config"))
MAX_TEMPLATES = 8  # per source: a server writes a handful of header shapes
MAX_TRIES = 32  # lines of a templated envelope no template could be made from, per decision


def read_header(raw: str, engine: str | None = None, year: int = 2026) -> Header:
    """The generic chain: everything around the message of any line, read token by token.

    A collector's prefix (:func:`parsers.header.prefix.strip_collector`), a JSON or logfmt record
    (:mod:`parsers.header.structured`, twice at most: Docker's ``log`` holding a JSON formatter's
    line), then the engine's header or any other (:func:`parsers.header.prefix.split_header`). The
    time is the engine header's own, else the record's, else the collector's
    (docs/formats/README.md#time); ``Header.via`` names what was read, for ``replay --explain``."""
    line, cts = strip_collector(raw)
    rec = None
    for _ in range(2):
        c = line[:1]
        if c != "{" and not ("=" in line[:64] and (c.isalpha() or c == "_" or c == "@")):
            break
        r = structured.record(line, year)
        if r is None:
            break
        if rec is not None:
            structured.merge(r, rec)
        rec = r
        line, inner_cts = strip_collector(r.msg)
        if inner_cts is not None:
            cts = inner_cts
    if engine == VLLM:
        t = rec.ts if rec is not None and rec.ts is not None else cts
        if t is not None:
            year = _year_of(t)
    if rec is not None and ((engine != VLLM and sglang.starts_message(line)) or (engine != SGLANG and vllm.starts_message(line))):
        h = Header(None, line)  # a record's bare message (the usual case): no header to look for
    else:
        h = split_header(line, engine, year)
    if rec is not None:
        structured.fill(h, rec)
    if h.ts is None and cts is not None:
        h.ts = cts
        h.tod = None
    elif h.tod is not None and h.via == "preamble" and foreign(line):
        h.tod = None  # another writer's stamp (torch's '[W1104 10:12:44.361437153 ...]'): not the log's clock
    return h


def _year_of(epoch: float) -> int:
    return time.gmtime(epoch).tm_year


def envelope_of(line: str, h: Header) -> str:
    """The catalogue's name of the envelope ``line`` was read in (``h``: the generic chain's
    header of it); the outermost one when they nest (a collector's prefix over a JSON record)."""
    via = h.via
    if not via:
        return NONE
    c = line[:1]
    if c == "[":
        if via in (SGLANG, VLLM) and _stamped(line, via):
            return "collector"
    elif c != "{" and COLLECTOR_RE.match(line) is not None:
        return "collector"
    if via.startswith("json"):
        return "json"
    if via.startswith("logfmt"):
        return "logfmt"
    return "config" if via == "preamble" else via


def _stamped(line: str, via: str) -> bool:
    """A collector's untagged ``[date time] `` stamp before an engine's whole line."""
    m = SGLANG_HEADER_RE.match(line)
    return m is not None and not m.group(4) and (via == VLLM or line[m.end() : m.end() + 1] == "[")


class Stage:
    """The header stage of one source: the envelope decided, the templates learned, and the one
    call that peels a line (:meth:`peel`). Kept by the sampler, one per source (``SourceSampling``)."""

    __slots__ = ("envelope", "templates", "changes", "scan_buckets", "_tries", "_scan", "_scan_key", "_scan_ranks")

    def __init__(self) -> None:
        self.envelope: str | None = None  # the catalogue's name, once a line decided it
        self.templates: list[Template] = []  # the fast forms learned, the last used first
        self.changes = 0  # times a line re-decided the envelope
        self._tries = MAX_TRIES
        self._scan: tuple[Template, ...] = ()  # the templates the scanner was handed, in its order
        self._scan_key: tuple | None = None
        self._scan_ranks: dict[str, tuple[str, int | None, int | None]] = {}
        self.scan_buckets: dict[str, str] = {}  # a zoned time's 10-s bucket text -> the configured zone's (the sampler's)

    def peel(self, line: str, engine: str | None, year: int) -> Header:
        """The header of ``line`` (the line path): by a learned template, else by the generic chain,
        which decides the envelope (rule 1) and may teach a template (rule 2)."""
        if engine == SGLANG:
            ts = self.templates
            for i, t in enumerate(ts):
                h = t.peel(line)
                if h is not None:
                    if i:
                        ts.insert(0, ts.pop(i))
                    if t.kind != self.envelope:
                        self._decide(t.kind)
                    return h
        h = read_header(line, engine, year)
        env = envelope_of(line, h)
        if env != NONE and env != self.envelope:
            self._decide(env)
        if engine == SGLANG and env in _TEMPLATED and self._tries > 0 and len(self.templates) < MAX_TEMPLATES:
            t = learning.derive(line, h, year)
            if t is None:
                self._tries -= 1
            else:
                self.templates.insert(0, t)
        return h

    def read(self, line: str, engine: str | None, year: int) -> Header:
        """The header of ``line`` as :meth:`peel` gives it, learning and counting nothing (the
        samples, read again when they are used)."""
        if engine == SGLANG:
            for t in self.templates:
                h = t.peel(line)
                if h is not None:
                    return h
        return read_header(line, engine, year)

    def batch_line(self, line: str, shapes: Any) -> Line | None:
        """The parsed Line of a batch line of the source's current shapes (``shapes``: its
        ``parsers.shapes.LineShapes``, which imports this stage) in a learned envelope, in one
        ``fullmatch`` (the samples: :func:`parsers.parse_line`); None for any other line."""
        d, p = shapes.current.get("D"), shapes.current.get("P")
        if d is None or p is None or "\r" in line or "\x1b" in line:
            return None
        for t in self.templates:
            if t.record == "logfmt" and len(line) > templates.MAX_LOGFMT:
                continue
            got = t.batch_reader(d, p)(line)
            if got is not None:
                return got
        return None

    def _decide(self, env: str) -> None:
        if self.envelope is not None:
            self.changes += 1
        self.envelope = env
        self._tries = MAX_TRIES

    # ------------------------------------------------------------------------------------
    # the bulk scanner's side (exporter/state/scan.py)

    def scanner(self) -> tuple[tuple, ...]:
        """The learned templates the bulk scanner reads runs with (``Template.scanner``), ``()`` when the
        source's lines are in SGLang's default header (the scanner reads that itself). All of one
        time shape, so the newest time of a run is comparable."""
        if not self.templates:
            return ()
        key = tuple(id(t) for t in self.templates)
        if key != self._scan_key:
            first = self.templates[0]
            shape = _time_shape(first)
            # the one with the longest literal at the end first: a line of another is told at its end
            # (the scanner tries them in order, and takes the first that reads the line)
            same = [t for t in self.templates if _time_shape(t) == shape and t.scannable]
            self._scan = tuple(sorted(same, key=_tail_length, reverse=True))
            self._scan_key = key
            self._scan_ranks = {}
            self.scan_buckets = {}
        return tuple(t.scanner() for t in self._scan)

    def scan_ranks(self, tags: str, line: str) -> tuple[str, int | None, int | None]:
        """(dp, tp, pp) of the lines the scanner grouped under ``tags`` (the template's index and the
        text of its rank items), read from ``line``, one of them."""
        r = self._scan_ranks.get(tags)
        if r is None:
            t = self._scan[ord(tags[0]) - 48]
            h = t.peel(line) or read_header(line, SGLANG)
            r = self._scan_ranks[tags] = (h.dp_rank, h.tp_rank, h.pp_rank)
        return r

    def top_ts(self, top: tuple[str, str, str]) -> float:
        """The time of the newest line of a run the scanner read: ``(YYYY-MM-DD HH:MM, SS, fraction)``
        as its time item wrote it (the zone, if any, the scanned templates')."""
        ymdhm, sec, frac = top
        zone = self.scan_zone()
        if zone:
            z = zone if zone == "Z" or ":" in zone else zone[:3] + ":" + zone[3:]
            return rfc3339_epoch(f"{ymdhm[:10]}T{ymdhm[11:]}:{sec}{'.' + frac if frac else ''}{z}")
        return minute_epoch(ymdhm) + int(sec) + (float("0." + frac) if frac else 0.0)

    def scan_zone(self) -> str:
        """The zone text of the scanned templates' times (``''``: none, the text is the wall time)."""
        return self._scan[0].zone if self._scan else ""


def _tail_length(t: Template) -> int:
    last = t.items[-1]
    return len(last[1]) if last[0] == "L" else 0


def _time_shape(t: Template) -> tuple:
    used = next(x for x in t.items if x[0] == "T" and x[5])
    return used[1:5]
