"""Whether a message is cut, and whether a line continues it: the proofs the joiner asks.

A message a writer cut (or a terminal wrapped) onto the next lines is joined back only on proof
(``exporter/state/wrapped.py``; docs/formats/README.md#lines-as-users-paste-them). The proofs are read
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
from .reprs import scan

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
        if not _may_start(msg, engine):
            return False  # (the usual line without a marker: no grammar compiled, none matched)
        return _cut(msg, engine) and not (_cut(msg + "q", engine) and _cut(msg + "Z", engine))
    return _cut(msg, engine)


@functools.cache
def _starts(engine: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """The literal starts of the engine's messages (SGLang's ``MESSAGE_STARTS``, vLLM's first words),
    and every prefix of them."""
    if engine == ev.SGLANG:
        starts = tuple(s for s in sglang.MESSAGE_STARTS if s != "INFO:")
    else:
        starts = tuple(w + " " for w in vllm.FIRST_WORDS)
    return starts, frozenset(s[:k] for s in starts for k in range(1, len(s)))


def _may_start(msg: str, engine: str | None) -> bool:
    """Whether ``msg`` begins like one of the engine's messages, or is the start of one."""
    for eng in (engine,) if engine else (ev.SGLANG, ev.VLLM):
        starts, prefixes = _starts(eng)
        if msg in prefixes or msg.startswith(starts):
            return True
    return False


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
        commas, ok = scan(t, 0 if event.kind == "engine_config" else 1)  # a dump's items: inside its '(' or '{'
        return None if ok else (commas[-1] + 1 if commas else 0)
    if type(event) is ev.SchedulerSummary and "context_len=" not in t:
        commas = scan(t)[0]
        return commas[-1] + 1 if commas else 0
    return None


# how a whole message ends: a closing mark, or a number with its unit (the end of every startup line the
# parsers read: 'mem usage=8.85 GB.', 'ssm_state size: 1.10GB', '14.77x', 'KV size: 9.21 GB', '{...}', '(...)')
_WHOLE_END_RE = re.compile(r"(?:[.)\]}%!]|\d ?(?:[KMGT]i?B|tokens|reqs|x|seconds|s))\s*\Z")
_LIFE = (ev.Lifecycle, ev.ServerReady)


def ends_whole(msg: str, event: object) -> bool:
    """Whether a message read without its newline (a line a truncation or the end of the input
    cut, docs/reading.md) is whole: a death or readiness that parsed (no number to cut); vLLM's
    stats and speculative-decoding lines that parsed (their grammar is anchored at the end and
    ends every value with its unit: a cut one does not parse); a startup message that is not
    provably cut and ends as a whole one does (a closing mark, a number with its unit). SGLang's
    batch lines are the pipeline's to judge (by the source's learned shape); a retraction or a
    preemption never is (its last number may be cut anywhere)."""
    if event is None or isinstance(event, _CUT_ANYWHERE):
        return False
    if isinstance(event, _LIFE) or type(event) is ev.SpecDecoding or (type(event) is ev.BatchStats and event.kind not in _SGLANG_BATCH):
        return True
    if type(event) is ev.BatchStats:
        return False
    return whole_part(msg, event) is None and _WHOLE_END_RE.search(msg) is not None


_CUT_ANYWHERE = (ev.Retraction, ev.Preemption)
_SGLANG_BATCH = ("decode", "prefill")


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


__all__ = ["SEPARATORS", "continues", "cut_short", "ends_whole", "whole_part"]
