"""Grafana dashboard "Hybrid cache: KV vs mamba pools" (grafanalib source of ``hybrid-cache.json``).

Regenerate the JSON with ``python -m dashboards.build``; ``tests/dashboards/test_dashboards.py`` fails when the
checked-in JSON is stale. Every panel carries a description saying what to look for; the same
text is in docs/dashboards.md's panel list.

Fleet-ready: the job/namespace/pod/instance variables filter every query, and every panel keeps
those labels (see ``identity.py``), so two pods that both call their log ``server`` stay two
series and two table rows.
"""

from __future__ import annotations

from grafanalib.core import Dashboard, Stat, Table, Template

from exporter.catalogues import contract

from . import panels as frame
from .identity import SERVER, STREAM, TARGET_VARS, by, regex_sel
from .panels import DS, flag_stat, known, organize, table, tgt, timeseries, var

UID = "hybrid-cache-pools"
TITLE = "Hybrid cache: KV vs mamba pools"
RATE = "$__rate_interval"
CACHED = 'kind="cached"'

# every selector filters by the target variables (job/namespace/pod/instance) and the exporter's own
TGT_SEL = regex_sel(TARGET_VARS)
SERVER_SEL = regex_sel([*TARGET_VARS, *contract.SERVER])
ES_SEL = regex_sel([*TARGET_VARS, *contract.ENGINE_SOURCE])
SRC_SEL = regex_sel([*TARGET_VARS, *contract.SOURCE])
# ... and every aggregation keeps all identity labels, so two pods never merge into one series/row
SERVER_BY = by(SERVER)
STREAM_BY = by(STREAM)


def s(metric: str, extra: str = "", sel: str = SERVER_SEL) -> str:
    """``metric{extra, <template selector>}``."""
    inner = f"{extra}, {sel}" if extra else sel
    return f"{known(metric)}{{{inner}}}"


# legends name the pod (namespace, pod; both empty on a VM) and the target, then the stream and rank
WHO = "{{namespace}} {{pod}} {{instance}}"
LEG = WHO + " {{source}} dp{{dp_rank}}"
SLEG = WHO + " {{source}}"


# ---------------------------------------------------------------------------------------- panels

