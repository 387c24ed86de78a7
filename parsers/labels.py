"""Label values read from a log line: named as the engine names them, checked against the metric
contract's bound (``exporter/catalogues/contract.py`` ``LABELS``; issue 29, item 2).

A label takes a value from a bounded vocabulary: a model's name, a dtype, a strategy, a speculative
method, a release, a ReplaySSM buffer's name. What a log line gives is read as the engine itself
names it: ``served_model_name: ['a', 'b']`` is ``a`` (vLLM's own ``model_name`` label takes the first
name), ``speculative_config=SpeculativeConfig(method='eagle', ...)`` is ``eagle``. A value out of its
label's bound (too long, or characters no engine writes there: glued text, a list's repr) is
dropped from the event and the line counts ``unrecognized`` (:func:`checked`); the rest of the line
is read. The collector formats with :func:`text` and shows "" for a value out of bound, whatever
reached the state (a snapshot of an older release).
"""

from __future__ import annotations

import ast
import re

from exporter.catalogues.contract import LABEL, SERVER_INFO_KEYS

from . import events as ev

# configuration key -> the label it feeds
KEY_LABEL: dict[str, str] = {k: label for label, keys in SERVER_INFO_KEYS for k in keys}
MODEL_KEYS = frozenset(dict(SERVER_INFO_KEYS)["model"])
_METHOD_RE = re.compile(r"""\bmethod=['"]?(\w+)""")


def text(v: object) -> str:
    """A configuration value as a label shows it ("" for none)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, dict):
        return str(v.get("method") or v.get("model") or "") if v else ""
    return str(v)


def model_name(v: object) -> object:
    """A model's name as vLLM names it: the first of a list of names (also a list's repr)."""
    if isinstance(v, str) and v[:1] in "[(" and v[-1:] in "])":
        try:
            v = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            return v
    if isinstance(v, (list, tuple)):
        return v[0] if v else None
    return v


def speculative_method(v: object) -> str:
    """The speculative method a configuration value names: SGLang's ``speculative_algorithm``
    (``EAGLE``), the ``method`` of vLLM's ``speculative_config`` (a dict, or its repr in the engine
    config line); "" for none."""
    if isinstance(v, dict):
        v = v.get("method") or ""
    s = text(v)
    if s in ("None", "none"):
        return ""
    if "(" in s or "=" in s or "{" in s:  # a repr: its method, or none named
        m = _METHOD_RE.search(s)
        return m.group(1) if m is not None else ""
    return s


def shown(label: str, v: object) -> str:
    """What ``label`` shows for the configuration value ``v``: its text, "" when out of bound."""
    s = speculative_method(v) if label == "speculative" else text(model_name(v) if label == "model" else v)
    return s if LABEL[label].admits(s) else ""


def _ok(label: str, v: object) -> bool:
    s = speculative_method(v) if label == "speculative" else text(v)
    return s == "" or LABEL[label].admits(s)


# the fields of an event that carry a label's value: (attribute, label)
_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {
    ev.ServerConfig: (("version", "version"),),
    ev.ServerStarting: (("version", "version"), ("model", "model")),
    ev.HybridLayout: (("mamba_cache_mode", "radix_cache_strategy"), ("mamba_ssm_dtype", "mamba_ssm_dtype")),
    ev.ReplaySSMBuffers: (),
}


def checked(e: object) -> tuple[object, str | None]:
    """``e`` with its label values named as the engine names them, and without those out of bound:
    (the event, or None when it is left with nothing to say; the reason when a value was out of
    bound, else None)."""
    bad: list[str] = []
    for attr, label in _FIELDS[type(e)]:
        v = getattr(e, attr)
        if v is not None and not LABEL[label].admits(v):
            setattr(e, attr, None)
            bad.append(attr)
    empty = False
    if type(e) is ev.ServerConfig:
        args = e.args
        for k in [k for k in args if k in KEY_LABEL]:
            if k in MODEL_KEYS:
                args[k] = model_name(args[k])
            if not _ok(KEY_LABEL[k], args[k]):
                del args[k]
                bad.append(k)
        empty = not args and e.version is None
    elif type(e) is ev.ReplaySSMBuffers:
        for k in [k for k in e.buffers if not LABEL["buffer"].admits(k)]:
            del e.buffers[k]
            bad.append("buffer " + k[:32])
        empty = not e.buffers
    if not bad:
        return e, None
    return (None if empty else e), "label value out of bound: " + ", ".join(bad)


# the events that carry a label's value (the rest pass by without a look)
LABELLED = tuple(_FIELDS)

__all__ = ["KEY_LABEL", "LABELLED", "checked", "model_name", "shown", "speculative_method", "text"]
