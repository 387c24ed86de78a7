"""The rule catalogue: one entry per diagnosis rule, everything the exporter says about it in one place.

An entry is what a rule *is* to every reader: its id (the ``rule`` label of ``hybrid_cache_finding``), its kind
(how the rules decide it), its title and short words, the sentence the status page and ``report`` say while it
fires, the pool it is about (which makes a sample "binding" on that pool), how the timeline shades it, the alert
that pages for it (or why none does), the scenario fixture on which it fires, and the flags that answer it on
each engine, in the order the playbook tries them. The rules (``exporter/diagnosis/rules.py``) decide *when* a rule fires;
the tables of the report, the drawing, the history and the rules' memory are derived from here, and
``tests/rules/test_rulebook.py`` checks each entry against docs/rules.md, docs/runbook.md,
``dashboards/alerts.yml``, the scenario fixtures and the flag catalogue (``exporter/advice/flags.py``), both ways.

A new rule is one entry here and its condition in ``exporter/diagnosis/rules.py`` (docs/architecture.md).

Leaf module: it imports nothing of the project, so every layer may read it (like ``exporter/catalogues/contract.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

SGLANG, VLLM = "sglang", "vllm"  # parsers.events' engine names (the test checks they agree)

# the rule ids (the ``rule`` label), for the code that names one rule
MAMBA_BOUND = "mamba_bound"
KV_BOUND = "kv_bound"
REQUEST_CAP_BOUND = "request_cap_bound"
MAMBA_CAPPED = "mamba_capped"
RETRACTION_STORM = "retraction_storm"
MAMBA_EXHAUSTED = "mamba_exhausted"

# how a rule is decided (docs/rules.md#rules-run-on-log-time)
SUSTAINED = "sustained"  # a per-sample condition, held for a window of log time (hysteresis)
WINDOWED = "windowed"  # a count of events within a window of log time, fired on the sample that reaches it
STARTUP = "startup"  # a fact of the boot: fires on the lines that prove it, clears on a restart
EVENT = "event"  # fires on one line, holds for a stretch of log time
KINDS = (SUSTAINED, WINDOWED, STARTUP, EVENT)

# In a rule's actions: the flags of the pool that runs out (mamba_bound's when the mamba pool's p95 usage is at or
# above ``mamba_room``, else kv_bound's): a retraction storm is answered on the side that causes it.
POOL_SIDE = "<the pool that runs out>"

# what limits concurrency at one sample: the pool of the first sustained rule whose condition holds, else "none"
BINDING_WORDS = {
    "mamba": ("mamba pool", "the mamba state pool"),
    "kv": ("KV pool", "the KV pool"),
    "requests": ("request cap", "the request cap"),
    "none": ("nothing", "nothing (neither pool nor the request cap)"),
}


@dataclass(frozen=True)
class Rule:
    id: str
    kind: str
    title: str  # "Mamba-bound: ..." (report, status page, finding lists)
    words: str  # a few words: headlines, legends
    says: str  # the diagnosis while it fires, a str.format template over the fields of the status (report.server_status)
    pool: str | None  # the pool the finding is about: "mamba" | "kv" | "requests" | None (decided per server: POOL_SIDE)
    shade: str | None  # the timeline's background while it fires; None: a fact of the boot, said in words
    strip: bool = False  # shaded as a band along the top of the chart (event-like findings overlap the others)
    alert: str | None = None  # the alert in dashboards/alerts.yml that pages for it
    no_alert: str = ""  # why no alert pages for it (when ``alert`` is None)
    scenario: str = ""  # a log under fixtures/scenarios/ on which it fires (and is live at the end)
    actions: dict[str, tuple[str, ...]] = field(default_factory=dict)  # engine -> flags (exporter/advice/flags.py), playbook order
    # engine -> the title / the diagnosis where the engine's pools differ (vLLM's V1 block pool holds KV and state alike)
    engine_title: dict[str, str] = field(default_factory=dict)
    engine_says: dict[str, str] = field(default_factory=dict)
    telling: int = 0  # the order in a headline: the most telling first
    stale: str = ""  # the diagnosis when the newest sample shows neither running nor waiting requests (a finding of before)

    def title_for(self, engine: str | None) -> str:
        return self.engine_title.get(engine or "", self.title)

    def says_for(self, engine: str | None) -> str:
        return self.engine_says.get(engine or "", self.says)


# the flags that answer a full mamba pool (SGLang), a full KV pool (SGLang), a full block pool (vLLM): playbook order
_SGL_MAMBA = (
    "--mamba-ssm-dtype",
    "--mamba-full-memory-ratio",
    "--max-mamba-cache-size",
    "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK",
    "--mamba-radix-cache-strategy",
    "--enable-unified-memory",
)
_SGL_KV = ("--kv-cache-dtype", "--mamba-full-memory-ratio", "--enable-unified-memory")
_VLLM_POOL = ("--kv-cache-dtype", "--mamba-ssm-cache-dtype", "--language-model-only", "--gpu-memory-utilization")

_VLLM_KV_TITLE = "KV-bound: vLLM's shared block pool (KV and mamba state) limits concurrency"

RULES: tuple[Rule, ...] = (
    Rule(
        MAMBA_BOUND,
        SUSTAINED,
        "Mamba-bound: the mamba state pool limits concurrency while the KV pool is mostly free",
        "mamba-bound",
        "The mamba state pool limits concurrency: mamba {mamba} used while KV is {kv}{gap}; {load}.",
        "mamba",
        "rgba(214,39,40,0.16)",
        alert="HybridCacheMambaBound",
        scenario="sglang-mamba-bound.log",
        actions={SGLANG: _SGL_MAMBA, VLLM: _VLLM_POOL},
        telling=0,
    ),
    Rule(
        KV_BOUND,
        SUSTAINED,
        "KV-bound: the full-attention KV pool limits concurrency while the mamba pool has room",
        "KV-bound",
        "The KV pool limits concurrency: KV {kv} used{mamba_while}; {load}.",
        "kv",
        "rgba(31,119,180,0.16)",
        alert="HybridCacheKVBound",
        scenario="sglang-kv-bound.log",
        actions={SGLANG: _SGL_KV, VLLM: _VLLM_POOL},
        engine_title={VLLM: _VLLM_KV_TITLE},
        engine_says={VLLM: "The shared block pool limits concurrency: {kv} of it used; {load}.{vllm_state}"},
        telling=1,
    ),
    Rule(
        REQUEST_CAP_BOUND,
        SUSTAINED,
        "Request-cap-bound: running requests pinned at the configured cap with both pools free",
        "request-cap-bound",
        "Running requests are pinned at the request cap while the pools have room ({pools} used); {load}.",
        "requests",
        "rgba(90,90,90,0.16)",
        alert="HybridCacheRequestCapBound",
        scenario="vllm-max-num-seqs.log",
        actions={SGLANG: ("--max-running-requests",), VLLM: ("--max-num-seqs",)},
        telling=2,
        stale="Running requests were pinned at the request cap; the newest sample has {load}: the finding is stale.",
    ),
    Rule(
        MAMBA_CAPPED,
        STARTUP,
        "Mamba-capped at startup: max running requests lowered by the mamba state pool",
        "mamba-capped at startup",
        "At startup: {detail}.",
        "mamba",
        None,
        alert="HybridCacheMambaCappedAtStartup",
        scenario="sglang-old-capped.log",
        actions={SGLANG: _SGL_MAMBA, VLLM: ("--max-num-seqs", *_VLLM_POOL)},
        telling=5,
    ),
    Rule(
        RETRACTION_STORM,
        WINDOWED,
        "Retraction storm: requests retracted/preempted repeatedly",
        "retraction storm",
        "Requests are retracted or preempted repeatedly ({retracted} so far).",
        None,
        "rgba(148,103,189,0.55)",
        strip=True,
        alert="HybridCacheRetractionStorm",
        scenario="sglang-kv-bound.log",
        actions={SGLANG: ("--schedule-conservativeness", POOL_SIDE), VLLM: _VLLM_POOL},
        telling=4,
    ),
    Rule(
        MAMBA_EXHAUSTED,
        EVENT,
        "Mamba pool exhausted: the scheduler ran out of mamba slots",
        "mamba pool exhausted",
        "The scheduler ran out of mamba state slots (the log line is under the finding's evidence).",
        "mamba",
        "rgba(255,127,14,0.65)",
        strip=True,
        alert="HybridCacheMambaExhausted",
        scenario="sglang-mamba-exhausted.log",
        actions={SGLANG: _SGL_MAMBA, VLLM: _VLLM_POOL},
        telling=3,
    ),
)

BY_ID: dict[str, Rule] = {r.id: r for r in RULES}
assert len(BY_ID) == len(RULES), "a rule id is listed twice"

# the tables the readers use, derived (in catalogue order unless said otherwise)
RULE_IDS: tuple[str, ...] = tuple(r.id for r in RULES)
SUSTAINED_RULES: tuple[str, ...] = tuple(r.id for r in RULES if r.kind == SUSTAINED)  # the order of a sample's conditions
WINDOWED_RULES: tuple[str, ...] = tuple(r.id for r in RULES if r.kind == WINDOWED)
BINDING: tuple[str, ...] = (*dict.fromkeys(BY_ID[r].pool for r in SUSTAINED_RULES), "none")  # a sample's binding categories
SHADED_RULES: tuple[str, ...] = tuple(r.id for r in RULES if r.shade)  # the timeline's finding bits, in this order
HEADLINE_ORDER: tuple[str, ...] = tuple(r.id for r in sorted(RULES, key=lambda r: r.telling))
TITLES: dict[str, str] = {r.id: r.title for r in RULES}
WORDS: dict[str, str] = {r.id: r.words for r in RULES}
SHADES: dict[str, str] = {r.id: r.shade for r in RULES if r.shade}
STRIP_RULES: tuple[str, ...] = tuple(r.id for r in RULES if r.strip)


def on_pool(pool: str) -> tuple[str, ...]:
    """The rules about ``pool`` ("mamba", "kv", "requests")."""
    return tuple(r.id for r in RULES if r.pool == pool)


__all__ = [
    "KV_BOUND",
    "MAMBA_BOUND",
    "MAMBA_CAPPED",
    "MAMBA_EXHAUSTED",
    "REQUEST_CAP_BOUND",
    "RETRACTION_STORM",
    "BINDING",
    "BINDING_WORDS",
    "BY_ID",
    "HEADLINE_ORDER",
    "POOL_SIDE",
    "RULES",
    "RULE_IDS",
    "Rule",
    "SHADED_RULES",
    "SHADES",
    "STRIP_RULES",
    "SUSTAINED_RULES",
    "TITLES",
    "WINDOWED_RULES",
    "WORDS",
    "on_pool",
]
