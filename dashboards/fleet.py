"""Grafana dashboard "Hybrid cache: fleet overview" (grafanalib source of ``hybrid-cache-fleet.json``).

The per-server dashboard answers "what is wrong with this server"; this one answers "which of my
servers are mamba-bound right now, and where". The top row reads the recording rules of
``recording.yml`` (aggregated per namespace and model); the rows below list every server and the
top offenders. Every query keeps either the (namespace, model) group or a server's full identity
(``identity.SERVER``), so no panel merges two servers of different groups or two pods.

Regenerate with ``python -m dashboards.build``; the same descriptions are in docs/dashboards.md.
"""

from __future__ import annotations

import attr
from grafanalib.core import Dashboard, Panel, Table, TableSortByField

from . import panels as frame
from .identity import SERVER, SOURCE, by
from .panels import DS, USAGE_STEPS, known, organize, table, tgt, timeseries, usage_column, var
from .rules import recorded

UID = "hybrid-cache-fleet"
RECORDED = recorded()
TITLE = "Hybrid cache: fleet overview"

GROUP_SEL = 'namespace=~"$namespace", model=~"$model"'
NS_SEL = 'namespace=~"$namespace"'
GLEG = "{{namespace}} {{model}}"
SLEG = "{{namespace}} {{pod}} {{instance}} {{source}} dp{{dp_rank}}"
SERVER_MODEL_BY = by(SERVER, "model")
TOPK = 10

POOL_CODES = {0: ("none", "green"), 1: ("mamba", "red"), 2: ("KV", "orange"), 3: ("request cap", "yellow")}


def rec(name: str, extra: str = "") -> str:
    """A recorded (namespace, model) series filtered by the template variables; it must be in recording.yml."""
    if name not in RECORDED:
        raise KeyError(f"{name} is not recorded by dashboards/recording.yml")
    return f"{name}{{{GROUP_SEL}{', ' + extra if extra else ''}}}"


def with_model(expr_metric: str, fn: str = "max") -> str:
    """``fn by (<server identity>, model) (metric * on (...) group_left (model) server_info)``: a per-server
    series with the model attached (from ``hybrid_cache_server_info``, the only series that carries it),
    filtered by namespace and model."""
    return f"{fn} by ({SERVER_MODEL_BY}) ({expr_metric} * on ({by(SOURCE)}) group_left (model) hybrid_cache_server_info{{{GROUP_SEL}}})"


def m(metric: str, extra: str = "") -> str:
    """An exporter metric (checked against the contract) filtered by namespace."""
    return f"{known(metric)}{{{NS_SEL}{', ' + extra if extra else ''}}}"


@attr.s
class BarGauge(Panel):
    """A Grafana >= 8 bar gauge (grafanalib's BarGauge writes the Grafana 6 schema)."""

    unit = attr.ib(default="short")
    minValue = attr.ib(default=None)
    maxValue = attr.ib(default=None)
    steps = attr.ib(factory=lambda: [{"color": "green", "value": None}])

    def to_json_data(self):
        return self.panel_json(
            {
                "type": "bargauge",
                "fieldConfig": {
                    "defaults": {
                        "unit": self.unit,
                        "min": self.minValue,
                        "max": self.maxValue,
                        "thresholds": {"mode": "absolute", "steps": self.steps},
                        "color": {"mode": "thresholds"},
                    },
                    "overrides": [],
                },
                "options": {
                    "displayMode": "gradient",
                    "orientation": "horizontal",
                    "showUnfilled": True,
                    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                },
            }
        )


# a bar gauge of a usage ratio: 0-100 %, coloured like the usage columns
USAGE_GAUGE = {"unit": "percentunit", "minValue": 0, "maxValue": 1, "steps": USAGE_STEPS}


def top(title: str, description: str, expr: str, unit: str = "short", **kw) -> BarGauge:
    t = tgt(f"topk({TOPK}, {expr})", SLEG + " ({{model}})", instant=True)
    return BarGauge(title=title, description=description, dataSource=DS, targets=[t], unit=unit, **kw)


# ---------------------------------------------------------------------------------------- panels