POOLS = [
    timeseries(
        "KV pool vs mamba pool usage",
        "The two capacity pools of a hybrid model side by side, per server (pod or instance, log source, DP rank): the full-attention KV pool "
        "(grows with every token) and the mamba/linear-attention state pool (a fixed number of slots per running "
        "request). Look for one line pinned near 1.0 while the other stays low: that pool limits concurrency and the "
        "memory given to the other is wasted. SGLang's own token_usage is max(full, mamba), so it cannot show this split.",
        [
            tgt(s("hybrid_cache_kv_usage_ratio"), LEG + " KV"),
            tgt(s("hybrid_cache_mamba_usage_ratio"), LEG + " mamba"),
            tgt(s("hybrid_cache_swa_usage_ratio"), LEG + " SWA"),
        ],
        unit="percentunit",
        valueMin=0,
        valueMax=1,
    ),
    timeseries(
        "Which pool binds",
        "The exporter's diagnosis over time (1 = the finding is active): mamba_bound (mamba pool full, KV mostly "
        "free, requests queue), kv_bound (the opposite), request_cap_bound (max_running_requests reached while both "
        "pools have room). A flat line at 1 for mamba_bound is the textbook hybrid imbalance; see the "
        "Recommendations table for the flag to change.",
        [tgt(s("hybrid_cache_finding", 'rule=~"mamba_bound|kv_bound|request_cap_bound"'), LEG + " {{rule}}")],
        unit="short",
        valueMin=0,
        valueMax=1,
        lineInterpolation="stepAfter",
    ),
    timeseries(
        "Pool imbalance (mamba − KV usage)",
        "Mamba usage minus KV usage. Near 0 the memory split between the pools fits the workload. Persistently "
        "positive (> 0.4) means mamba slots run out first (shorter contexts than the pools were sized for: raise "
        "--mamba-full-memory-ratio or raise --max-mamba-cache-size); persistently negative means the KV pool runs out first.",
        [tgt(f"{s('hybrid_cache_mamba_usage_ratio')} - {s('hybrid_cache_kv_usage_ratio')}", LEG)],
        unit="percentunit",
        valueMin=-1,
        valueMax=1,
    ),
    timeseries(
        "Running requests vs effective cap, queued requests",
        "Running requests against the effective max_running_requests (after SGLang's mamba cap, or vLLM max_num_seqs) "
        "and the queue. Running flat at the cap with a non-empty queue means the request cap binds; running below the "
        "cap with a queue means a pool (see above) binds. vLLM's 'Maximum concurrency' estimate is shown when logged.",
        [
            tgt(s("hybrid_cache_running_requests"), LEG + " running"),
            tgt(s("hybrid_cache_max_running_requests"), LEG + " effective cap"),
            tgt(s("hybrid_cache_queued_requests"), LEG + " queued"),
            tgt(s("hybrid_cache_max_concurrency"), LEG + " vLLM max concurrency"),
        ],
    ),
    timeseries(
        "Mamba slots: used vs capacity",
        "Mamba state slots in use against the pool size, and running requests × slots per request. Used slots above "
        "running × slots/request are cached (radix) states; a pool whose capacity / slots-per-request is below the "
        "configured max_running_requests silently caps concurrency at startup.",
        [
            tgt(s("hybrid_cache_mamba_used_slots"), LEG + " used"),
            tgt(s("hybrid_cache_mamba_capacity_slots"), LEG + " capacity"),
            tgt(
                f"{s('hybrid_cache_running_requests')} * on({SERVER_BY}) group_left() "
                f"max by ({SERVER_BY}) ({s('hybrid_cache_mamba_slots_per_request')})",
                LEG + " running × slots/request",
            ),
        ],
    ),
    timeseries(
        "KV tokens: used vs capacity",
        "Tokens held in the full-attention KV pool against its size. With the mamba pool binding, this stays far "
        "below capacity: that gap is memory that --mamba-full-memory-ratio could move to the mamba pool.",
        [
            tgt(s("hybrid_cache_kv_used_tokens"), LEG + " used"),
            tgt(s("hybrid_cache_kv_capacity_tokens"), LEG + " capacity"),
        ],
    ),
]

CAPACITY = [
    table(
        "Capacity facts (from the startup log)",
        "What each server allocated at startup, one row per pod/instance, source and DP rank: KV pool tokens, mamba slots, slots each request "
        "holds, the effective max running requests, vLLM's max concurrency and the context length. These facts are "
        "printed only in the boot log (e.g. SGLang's mamba cap, sglang#38846); compare the effective cap with what "
        "you configured and with the concurrency your benchmark assumes.",
        [
            tgt(f"max by ({SERVER_BY}) ({s('hybrid_cache_kv_capacity_tokens')})"),
            tgt(f"max by ({SERVER_BY}) ({s('hybrid_cache_mamba_capacity_slots')})"),
            tgt(f"max by ({SERVER_BY}) ({s('hybrid_cache_mamba_slots_per_request')})"),
            tgt(f"max by ({SERVER_BY}) ({s('hybrid_cache_max_running_requests')})"),
            tgt(f"max by ({SERVER_BY}) ({s('hybrid_cache_max_concurrency')})"),
            tgt(f"max by ({SERVER_BY}) ({s('hybrid_cache_context_length_tokens')})"),
        ],
        transformations=[
            {"id": "merge", "options": {}},
            organize(
                ["Time"],
                {
                    "Value #A": "KV tokens",
                    "Value #B": "mamba slots",
                    "Value #C": "slots/request",
                    "Value #D": "max running",
                    "Value #E": "vLLM max concurrency",
                    "Value #F": "context length",
                },
            ),
        ],
    ),
    timeseries(
        "Pool memory per GPU",
        "Bytes per GPU of the KV pool and of each mamba state buffer (conv, ssm, intermediate_*), plus SGLang GDN "
        "ReplaySSM buffers. The ssm state usually dominates: --mamba-ssm-dtype bfloat16 halves it (doubling slots).",
        [
            tgt(s("hybrid_cache_kv_capacity_bytes"), LEG + " KV pool"),
            tgt(s("hybrid_cache_mamba_state_bytes"), LEG + " mamba {{state}}"),
            tgt(s("hybrid_cache_replayssm_buffer_bytes"), LEG + " replayssm {{buffer}}"),
        ],
        unit="bytes",
        stacking={"mode": "normal", "group": "A"},
        fillOpacity=30,
    ),
    table(
        "Server configuration",
        "hybrid_cache_server_info: model, engine version, KV and mamba dtypes, radix cache strategy, TP/DP sizes and "
        "speculative algorithm as logged at startup. Check the dtypes and the radix strategy (V2 needs extra mamba slots "
        "per request) when the capacity facts look wrong.",
        [tgt(s("hybrid_cache_server_info", sel=ES_SEL))],
        transformations=[organize(["Time", "Value", "__name__"])],
    ),
]

