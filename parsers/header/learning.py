"""Learning a template: the envelope of a line the generic chain read, as template items.

:func:`derive` takes a line and the header the generic chain (:func:`parsers.header.read_header`)
read from it, and makes the :class:`parsers.header.templates.Template` of its shape: a collector's
prefix (:func:`_prefix`), then a JSON object's members (:func:`_json_items`), a logfmt line's pairs
(:func:`_logfmt_items`), SGLang's default header after a prefix, or a logging config's header
tokens (:func:`_text_items`, from ``preamble.locate``'s tokens), then the message. A shape this
module does not read (nested objects, epoch times, names and files outside brackets, a time
without a date) gives no template: its lines stay with the generic chain. The template is kept
only when it reads its own line exactly as the chain did (:func:`derive`, the last check).
"""

from __future__ import annotations

import json
import re

from .. import sglang
from ..events import SGLANG
from . import preamble, structured
from .prefix import COLLECTOR_RE, SGLANG_HEADER_RE, Header
from .templates import JSTR, MAX_ITEMS, MAX_LOGFMT, WORD, Item, Items, Template, hole_pattern, same, time_item


def derive(line: str, h: Header, year: int) -> Template | None:
    """The template of ``line``, whose header the generic reader read as ``h`` (for an SGLang
    source), or None when the line is not of a shape this module reads, or when the template
    would not read the line exactly as ``h`` says."""
    if h.ts is None or "\r" in line or "\x1b" in line or not h.msg or not sglang.starts_message(h.msg):
        return None
    try:
        made = _derive(line, h)
    except (ValueError, IndexError, KeyError):
        return None
    if made is None or len(made[1]) > MAX_ITEMS:
        return None
    kind, items, record = made
    if not any(t[0] == "T" and t[5] for t in items):
        return None
    t = Template(kind, items, h.via, h.engine, record)
    got = t.peel(line)
    if got is None or not same(got, h):
        return None
    return t


def _derive(line: str, h: Header) -> tuple[str, Items, str | None] | None:
    prefix, rest_at = _prefix(line)
    if prefix is None:
        return None
    rest = line[rest_at:]
    c = rest[:1]
    if c == "{":
        body = _json_items(rest, h)
        kind, record = "json", "json"
    elif "=" in rest[:64] and (c.isalpha() or c == "_" or c == "@"):
        body = _logfmt_items(rest, h)
        kind, record = "logfmt", "logfmt"
    elif c == "[" and SGLANG_HEADER_RE.match(rest) is not None:
        if not prefix:
            return None  # SGLang's own default header: the sampler's fast path reads it
        body = _default_items(rest, 1) + [("M", "E"), ("B",)]
        kind, record = "collector", None
    elif c == "[" and not prefix:
        body = _text_items(rest)
        kind, record = "config", None
    else:
        return None
    if body is None:
        return None
    items = prefix + body
    if prefix:
        kind = "collector"  # the outermost envelope names the line's (envelope_of)
        if sum(1 for t in items if t[0] == "T") == 1:
            # no time after the prefix: the collector's is the line's (else it is only checked)
            items = [("T", *t[1:5], 1) if t[0] == "T" else t for t in items]
    return kind, _merge_literals(items), record


def _merge_literals(items: list[Item]) -> Items:
    out: list[Item] = []
    for it in items:
        if it[0] == "L":
            if not it[1]:
                continue
            if out and out[-1][0] == "L":
                out[-1] = ("L", out[-1][1] + it[1])
                continue
        out.append(it)
    return tuple(out)


def _prefix(line: str) -> tuple[list[Item] | None, int]:
    """The items of a collector's prefix before the engine's line (its time only checked), and
    where the line after it starts; ``([], 0)`` when there is none."""
    if line[:1] == "[":
        m = SGLANG_HEADER_RE.match(line)
        if m is not None and not m.group(4) and line[m.end() : m.end() + 1] == "[":
            # SGLang-shaped '[date time] ' stamp before a whole engine line
            return [("L", "["), ("T", " ", ".", -1, "", 0), ("L", "] ")], m.end()
        return [], 0
    m = COLLECTOR_RE.match(line)
    if m is None:
        return [], 0
    if m.group("cts"):
        t = time_item(m.group("cts"), 0)
        if t is None or t[2] == ",":
            return None, 0
        return [t, ("L", line[m.end("cts") : m.end()])], m.end()
    if m.group("dcts"):
        t = time_item(m.group("dcts"), 0)
        if t is None or t[2] == ",":
            return None, 0
        return [t, ("L", line[m.end("dcts") : m.end()])], m.end()
    text = line[: m.end()]
    if re.fullmatch(r"[\w.-]{1,64}\s{1,32}\| ", text):
        return [("L", text)], m.end()  # a compose service's prefix: the same on every line
    return None, 0


