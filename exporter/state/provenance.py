"""Provenance: which line proves each fact of the state, and where one boot of a server ends.

A number on ``/metrics`` is worth what the line behind it is worth. The state keeps, for every fact
it holds (a capacity fact, a state buffer, a configuration value, the release), a :class:`Proof`:
the line that said it, its boot and rank, and its :class:`Basis`. ``replay --explain`` and
``report --json`` list them (``exporter.presentation.explain.proofs``); tests/state/test_provenance.py checks
on every fixture that each exported fact has one and that its line says it.

The rules the state keeps (exporter/state/store.py applies them, :class:`Ledger` decides):

1. **One basis per fact**, one of :class:`Basis`: ``logged`` (a line says the value), ``derived``
   (the exporter computed it from logged lines: ``rule`` says how, ``also`` the other lines read)
   or ``default`` (the log does not say it; the engine's default is taken: ``rule`` says which).
2. **One pool per rank.** Every TP rank of SGLang prints its own lines for the pools every rank
   has: the speaking rank's line (the lowest (PP, TP) rank of the DP group) proves the fact; the
   identical lines of other ranks confirm it (``Ledger.confirmations``) and never add to it.
3. **One boot per message.** A boot prints each message of :data:`BOOT_MESSAGES` once per rank:
   the same message of the same rank again *with another value* is the next boot (as a startup
   line after runtime lines is, and a banner); the same value again is the same line repeated.
   The key of a message tells messages of one kind apart: the KV pools of a rank by their role
   (:func:`kv_role`: the target's pool, the sliding-window pool, the draft model's pool, a
   labelled pool).
4. **A revision is declared, not guessed.** A later, *different* message that settles an earlier
   one's value within the boot (SGLang's post-capture KV sizing after a ``VA upper bound`` line;
   vLLM 0.34's KV cache extended after warm-up, after its ``Available KV cache memory`` estimate)
   has its own key, and :data:`REVISIONS` names the message it settles: it revises the fact
   (its proof says which line it revises) and starts no boot. vLLM 0.34's per-worker sizing lines are
   no messages of the ledger (a worker's rank is not in its line): their stages (before warmup,
   measured, final) and what a later one does to an earlier one are exporter/state/revisions.py's.
5. **Facts of different boots never combine.** A new boot forgets every fact, its proof, and
   what each rank said (``SourceState.restart``).

Leaf module below the state: it imports only the event types.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from enum import Enum

from parsers import events as ev


class Basis(str, Enum):
    """Where a value comes from (rule 1). A ``str``: ``Basis.LOGGED == "logged"``, JSON as is."""

    LOGGED = "logged"  # a line of the log says it
    DERIVED = "derived"  # computed from logged lines by a declared rule
    DEFAULT = "default"  # not in the log: the engine's default for what the log shows

    def __str__(self) -> str:
        return self.value


Rank = tuple[str, int | None, int | None]  # (dp_rank, tp_rank, pp_rank) of the line


@dataclass(frozen=True, slots=True)
class Proof:
    """What proves one fact. ``line`` is the number of the first line of the message in its
    source (the source's lines in the order read, 1-based; ``lines`` of them: a message a terminal
    wrapped), None for a default. ``boot`` counts the source's boots from 1. ``message`` is the
    key of the message (:data:`BOOT_MESSAGES`), when it has one."""

    basis: Basis
    line: int | None
    boot: int
    rank: Rank
    rule: str = ""  # derived / default: how; logged: how the line was read, when that needs saying
    lines: int = 1
    also: tuple[int, ...] = ()  # derived: the other lines the rule read
    revises: int | None = None  # a revision (rule 4): the line whose value it settles
    message: Hashable = None


def prove(proofs: dict[str, Proof], prefix: str, now: dict, old: dict, proof: Proof, noted: dict[str, tuple]) -> None:
    """The proofs of the facts in ``now`` (named ``prefix + key``) after a line whose handler
    changed ``old`` into ``now``: a fact it set to a new value is proved by ``proof`` (the line
    being applied), unless the handler declared otherwise (``noted``: ``SourceState.explain_fact``);
    one it left alone keeps its proof, but the same message of the speaking rank with the same
    value takes over from another rank's line (rule 2); a fact gone loses its proof."""
    for key, v in now.items():
        name = prefix + key
        note = noted.get(name)
        if note is not None:
            basis, rule, line, also, revises = note
            same = line is None or line == proof.line
            proofs[name] = Proof(
                basis, proof.line if same else line, proof.boot, proof.rank, rule, proof.lines if same else 1, also, revises, proof.message
            )
        elif key not in old or old[key] != v:
            proofs[name] = proof
        else:
            p = proofs.get(name)
            if p is not None and p.message == proof.message and p.rank != proof.rank:
                proofs[name] = proof
    for key in old.keys() - now.keys():
        proofs.pop(prefix + key, None)