TRAFFIC = [
    timeseries(
        "Throughput",
        "Decode (generation) and prefill (input) throughput as the engine logs it. A throughput plateau while requests "
        "queue and one pool is full confirms the pool, not compute, is the bottleneck.",
        [
            tgt(s("hybrid_cache_generation_throughput_tokens_per_second"), LEG + " generation"),
            tgt(s("hybrid_cache_input_throughput_tokens_per_second"), LEG + " input"),
        ],
        axisLabel="tokens/s",
    ),
    timeseries(
        "Speculative decoding accept length",
        "Mean accepted draft length (and acceptance rate 0-1) when speculative decoding is on. Speculative decoding "
        "holds extra (intermediate) mamba state per request; a low accept length means that memory buys little.",
        [
            tgt(s("hybrid_cache_spec_accept_length"), LEG + " accept length"),
            tgt(s("hybrid_cache_spec_accept_ratio"), LEG + " accept ratio"),
        ],
    ),
    timeseries(
        "Retractions and preemptions",
        "Requests retracted (SGLang, pool full mid-decode) or preempted (vLLM) per second, and SGLang retraction events. "
        "Any sustained rate means a pool is over-committed: running requests lose their progress and are recomputed.",
        [
            tgt(f"rate({s('hybrid_cache_preempted_requests_total')}[{RATE}])", LEG + " preempted requests/s"),
            tgt(f"rate({s('hybrid_cache_retractions_total')}[{RATE}])", LEG + " retraction events/s"),
        ],
        axisLabel="per second",
    ),
    timeseries(
        "Prefix cache hits",
        "Share of prompt tokens served from the prefix cache: SGLang cached / (new + cached) prefill tokens, vLLM's "
        "logged prefix cache hit rate. On hybrids a prefix hit also needs a cached mamba state (checkpoint), so hit "
        "rates can drop when the mamba pool is full.",
        [
            tgt(
                f"sum by ({SERVER_BY}) (rate({s('hybrid_cache_prefill_tokens_total', CACHED)}[{RATE}])) "
                f"/ sum by ({SERVER_BY}) (rate({s('hybrid_cache_prefill_tokens_total')}[{RATE}]))",
                LEG + " SGLang cached share",
            ),
            tgt(s("hybrid_cache_prefix_cache_hit_ratio"), LEG + " vLLM hit rate"),
        ],
        unit="percentunit",
    ),
    timeseries(
        "Log activity (batch lines/s)",
        "Decode and prefill batch lines (SGLang) and stats lines (vLLM) per second. Engines print these only while "
        "busy, so at 0 the gauges above are frozen at their last value: read them as 'last seen', not 'now'.",
        [
            tgt(f"rate({s('hybrid_cache_decode_batches_total')}[{RATE}])", LEG + " decode"),
            tgt(f"rate({s('hybrid_cache_prefill_batches_total')}[{RATE}])", LEG + " prefill"),
            tgt(f"rate({s('hybrid_cache_stats_lines_total')}[{RATE}])", LEG + " vLLM stats"),
        ],
        axisLabel="lines/s",
    ),
]