def _default_items(text: str, use: int) -> list[Item]:
    """SGLang's default header at the start of ``text``."""
    return [("L", "["), ("T", " ", ".", -1, "", use), ("G", "h"), ("L", "] ")]


def _text_items(line: str) -> list[Item] | None:
    """A logging config's header: the tokens the generic reader reads before the message, each a
    hole, the separators literal. Bracket groups, times, level words and rank tags only."""
    spans: list = []
    f = preamble.locate(line, SGLANG, 2026, spans)
    if f is None or not spans or spans[-1][1] != f.start:
        return None
    items: list[Item] = []
    pos = 0
    timed = False
    for m, sep_end in spans:
        if m.start() != pos:
            return None
        kind = m.lastgroup
        if kind == "br":
            inner = m.group("br")
            t = time_item(inner, 0 if timed else 1) if re.match(r"[0-9]{4}-", inner) else None
            if t is not None and not timed:
                items += [("L", "["), t, ("L", "]")]
                timed = True
            elif inner and re.fullmatch(r"[A-Z0-9_ ]*", inner) and preamble.tags_in(inner):
                items += [("L", "["), ("G", "b"), ("L", "]")]
            elif re.fullmatch(hole_pattern(("S", "b" if timed else "B")), inner):
                items += [("L", "["), ("S", "b" if timed else "B"), ("L", "]")]
            else:
                return None
        elif kind == "time":
            t = time_item(m.group("time"), 0 if timed else 1)
            nxt = line[m.end() : m.end() + 1]
            if t is None or nxt[:1] in ("Z", "+", "-"):
                return None
            items.append(t)
            timed = True
        elif kind == "level":
            if line[m.end() : m.end() + 1] == ":":
                return None  # 'INFO:' is a message of its own
            items.append(("S", "v"))
        elif kind == "tag":
            items.append(("G", "t"))
        else:
            return None  # files, names, (...) groups: the generic reader reads them
        items.append(("L", line[m.end() : sep_end]))
        pos = sep_end
    if not timed:
        return None
    return items + [("M", "E"), ("B",)]