GROUPS = [
    table(
        "Namespaces and models",
        "One row per namespace and model (VMs without a namespace form one group per model): how many servers, "
        "requests running against the summed effective caps, the queue, and the fullest mamba and KV pool among them. "
        "Start here: a group with a queue and a full mamba pool is where the pool split costs capacity.",
        [
            tgt(rec("namespace_model:hybrid_cache_servers:count")),
            tgt(rec("namespace_model:hybrid_cache_running_requests:sum")),
            tgt(rec("namespace_model:hybrid_cache_max_running_requests:sum")),
            tgt(rec("namespace_model:hybrid_cache_queued_requests:sum")),
            tgt(rec("namespace_model:hybrid_cache_mamba_usage_ratio:max")),
            tgt(rec("namespace_model:hybrid_cache_kv_usage_ratio:max")),
        ],
        transformations=[
            {"id": "merge", "options": {}},
            organize(
                ["Time"],
                {
                    "Value #A": "servers",
                    "Value #B": "running",
                    "Value #C": "effective cap",
                    "Value #D": "queued",
                    "Value #E": "fullest mamba pool",
                    "Value #F": "fullest KV pool",
                },
            ),
        ],
        overrides=[usage_column(col) for col in ("fullest mamba pool", "fullest KV pool")],
    ),
    timeseries(
        "Servers per binding pool",
        "How many servers (engine processes: pod or VM, log source, DP rank) of each namespace and model each pool "
        "limits right now: mamba (the mamba state pool is full while KV has room), KV, the request cap, or none. "
        "A growing mamba band is the hybrid imbalance spreading; the servers are listed in the table below. "
        "From the recording rule namespace_model_pool:hybrid_cache_servers:count.",
        [tgt(rec("namespace_model_pool:hybrid_cache_servers:count"), GLEG + " {{pool}}")],
        stacking={"mode": "normal", "group": "A"},
        fillOpacity=40,
        lineInterpolation="stepAfter",
    ),
    timeseries(
        "Mamba vs KV pool usage per namespace/model",
        "Mean and maximum usage of the mamba state pool and of the full-attention KV pool over the servers of each "
        "namespace and model. A mamba max near 1 with a low KV mean is a group whose pools are split wrongly for its "
        "workload: the same --mamba-full-memory-ratio change likely helps every server of it.",
        [
            tgt(rec("namespace_model:hybrid_cache_mamba_usage_ratio:avg"), GLEG + " mamba mean"),
            tgt(rec("namespace_model:hybrid_cache_mamba_usage_ratio:max"), GLEG + " mamba max"),
            tgt(rec("namespace_model:hybrid_cache_kv_usage_ratio:avg"), GLEG + " KV mean"),
            tgt(rec("namespace_model:hybrid_cache_kv_usage_ratio:max"), GLEG + " KV max"),
        ],
        unit="percentunit",
        valueMin=0,
        valueMax=1,
    ),
    timeseries(
        "Running vs cap vs queued per namespace/model",
        "Requests running on the servers of each namespace and model against the sum of their effective "
        "max_running_requests, and the requests queued. A queue while running stays below the cap means a pool, not "
        "the cap, limits the group; running at the cap with a queue means the cap does.",
        [
            tgt(rec("namespace_model:hybrid_cache_running_requests:sum"), GLEG + " running"),
            tgt(rec("namespace_model:hybrid_cache_max_running_requests:sum"), GLEG + " effective cap"),
            tgt(rec("namespace_model:hybrid_cache_queued_requests:sum"), GLEG + " queued"),
        ],
    ),
    timeseries(
        "Firing findings per namespace/model",
        "How many servers of each namespace and model have each diagnosis rule on (mamba_bound, kv_bound, "
        "request_cap_bound, mamba_capped, mamba_exhausted, retraction_storm). A finding on many servers of one "
        "group points at a shared configuration; on one server, at that server.",
        [tgt(f"{rec('namespace_model_rule:hybrid_cache_finding:sum')} > 0", GLEG + " {{rule}}")],
        lineInterpolation="stepAfter",
    ),
    timeseries(
        "Retractions and preemptions per namespace/model",
        "Requests per second retracted (SGLang) or preempted (vLLM) on the servers of each namespace and model, over "
        "5 minutes. Any sustained rate means a pool is over-committed and work is recomputed; see the top offenders "
        "below for the servers.",
        [tgt(rec("namespace_model:hybrid_cache_preempted_requests:rate5m"), GLEG)],
        axisLabel="per second",
    ),
    timeseries(
        "Generation throughput per namespace/model",
        "Decode throughput the servers of each namespace and model log, summed. Compare with the binding pool: a "
        "group that is pool-bound while its throughput plateaus gains most from rebalancing the pools.",
        [tgt(rec("namespace_model:hybrid_cache_generation_throughput_tokens_per_second:sum"), GLEG)],
        axisLabel="tokens/s",
    ),
]

POOL_MAPPINGS = [
    {"type": "value", "options": {str(code): {"text": text, "color": color, "index": code} for code, (text, color) in POOL_CODES.items()}}
]