DIAGNOSIS = [
    table(
        "Active findings",
        "Every diagnosis rule currently firing (hybrid_cache_finding == 1), per pod/instance, source and DP rank. Empty is good. "
        "mamba_capped means the mamba pool lowered max_running_requests at startup.",
        [tgt(f"{s('hybrid_cache_finding')} == 1")],
        transformations=[organize(["Time", "Value", "__name__"])],
    ),
    table(
        "Recommendations",
        "The flags (and values) that address each active finding, from hybrid_cache_recommendation_info, with their "
        "rank in the finding's order (rank 1: start here; docs/rules.md#the-order). A value with a caveat is not "
        "exported (the status page and report list it apart). Apply one change at a time, rank 1 first, and watch "
        "the pool usage panel rebalance.",
        [tgt(s("hybrid_cache_recommendation_info"))],
        transformations=[organize(["Time", "Value", "__name__"])],
    ),
    Stat(
        title="Recommended --mamba-full-memory-ratio",
        description="The --mamba-full-memory-ratio that would have balanced the observed peak usage of both pools. "
        "Compare with the configured value (default 0.9); no value means the pools are balanced.",
        dataSource=DS,
        targets=[tgt(s("hybrid_cache_recommended_mamba_full_memory_ratio"), LEG)],
        reduceCalc="lastNotNull",
        decimals=2,
        graphMode="none",
    ),
]

HEALTH = [
    timeseries(
        "Lines read by outcome",
        "Log lines per second by outcome: parsed, ignored (not a line the exporter needs) and unrecognized (a known "
        "marker that failed to parse). Any unrecognized lines mean the engine's log format drifted: the gauges fed by "
        "those lines stop updating. See the HybridCacheFormatDrift runbook.",
        [
            tgt(
                f"sum by ({STREAM_BY}, outcome) (rate({s('hybrid_cache_exporter_lines_total', sel=SRC_SEL)}[{RATE}]))",
                SLEG + " {{outcome}}",
            )
        ],
        axisLabel="lines/s",
    ),
    timeseries(
        "Last log line age and file age",
        "Seconds since the newest log line's own timestamp and since the log file was last modified. Growing age with "
        "a busy server means the exporter is not reading (wrong path, rotation not followed). Idle servers print "
        "nothing, so a growing age alone is not an error.",
        [
            tgt(f"time() - {s('hybrid_cache_last_line_timestamp_seconds', sel=ES_SEL)}", SLEG + " last line"),
            tgt(f"time() - {s('hybrid_cache_exporter_file_modified_timestamp_seconds', sel=SRC_SEL)}", SLEG + " file modified"),
        ],
        unit="s",
    ),
    timeseries(
        "Read lag and read rate",
        "Bytes of the log not yet read (should hover near 0) and bytes read per second. A lag that keeps growing "
        "means the exporter cannot keep up with the log.",
        [
            tgt(s("hybrid_cache_exporter_read_lag_bytes", sel=SRC_SEL), SLEG + " lag"),
            tgt(f"rate({s('hybrid_cache_exporter_read_bytes_total', sel=SRC_SEL)}[{RATE}])", SLEG + " read/s"),
        ],
        unit="bytes",
    ),
    timeseries(
        "Rotations, truncations, server restarts (1h)",
        "Log rotations and truncations the tailer followed, and server restarts seen in the log, over the last hour. "
        "Restarts reset capacity facts; frequent ones usually mean OOM or crash loops.",
        [
            tgt(f"increase({s('hybrid_cache_exporter_rotations_total', sel=SRC_SEL)}[1h])", SLEG + " rotations"),
            tgt(f"increase({s('hybrid_cache_exporter_truncations_total', sel=SRC_SEL)}[1h])", SLEG + " truncations"),
            tgt(f"increase({s('hybrid_cache_server_restarts_total', sel=ES_SEL)}[1h])", SLEG + " server restarts"),
        ],
    ),
    flag_stat(
        "Log sources up",
        "1 when the exporter can open and read the log source, 0 when it cannot (missing file, permissions). "
        "Anything red here means every other panel for that source is stale.",
        tgt(s("hybrid_cache_exporter_source_up", sel=SRC_SEL), SLEG),
        ("down", "up"),
        good=1,
    ),
    flag_stat(
        "Log paths missing",
        "1 when a configured --log path (or glob) has not appeared for --source-missing-after seconds: "
        "usually a typo or a volume mounted elsewhere. The exporter logs a WARNING and its landing page shows the path; "
        "0 (or no value: paths are not watched) is good.",
        tgt(s("hybrid_cache_exporter_source_missing", sel=SRC_SEL), SLEG),
        ("found", "missing"),
        good=0,
    ),
    table(
        "Exporter versions",
        "hybrid_cache_exporter_build_info of every selected exporter: version, git revision and Python. Across a fleet, "
        "mixed versions explain metrics or findings that only some servers have.",
        [tgt(s("hybrid_cache_exporter_build_info", sel=TGT_SEL))],
        transformations=[organize(["Time", "Value", "__name__"])],
    ),
]