def locate(files: list[tuple[int, str]], name: str, line: int | None) -> tuple[str, int | None]:
    """(file, line in that file) of a source's line ``line``, given where each of its files began
    (``(first line, file name)``, in order; the source's ``name`` before any)."""
    if line is None:
        return name, None
    start = 1
    for first, f in files:
        if first <= line:
            name, start = f, first
    return name, line - start + 1


# --------------------------------------------------------------------------------------------
# the rules of derived facts: one sentence each, named by the state's handlers


SUMMED_POOLS = "the pools of one rank added: the full-attention pool and the sliding-window or labelled pools it printed"
DRAFT_POOL = "the pool a rank printed after the target's, with the target's #tokens or with speculative decoding on: the draft model's"
MAMBA_MODE_NONE = "a hybrid with prefix caching off logs no 'Mamba cache mode' line: its mode is none (vLLM 0.15+)"
REQUESTED_CHUNK = "server_args' requested chunked_prefill_size, until the scheduler summary prints the effective one"
LINE_COUNT = "the lines of the kind counted, every line once"
NEWEST_LINE = "the newest batch or stats line that carried the field"

# the default rules: what ``exporter.state.facts`` says it took when the log said nothing
DEFAULT_HOW = ("default", "default estimate")


# --------------------------------------------------------------------------------------------
# rule 3: the messages a boot prints once per rank, and the key of each


def kv_role(e: ev.KVCacheAllocated, said: dict[Hashable, tuple[object, int]], swa: bool, spec: bool) -> tuple:
    """The key of a KV pool line of a rank (rule 3) given what the rank ``said`` this boot, whether
    it announced a sliding-window pool (``swa``: its ``Use sliding window memory pool`` line) and
    whether the server runs speculative decoding (``spec``: server_args).

    A labelled pool is its label; a post-capture draft line is the draft pool. An unlabelled line
    equal to one the rank printed is that one again. Otherwise, in the order SGLang allocates: the
    target's pool; its settled size after a ``VA upper bound`` line (a revision, rule 4); the
    sliding-window pool when announced; the draft model's pool (speculative decoding on, or the
    target's #tokens again: SGLang's draft worker shares the target's token indices); and a line
    past those is the target's pool again: with another value, the next boot."""
    if e.label:
        return ("kv", "label", e.label)
    if e.draft:
        return ("kv", "draft")
    for k, (v, _) in said.items():
        if v == e and k[0] == "kv" and k[1] != "label":
            return k
    main = said.get(("kv", "main"))
    if main is None:
        return ("kv", "main")
    m = main[0]
    if m.upper_bound and not e.upper_bound and ("kv", "settled") not in said:  # type: ignore[attr-defined]
        return ("kv", "settled")
    if swa and ("kv", "swa") not in said:
        return ("kv", "swa")
    if ("kv", "draft") not in said and (spec or e.tokens == m.tokens):  # type: ignore[attr-defined]
        return ("kv", "draft")
    return ("kv", "main")


def _config_key(e: ev.ServerConfig) -> tuple | None:
    return ("config", e.kind) if e.kind in ("server_args", "non_default_args", "engine_config") else None


def _kv_capacity_key(e: ev.KVCapacity) -> tuple:
    # one event type, several vLLM messages: the fields a line carries tell which one it is
    return ("kv_capacity", e.tokens is not None, e.max_concurrency is not None, e.gpu_blocks is not None)