def _json_items(text: str, h: Header) -> list[Item] | None:
    """A flat JSON object's items: keys and punctuation literal, values holes (the message, the
    time, the rank fields by what they are)."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or any(isinstance(v, (dict, list)) for v in obj.values()):
        return None
    rec = structured.from_fields(obj, "json", 2026)
    if rec is None or "." in rec.msg_key:
        return None
    tkey = next((k for k in structured.TIME_KEYS if isinstance(obj.get(k), (str, int, float)) and type(obj.get(k)) is not bool), None)
    pairs = _json_pairs(text)
    if pairs is None or len(pairs) != len(obj) + 1:
        return None
    return _record_items(pairs, obj, rec.msg_key, tkey, h, "json")


_JSON_WS = re.compile(r"[ \t]*")
_JSON_KEY = re.compile(r'"([A-Za-z0-9_@.\-]*)"')
_JSON_STR = re.compile('"(' + JSTR + ')"')
_JSON_NUM = re.compile(hole_pattern(("S", "n")))
_JSON_LIT = re.compile(r"true|false|null")


def _json_pairs(text: str) -> list[tuple[str, str, str, str]] | None:
    """``(literal before the value, key, value kind 's'/'n'/'l', value text)`` of each member of a
    flat object written on one line, and the closing literal as a last pair with key ''."""
    out = []
    pos = 0
    lit = ""
    if text[:1] != "{":
        return None
    lit = "{"
    pos = 1
    while True:
        w = _JSON_WS.match(text, pos)
        lit += w.group()
        pos = w.end()
        km = _JSON_KEY.match(text, pos)
        if km is None:
            return None
        key = km.group(1)
        lit += km.group()
        pos = km.end()
        w = _JSON_WS.match(text, pos)
        if text[w.end() : w.end() + 1] != ":":
            return None
        w2 = _JSON_WS.match(text, w.end() + 1)
        lit += text[pos : w2.end()]
        pos = w2.end()
        if text[pos : pos + 1] == '"':
            vm = _JSON_STR.match(text, pos)
            if vm is None:
                return None
            out.append((lit + '"', key, "s", vm.group(1)))
            lit = '"'
        else:
            vm = _JSON_NUM.match(text, pos) or _JSON_LIT.match(text, pos)
            if vm is None:
                return None
            out.append((lit, key, "n" if vm.re is _JSON_NUM else "l", vm.group()))
            lit = ""
        pos = vm.end()
        w = _JSON_WS.match(text, pos)
        nxt = text[w.end() : w.end() + 1]
        lit += w.group() + nxt
        pos = w.end() + 1
        if nxt == "}":
            if text[pos:].strip(" \t"):
                return None
            out.append((lit + text[pos:], "", "", ""))
            return out
        if nxt != ",":
            return None


def _record_items(
    pairs: list[tuple[str, str, str, str]], values: dict, msg_key: str, tkey: str | None, h: Header, kind: str
) -> list[Item] | None:
    items: list[Item] = []
    quoted_mode = "J" if kind == "json" else "Q"
    skip_str = "j" if kind == "json" else "q"
    inner = h.via.endswith(" + sglang")  # the engine's whole line in the record: its header's time is the line's
    for lit, key, vk, text in pairs:
        items.append(("L", lit))
        if not key:
            break
        if key == msg_key:
            if vk != "s":
                return None
            items.append(("M", quoted_mode))
            if inner:
                if not text.startswith("[") or "\\" in text[:40]:
                    return None
                items += [("G", "H") if t == ("G", "h") else t for t in _default_items(text, 1)] + [("B",)]
            else:
                items.append(("B",))
        elif key == tkey:
            t = time_item(text, 0 if inner else 1) if vk in ("s", "w") else None
            if t is None:
                return None
            items.append(t)
        elif key in structured.RANK_KEYS:
            v = values[key]
            if vk == "l":
                items.append(("L", text))
            elif type(v) is int and vk == "n" and re.fullmatch(hole_pattern(("R", "i")), text):
                items.append(("R", "i", key))
            elif isinstance(v, str) and re.fullmatch("[0-9]+", v) and vk in ("s", "w"):
                items.append(("R", "d", key))
            else:
                return None
        elif key in structured.PROCESS_KEYS or key in structured.TAG_KEYS:
            if vk == "l":
                items.append(("L", text))
            elif vk == "s" and "\\" not in text:
                items.append(("R", "q", key))
            elif vk == "w" and re.fullmatch(WORD, text):
                items.append(("R", "w", key))
            else:
                return None
        elif vk == "s":
            items.append(("S", skip_str))
        elif vk == "w":
            if not re.fullmatch(WORD, text):
                return None
            items.append(("S", "w"))
        elif vk == "n":
            items.append(("S", "n"))
        else:
            items.append(("L", text))
    return items


_PAIR_RE = re.compile(r'([A-Za-z_@][\w.@/\-]*)=("(?:[^"\\]|\\.)*"|[^\s"]*)(\s+|$)')


def _logfmt_items(text: str, h: Header) -> list[Item] | None:
    """A logfmt line's items: keys literal, values holes, as :func:`_record_items` makes them."""
    if len(text) > MAX_LOGFMT:
        return None
    pairs = []
    fields: dict[str, str] = {}
    pos = 0
    lit = ""
    n = len(text.rstrip())
    while pos < n:
        m = _PAIR_RE.match(text, pos)
        if m is None:
            return None
        key, v, ws = m.groups()
        if key in fields:
            return None
        if v[:1] == '"':
            fields[key] = v[1:-1]
            pairs.append((lit + key + '="', key, "s", v[1:-1]))
            lit = '"' + ws
        else:
            fields[key] = v
            pairs.append((lit + key + "=", key, "w", v))
            lit = ws
        pos = m.end()
    pairs.append((lit + text[pos:], "", "", ""))
    rec = structured.from_fields(fields, "logfmt", 2026)
    if rec is None:
        return None
    tkey = next((k for k in structured.TIME_KEYS if k in fields), None)
    if tkey is not None and fields[tkey].strip().replace(".", "", 1).isdigit():
        return None  # an epoch number: the generic reader reads it
    for key, v in fields.items():
        if key in structured.RANK_KEYS and not v.isdigit():
            return None
    return _record_items(pairs, fields, rec.msg_key, tkey, h, "logfmt")


__all__ = ["derive"]
