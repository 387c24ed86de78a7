"""The revision rule: a later message of one boot that settles a fact an earlier message estimated.

vLLM 0.34 sizes its KV cache twice in one boot (the extensible KV cache, on CUDA and ROCm by default): before
CUDA-graph capture and warmup it prints ``Available KV cache memory: X GiB`` (and fits ``--max-model-len auto``),
an *estimate*; after warmup ``Memory after warmup: ... N KV cache blocks (X GiB) ...`` (one rank's *measurement*),
``Remapping ...`` / ``Extended KV cache to N blocks (X GiB).`` and the one ``GPU KV cache size`` line (*final*).
The messages that set such a fact carry a stage (``parsers.events``: ``profile``, ``estimate``, ``measured``,
``final``), and this module is the one place that says what a later stage does to an earlier one:

1. **A revision is not a new boot.** The boot rule of ``exporter/state/store.py`` (a boot line after runtime lines
   starts a new boot) and the provenance rule (the same message repeating with another value starts one) apply
   to a message *repeating*. A later stage's message settling an earlier stage's figure is one boot whose fact
   is revised: nothing is reset, and both values stay in the fact's history, each with its line (``report``).
2. **A later stage wins; an earlier one never overrides it.** Among messages of the same stage the latest wins
   (as every startup fact did before: ``Available KV cache memory`` then the exact ``Current kv cache memory in
   use``). A pre-warmup figure printed after the measured one (another rank's line) changes nothing.
3. **An estimate is not exported.** A value the line itself calls provisional (``estimate``), and a ``profile``
   value of a server that sizes after warmup (:func:`sizes_after_warmup`), is kept in the history but not
   exported until a later stage settles it, or the KV-size line closes the sizing without one (the pool was
   sized before warmup after all: :func:`settled`). A number that is about to be revised is not one to alert on.

The facts this applies to are :data:`REVISED`; every other startup fact keeps the state's plain rule (the line
that carried it last).
"""

from __future__ import annotations

from dataclasses import dataclass

from parsers.events import ESTIMATE, FINAL, MEASURED, PROFILE

from ..capacity import defaults
from ..catalogues.configvalues import truthy, unset

# the facts one boot may state at several stages: the pool's bytes and blocks, and the context length
REVISED = ("kv_capacity_bytes", "kv_blocks", "context_length_tokens")
STAGES = (PROFILE, ESTIMATE, MEASURED, FINAL)
_RANK = {PROFILE: 0, ESTIMATE: 0, MEASURED: 1, FINAL: 2}
MAX_HISTORY = 8  # values kept per fact (a TP rank's copy of a value already kept is not kept again)


@dataclass(frozen=True, slots=True)
class Revision:
    """One value of a revised fact: its stage, the log time, the message and the source's line it came from."""

    stage: str
    value: float
    ts: float | None = None
    text: str | None = None
    line: int | None = None


# what a proof of a revised fact says (exporter/state/provenance.py: the line's rule)
STAGE_RULES = {
    PROFILE: "sized before warmup",
    ESTIMATE: "an estimate the line says is revised after warmup",
    MEASURED: "measured after warmup (one rank's measurement)",
    FINAL: "the final size, after warmup",
}
SETTLED_BY_KV_SIZE = "sized before warmup; the KV-size line closed the sizing without a later value (the revision rule)"


def rule_of(r: Revision, settles: Revision | None) -> str:
    """The rule a proof of ``r`` carries: its stage, and the earlier value it settles (the revision rule)."""
    if settles is None:
        return STAGE_RULES[r.stage] if r.stage != PROFILE else ""
    return f"{STAGE_RULES[r.stage]}: revises the earlier value ({STAGE_RULES[settles.stage]}), not a new boot"


def in_force(history: list[Revision]) -> Revision | None:
    """The value rule 2 keeps: the latest of the highest stage."""
    best = None
    for r in history:
        if best is None or _RANK[r.stage] >= _RANK[best.stage]:
            best = r
    return best


def revise(history: list[Revision], new: Revision) -> bool:
    """Add ``new`` to a fact's history (rule 1: nothing else is touched); True when it is the value in force now
    (rule 2)."""
    cur = in_force(history)
    if cur is not None and cur.stage == new.stage and cur.value == new.value:
        return True  # another rank's copy of the value in force: nothing new to keep
    history.append(new)
    del history[:-MAX_HISTORY]
    return cur is None or _RANK[new.stage] >= _RANK[cur.stage]


def revised_by(history: list[Revision], r: Revision) -> Revision | None:
    """The earlier value of the boot ``r`` settles: the latest one with another value (None: it settles none)."""
    for h in reversed(history):
        if h is not r and h.value != r.value and _RANK[h.stage] <= _RANK[r.stage]:
            return h
    return None


def provisional(r: Revision, after_warmup: bool | None) -> bool:
    """Rule 3: whether ``r`` is a figure the server is about to revise (not exported until settled)."""
    return r.stage == ESTIMATE or (r.stage == PROFILE and after_warmup is True)


def settled(history: list[Revision]) -> Revision | None:
    """Rule 3's close: the KV-size line ends the sizing; the value in force is final whatever its stage."""
    return in_force(history)


def sizes_after_warmup(config: dict, version: str | None) -> bool | None:
    """Whether the server sizes its KV cache after warmup (vLLM 0.34's extensible KV cache): a line only that
    cache prints was read (``_extensible``), or the release's default on the logged device (exporter/capacity/defaults.py),
    unless the log shows it off (``--no-enable-extensible-kv-cache``, ``--kv-cache-memory-bytes``, the engine's
    ``Disabling the extensible KV cache``). None: not known (no release or no device in the log)."""
    if config.get("_extensible") is True:
        return True
    flag = config.get("enable_extensible_kv_cache")
    if flag is not None and not unset(flag):
        return truthy(flag)
    if not unset(config.get("kv_cache_memory_bytes")):
        return False
    return defaults.vllm_extensible_by_default(version, str(config.get("_device") or config.get("device_config") or "") or None)


__all__ = [
    "MAX_HISTORY",
    "REVISED",
    "SETTLED_BY_KV_SIZE",
    "STAGES",
    "STAGE_RULES",
    "Revision",
    "in_force",
    "provisional",
    "revise",
    "revised_by",
    "rule_of",
    "settled",
    "sizes_after_warmup",
]
