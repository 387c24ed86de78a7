"""Whether a message is cut, and whether a line continues it: the proofs the joiner asks.

A message a writer cut (or a terminal wrapped) onto the next lines is joined back only on proof
(``exporter/wrapped.py``; docs/formats/README.md#lines-as-users-paste-them). The proofs are read
from the message's own text, by the rules of its grammar:

* :func:`cut_short`: a message that does not parse is a known message cut short when it is a
  proper prefix of one the engine's parser reads (``PREFIX_GRAMMARS`` of ``parsers/sglang.py`` and
  ``parsers/vllm.py``, ``regex``'s partial match).
* :func:`whole_part`: a message that parsed is provably cut when it ends at a separator (``,``
  ``:`` ``=`` or an opening bracket), when a configuration dump's brackets or quotes are still
  open, or when the scheduler summary lacks its ``context_len``; then what it says for sure is its
  text up to its last separator (the value after it may be cut: ``chunked_prefill_size=81`` of
  ``8192``). A message that ends otherwise is taken as whole, and is never extended.
* :func:`continues`: whether a line continues a text where it was cut: after a separator a field
  (``key=``, ``key: ``, ``'key':``), after ``=`` or ``:`` a value, inside a token the rest of the
  token or the separator after it.

Pure functions: text in, an answer out.
"""

from __future__ import annotations

import functools
import re

import regex

from . import events as ev
from . import sglang, vllm

SEPARATORS = ",:=([{"
_DUMPS = ("server_args", "non_default_args", "engine_config")
_OPEN, _CLOSE = "([{", ")]}"
# a field of a message's grammar: 'key=', 'key: ', "'key':", '#full token: ', 'gen throughput (token/s): '
_FIELD_RE = re.compile(r"\s*(?:'\w+'|\"\w+\"|#?\w+(?: \w+)?(?: \([\w/]+\))?)\s?[:=]")
# a value: a number, a word, a quoted string, a bracket, an enum repr
_VALUE_RE = re.compile(r"\s*[-\w.'\"\[{(<]")
_LABEL_RE = re.compile(r"(?:[A-Za-z0-9][\w.+-]* ){1,8}")  # a pool's label before its marker: a few words
_TOKEN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-+")


@functools.cache
def _grammars(engine: str) -> tuple[regex.Pattern, ...]:
    """The engine's message grammars, compiled once (``regex``: partial matches)."""
    mod = sglang if engine == ev.SGLANG else vllm
    # greedy for lazy: the same prefixes, and regex's partial match takes any text for one after a lazy quantifier
    return tuple(regex.compile(p.replace("+?", "+").replace("*?", "*")) for p in mod.PREFIX_GRAMMARS)


def cut_short(msg: str, engine: str | None, in_words: bool = False) -> bool:
    """Whether ``msg`` is a proper prefix of a message ``engine``'s parser reads (either engine's
    when ``engine`` is None): a known message cut before its end. ``in_words``: cut inside the
    message's own words, not after a free word it may hold (``Using MoEPrepare...`` is a message of
    its own that ``Using <dtype> data type to store kv cache`` would also begin with): a message
    that carries no marker yet must be cut so."""
    if not msg:
        return False
    if in_words:
        return _cut(msg, engine) and not (_cut(msg + "q", engine) and _cut(msg + "Z", engine))
    return _cut(msg, engine)


def _cut(msg: str, engine: str | None) -> bool:
    for eng in (engine,) if engine else (ev.SGLANG, ev.VLLM):
        starts = [0]
        for marker in (sglang if eng == ev.SGLANG else vllm).LABELLED_MARKERS:
            i = msg.find(marker)
            if i > 0 and _LABEL_RE.fullmatch(msg, 0, i):
                starts.append(i)
        for g in _grammars(eng):
            for i in starts:
                m = g.match(msg, i, partial=True)
                if m is not None and m.partial:
                    return True
    return False


def scan(text: str, depth0: int = 0) -> tuple[bool, int]:
    """(brackets and quotes balanced, the index after the last comma at the outermost level of
    the text's items, 0 when none). ``depth0``: the depth of those items (1 inside a dump's
    ``ServerArgs(`` or ``{``)."""
    depth = 0
    quote = ""
    last = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c == "'" or c == '"':
            quote = c
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth == depth0:
            last = i + 1
        i += 1
    return depth == 0 and not quote, last


def whole_part(msg: str, event: object) -> int | None:
    """None when ``msg`` (which parsed to ``event``) is not provably cut; else the length of the
    part of it that is whole: all of it when it ends at a separator, else up to its last separator
    (0: none of it)."""
    t = msg.rstrip()
    if not t:
        return None
    if t[-1] in SEPARATORS:
        return len(msg)
    if type(event) is ev.ServerConfig and event.kind in _DUMPS:
        ok, last = scan(t, 0 if event.kind == "engine_config" else 1)  # a dump's items: inside its '(' or '{'
        return None if ok else last
    if type(event) is ev.SchedulerSummary and "context_len=" not in t:
        return scan(t)[1]
    return None


# how a whole message ends: a closing mark, or a number with its unit (the end of every startup line the
# parsers read: 'mem usage=8.85 GB.', 'ssm_state size: 1.10GB', '14.77x', 'KV size: 9.21 GB', '{...}', '(...)')
_WHOLE_END_RE = re.compile(r"(?:[.)\]}%!]|\d ?(?:[KMGT]i?B|tokens|reqs|x|seconds|s))\s*\Z")
_LIFE = (ev.Lifecycle, ev.ServerReady)


def ends_whole(msg: str, event: object) -> bool:
    """Whether a message read without its newline (a line a truncation or the end of the input
    cut, docs/reading.md) is whole: a death or readiness that parsed (no number to cut), or a
    startup message that is not provably cut and ends as a whole one does (a closing mark, a
    number with its unit). A runtime line (batch, stats, retraction, preemption) never is: its last
    value may be cut anywhere (``#queue-req: 1`` of 13), and such a line comes again."""
    if event is None or isinstance(event, _RUNTIME):
        return False
    if isinstance(event, _LIFE):
        return True
    return whole_part(msg, event) is None and _WHOLE_END_RE.search(msg) is not None


_RUNTIME = (ev.BatchStats, ev.Retraction, ev.Preemption, ev.SpecDecoding)


def continues(text: str, piece: str) -> bool:
    """Whether ``piece`` continues ``text`` where it was cut (:func:`whole_part`)."""
    if not piece:
        return False
    t = text.rstrip()
    c = t[-1:] or ","
    if c == ",":
        return _FIELD_RE.match(piece) is not None
    if c in ":=":
        return _VALUE_RE.match(piece) is not None
    if c in _OPEN:
        return _FIELD_RE.match(piece) is not None or _VALUE_RE.match(piece) is not None or piece.lstrip()[:1] in _CLOSE
    if len(t) < len(text):  # cut after a space: a new token follows
        return _FIELD_RE.match(piece) is not None or _VALUE_RE.match(piece) is not None
    return c in _TOKEN and (piece[0] in _TOKEN or piece[0] in ",)]}")


__all__ = ["SEPARATORS", "continues", "cut_short", "ends_whole", "scan", "whole_part"]