# event type -> the key of its message (None: not a boot's once-per-rank message). Messages a rank
# may print more than once in one boot with other values are not here: per-worker vLLM lines
# (weights, available KV memory: the worker's rank is not in the line), SGLang's ``Load weight
# end`` (the draft model loads too), the SWA pool lines (the post-capture line repeats them).
BOOT_MESSAGES: dict[type, Callable[[object], Hashable]] = {
    ev.MambaCacheAllocated: lambda e: ("mamba",),
    ev.SchedulerSummary: lambda e: ("summary",),
    ev.MambaCap: lambda e: ("mamba_cap",),
    ev.ReplaySSMBuffers: lambda e: ("replayssm",),
    ev.ServerConfig: _config_key,  # type: ignore[dict-item]
    ev.KVCapacity: _kv_capacity_key,  # type: ignore[dict-item]
    ev.KVCacheAllocated: lambda e: None,  # keyed by kv_role (it needs what the rank said)
}

# rule 4: a message -> the message whose value it settles within the boot
REVISIONS: dict[Hashable, Hashable] = {
    ("kv", "settled"): ("kv", "main"),  # SGLang post-capture KV sizing after 'KV Cache VA upper bound'
}


@dataclass
class Ledger:
    """What each rank said this boot: message key -> (event, line). Pure: decides, keeps nothing else.

    :meth:`hear` says whether a message starts the next boot (rule 3); the state then restarts and
    hears it again. A reference test (tests/state/test_provenance.py) walks its cases."""

    said: dict[Rank, dict[Hashable, tuple[object, int]]] = field(default_factory=dict)
    swa: set[Rank] = field(default_factory=set)  # ranks that announced a sliding-window pool

    def key(self, rank: Rank, e: object, spec: bool) -> Hashable:
        """The message key of ``e`` from ``rank`` (None: not a boot's once-per-rank message)."""
        if type(e) is ev.KVCacheAllocated:
            return kv_role(e, self.said.get(rank, {}), rank in self.swa, spec)
        f = BOOT_MESSAGES.get(type(e))
        return f(e) if f is not None else None

    def hear(self, rank: Rank, e: object, line: int, spec: bool) -> tuple[Hashable, bool]:
        """Note ``e`` said by ``rank`` at ``line``: (its key, whether it is the next boot). The
        same message of the rank with another value is the next boot, and is not noted (the caller
        forgets this boot, then hears it again); the same value again keeps the first line. A
        message whose first line is the one noted is that line again, read whole (a wrapped
        message joined): what it says replaces what its first piece said."""
        if type(e) is ev.SWAPool:
            self.swa.add(rank)
            return None, False
        k = self.key(rank, e, spec)
        if k is None:
            return None, False
        mine = self.said.setdefault(rank, {})
        prev = mine.get(k)
        if prev is not None and prev[1] != line:
            return k, prev[0] != e
        mine[k] = (e, line)  # (the same line read again, joined with its continuation: what it says now)
        return k, False

    def line_of(self, rank: Rank, key: Hashable) -> int | None:
        """The line the rank said ``key`` on, this boot."""
        got = self.said.get(rank, {}).get(key)
        return got[1] if got is not None else None

    def pools(self, rank: Rank) -> dict[Hashable, tuple[object, int]]:
        """The KV pool lines of a rank this boot, by key."""
        return {k: v for k, v in self.said.get(rank, {}).items() if k[0] == "kv"}

    def confirmations(self, rank: Rank, key: Hashable) -> int:
        """Ranks of the same DP group other than ``rank`` whose line of ``key`` says the same (rule 2)."""
        mine = self.said.get(rank, {}).get(key)
        if mine is None:
            return 0
        return sum(1 for r, s in self.said.items() if r != rank and r[0] == rank[0] and key in s and s[key][0] == mine[0])

    def clear(self) -> None:
        self.said.clear()
        self.swa.clear()


__all__ = ["BOOT_MESSAGES", "REVISIONS", "Basis", "Ledger", "Proof", "Rank", "kv_role", "locate", "prove"]