SERVERS = [
    table(
        "Every server: binding pool, usage, requests",
        "One row per server (namespace, pod, instance, log source, DP rank) with its model: which pool binds it "
        "(from server:hybrid_cache_binding_pool:code), mamba and KV usage, running requests against the effective "
        "cap, the queue, and how many findings are on. Sort by a column to find the servers to fix first.",
        [
            tgt(f"max by ({SERVER_MODEL_BY}) (server:hybrid_cache_binding_pool:code{{{GROUP_SEL}}})"),
            tgt(with_model(m("hybrid_cache_mamba_usage_ratio"))),
            tgt(with_model(m("hybrid_cache_kv_usage_ratio"))),
            tgt(with_model(m("hybrid_cache_running_requests"))),
            tgt(with_model(m("hybrid_cache_max_running_requests"))),
            tgt(with_model(m("hybrid_cache_queued_requests"))),
            tgt(with_model(m("hybrid_cache_finding"), fn="sum")),
        ],
        transformations=[
            {"id": "merge", "options": {}},
            organize(
                ["Time", "job", "container", "engine"],
                {
                    "Value #A": "binding pool",
                    "Value #B": "mamba usage",
                    "Value #C": "KV usage",
                    "Value #D": "running",
                    "Value #E": "effective cap",
                    "Value #F": "queued",
                    "Value #G": "findings on",
                },
            ),
        ],
        overrides=[
            {
                "matcher": {"id": "byName", "options": "binding pool"},
                "properties": [{"id": "mappings", "value": POOL_MAPPINGS}, {"id": "custom.displayMode", "value": "color-background"}],
            },
            *(usage_column(col) for col in ("mamba usage", "KV usage")),
        ],
        sortBy=[TableSortByField(displayName="binding pool", desc=True)],
    ),
    table(
        "Findings on, by server",
        "Every diagnosis rule on right now (hybrid_cache_finding == 1), one row per server and rule, with the model. "
        "Empty is good. Open the per-server dashboard (Hybrid cache: KV vs mamba pools) with the pod's variables "
        "for the details and the recommended flags.",
        [tgt(f"({m('hybrid_cache_finding')} == 1) * on ({by(SOURCE)}) group_left (model) hybrid_cache_server_info{{{GROUP_SEL}}}")],
        transformations=[organize(["Time", "Value", "__name__", "job", "container"])],
    ),
    table(
        "Recommended flags, by server",
        "The flag and value the exporter recommends for each finding on each server "
        "(hybrid_cache_recommendation_info), with the model: the same recommendation on every server of a group "
        "is a change to make in the group's shared configuration.",
        [tgt(f"{m('hybrid_cache_recommendation_info')} * on ({by(SOURCE)}) group_left (model) hybrid_cache_server_info{{{GROUP_SEL}}}")],
        transformations=[organize(["Time", "Value", "__name__", "job", "container"])],
    ),
]

OFFENDERS = [
    top(
        f"Top {TOPK}: fullest mamba pools",
        "The servers whose mamba state pool is fullest right now (topk over every server). Near 100% with a queue "
        "means new requests wait for a mamba slot while KV memory may sit idle.",
        with_model(m("hybrid_cache_mamba_usage_ratio")),
        **USAGE_GAUGE,
    ),
    top(
        f"Top {TOPK}: fullest KV pools",
        "The servers whose full-attention KV pool is fullest right now. Near 100% with a queue means long contexts "
        "exhaust KV tokens first: the opposite fix (less memory to the mamba pool, or an fp8 KV cache).",
        with_model(m("hybrid_cache_kv_usage_ratio")),
        **USAGE_GAUGE,
    ),
    top(
        f"Top {TOPK}: longest queues",
        "The servers with the most queued requests right now. Read with the binding pool of the same server in the "
        "table above: a queue on a pool-bound server is capacity lost to the pool split.",
        with_model(m("hybrid_cache_queued_requests")),
        steps=[{"color": "green", "value": None}, {"color": "orange", "value": 1}, {"color": "red", "value": 10}],
    ),
    top(
        f"Top {TOPK}: retractions and preemptions",
        "The servers retracting (SGLang) or preempting (vLLM) the most requests per second over the last 5 minutes: "
        "their pools are over-committed mid-decode. Servers that never retracted have no series and are not listed.",
        with_model(f"rate({m('hybrid_cache_preempted_requests_total')}[5m])"),
        unit="reqps",
        steps=[{"color": "green", "value": None}, {"color": "orange", "value": 0.05}, {"color": "red", "value": 0.2}],
    ),
]

SECTIONS: list[tuple[str, list]] = [
    ("Fleet by namespace and model (recording rules)", GROUPS),
    ("Every server", SERVERS),
    ("Top offenders", OFFENDERS),
]


def panels() -> list:
    """Rows of half-width panels; tables listing servers take the full width."""
    return frame.layout(
        SECTIONS,
        lambda p: 24 if isinstance(p, Table) else 12,
        lambda p: 10 if isinstance(p, Table) and len(p.targets) > 1 else 8,
    )


def dashboard() -> Dashboard:
    return frame.dashboard(
        TITLE,
        UID,
        "Every server running a hybrid linear-attention model: which pool binds it, mamba vs KV usage, "
        "running vs cap vs queued, findings and top offenders, per namespace and model (hybrid-cache-exporter).",
        ["hybrid-cache-exporter", "sglang", "vllm", "llm", "fleet"],
        "1m",
        panels(),
        [
            var("namespace", "Namespace", "label_values(hybrid_cache_server_info, namespace)"),
            var("model", "Model", f"label_values(hybrid_cache_server_info{{{NS_SEL}}}, model)"),
        ],
    )
