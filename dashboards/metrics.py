"""The exporter's public metric contract, in one place.

Dashboards and alert rules may only query names listed here (``tests/test_dashboards.py`` and
``tests/test_alerts.py`` parse every PromQL expression and check). The value is the set of
labels each family carries (besides the target labels ``job``/``instance``).

``OPTIONAL`` lists the metrics that legitimately have no series on some deployments (they depend
on the engine, the model family or a server flag); the real-Prometheus integration test, which
runs SGLang hybrid-GDN scenarios, does not require panel targets built only on them to return data.
"""

from __future__ import annotations

import re

SERVER = frozenset({"engine", "source", "dp_rank"})
ENGINE_SOURCE = frozenset({"engine", "source"})
SOURCE = frozenset({"source"})

GAUGES: dict[str, frozenset[str]] = {
    "hybrid_cache_running_requests": SERVER,
    "hybrid_cache_queued_requests": SERVER,
    "hybrid_cache_kv_usage_ratio": SERVER,
    "hybrid_cache_kv_used_tokens": SERVER,
    "hybrid_cache_mamba_usage_ratio": SERVER,
    "hybrid_cache_mamba_used_slots": SERVER,
    "hybrid_cache_swa_usage_ratio": SERVER,
    "hybrid_cache_generation_throughput_tokens_per_second": SERVER,
    "hybrid_cache_input_throughput_tokens_per_second": SERVER,
    "hybrid_cache_spec_accept_length": SERVER,
    "hybrid_cache_spec_accept_ratio": SERVER,
    "hybrid_cache_prefix_cache_hit_ratio": SERVER,
    "hybrid_cache_kv_capacity_tokens": SERVER,
    "hybrid_cache_kv_capacity_bytes": SERVER,
    "hybrid_cache_mamba_capacity_slots": SERVER,
    "hybrid_cache_mamba_slots_per_request": SERVER,
    "hybrid_cache_max_running_requests": SERVER,
    "hybrid_cache_mamba_state_bytes": SERVER | {"state"},
    "hybrid_cache_replayssm_buffer_bytes": SERVER | {"buffer"},
    "hybrid_cache_replayssm_record_length": SERVER,
    "hybrid_cache_max_concurrency": SERVER,
    "hybrid_cache_context_length_tokens": SERVER,
    "hybrid_cache_finding": SERVER | {"rule"},
    "hybrid_cache_recommended_mamba_full_memory_ratio": SERVER,
}

INFO: dict[str, frozenset[str]] = {
    "hybrid_cache_recommendation_info": SERVER | {"rule", "flag", "value"},
    "hybrid_cache_server_info": ENGINE_SOURCE
    | {"model", "version", "kv_cache_dtype", "mamba_ssm_dtype", "radix_cache_strategy", "tp_size", "dp_size", "speculative"},
}

COUNTERS: dict[str, frozenset[str]] = {
    "hybrid_cache_decode_batches_total": SERVER,
    "hybrid_cache_prefill_batches_total": SERVER,
    "hybrid_cache_prefill_tokens_total": SERVER | {"kind"},
    "hybrid_cache_preempted_requests_total": SERVER,
    "hybrid_cache_retractions_total": SERVER,
    "hybrid_cache_server_restarts_total": ENGINE_SOURCE,
    "hybrid_cache_stats_lines_total": SERVER,
}

SELF: dict[str, frozenset[str]] = {
    "hybrid_cache_exporter_lines_total": SOURCE | {"outcome"},
    "hybrid_cache_last_line_timestamp_seconds": ENGINE_SOURCE,
    "hybrid_cache_exporter_read_lag_bytes": SOURCE,
    "hybrid_cache_exporter_rotations_total": SOURCE,
    "hybrid_cache_exporter_truncations_total": SOURCE,
    "hybrid_cache_exporter_read_bytes_total": SOURCE,
    "hybrid_cache_exporter_file_modified_timestamp_seconds": SOURCE,
    "hybrid_cache_exporter_source_up": SOURCE,
}

# standard prometheus_client process collector (no instrumentation labels)
PROCESS: dict[str, frozenset[str]] = {
    "process_cpu_seconds_total": frozenset(),
    "process_resident_memory_bytes": frozenset(),
    "process_start_time_seconds": frozenset(),
    "process_open_fds": frozenset(),
}

CONTRACT: dict[str, frozenset[str]] = {**GAUGES, **INFO, **COUNTERS, **SELF, **PROCESS}

# series Prometheus itself synthesises per target; alert rules may use them, dashboards do not
SYNTHETIC = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})

# metric -> why a given deployment may have no series for it
OPTIONAL: dict[str, str] = {
    "hybrid_cache_swa_usage_ratio": "hybrid-SWA models only",
    "hybrid_cache_spec_accept_length": "speculative decoding only",
    "hybrid_cache_spec_accept_ratio": "speculative decoding only",
    "hybrid_cache_prefix_cache_hit_ratio": "vLLM stats lines only",
    "hybrid_cache_max_concurrency": "vLLM startup only",
    "hybrid_cache_stats_lines_total": "vLLM only",
    "hybrid_cache_replayssm_buffer_bytes": "SGLang GDN with --enable-linear-replayssm only",
    "hybrid_cache_replayssm_record_length": "SGLang GDN with --enable-linear-replayssm only",
    "hybrid_cache_recommendation_info": "only while a finding fires",
    "hybrid_cache_recommended_mamba_full_memory_ratio": "only when the pools are imbalanced",
    "hybrid_cache_mamba_slots_per_request": "only when SGLang logs the mamba cap warning",
    "hybrid_cache_kv_capacity_bytes": "only when the engine logs the pool size in bytes",
    "hybrid_cache_preempted_requests_total": "only after the first retraction/preemption",
    "hybrid_cache_retractions_total": "only after the first SGLang retraction",
    "hybrid_cache_input_throughput_tokens_per_second": "SGLang prints it on prefill lines of some versions only",
}


# ------------------------------------------------------------------------------ PromQL helpers
# Enough of PromQL to list the series an expression selects; used by the tests of the dashboards
# and the alert rules (no Python PromQL parser is a dependency).

_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}")
_IDENT = re.compile(r"(?<![a-zA-Z0-9_:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![a-zA-Z0-9_:])(?!\s*\()")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*,?')


def selectors(expr: str) -> list[tuple[str, frozenset[str]]]:
    """``(metric name, label names matched)`` for every vector selector in ``expr``."""
    out: list[tuple[str, frozenset[str]]] = []
    body = _GROUPING.sub(" ", expr)

    def take(m: re.Match) -> str:
        name, inner = m.group(1), m.group(2)
        labels = frozenset(x.group(1) for x in _MATCHER.finditer(inner))
        if name and name not in _KEYWORDS:
            out.append((name, labels))
        return " "

    body = _SELECTOR.sub(take, body)
    body = _RANGE.sub(" ", _STRING.sub('""', body))
    for m in _IDENT.finditer(body):
        if m.group(1) not in _KEYWORDS:
            out.append((m.group(1), frozenset()))
    return out


def metric_names(expr: str) -> set[str]:
    """Every metric name ``expr`` selects."""
    return {name for name, _ in selectors(expr)}