SECTIONS: list[tuple[str, list]] = [
    ("Pools: which one limits concurrency", POOLS),
    ("Capacity facts", CAPACITY),
    ("Throughput, speculative decoding, retractions", TRAFFIC),
    ("Findings and recommendations", DIAGNOSIS),
    ("Exporter health", HEALTH),
]


def panels() -> list:
    """All panels in display order: a row header per section, then two half-width panels per line
    (multi-query tables full width)."""
    return frame.layout(SECTIONS, lambda p: 24 if isinstance(p, Table) and len(p.targets) > 1 else 12)


TARGET_VAR_LABELS = {"job": "Job", "namespace": "Namespace", "pod": "Pod", "instance": "Instance"}


def target_vars() -> list[Template]:
    """job -> namespace -> pod -> instance, each narrowed by the ones before. The values come from
    ``hybrid_cache_exporter_source_up``, which every exporter exposes from its first scrape (before the
    engine is known). A label a deployment lacks (no ``pod`` on a VM) yields no values: the variable
    stays on All, whose value ``.*`` also matches the absent label."""
    out = []
    for i, name in enumerate(TARGET_VARS):
        sel = regex_sel(TARGET_VARS[:i])
        metric = f"hybrid_cache_exporter_source_up{{{sel}}}" if sel else "hybrid_cache_exporter_source_up"
        out.append(var(name, TARGET_VAR_LABELS[name], f"label_values({metric}, {name})"))
    return out


def dashboard() -> Dashboard:
    return frame.dashboard(
        TITLE,
        UID,
        "Which of the two pools of a hybrid linear-attention model (full-attention KV vs mamba state) "
        "limits concurrency on SGLang/vLLM, read from the server logs by hybrid-cache-exporter.",
        ["hybrid-cache-exporter", "sglang", "vllm", "llm"],
        "30s",
        panels(),
        [
            *target_vars(),
            var("engine", "Engine", f"label_values(hybrid_cache_server_info{{{TGT_SEL}}}, engine)"),
            var("source", "Source", f'label_values(hybrid_cache_server_info{{{TGT_SEL}, engine=~"$engine"}}, source)'),
            var(
                "dp_rank",
                "DP rank",
                f'label_values(hybrid_cache_running_requests{{{TGT_SEL}, engine=~"$engine", source=~"$source"}}, dp_rank)',
            ),
        ],
    )
