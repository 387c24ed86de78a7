"""prometheus_client custom collector: metric families built from the state at scrape time.

Nothing is registered globally and nothing is pre-created: a series exists only when its field
appeared in the log (a dense model has no ``hybrid_cache_mamba_usage_ratio``). Samples never
carry timestamps. The metric names and labels here are the public API listed in the README.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from .pipeline import Pipeline
from .state import SourceState, effective_max_running

P = "hybrid_cache_"
SERVER_LABELS = ["engine", "source", "dp_rank"]

# (short name, help). Gauges read from ServerState.gauges (runtime, latest line carrying the field)
RUNTIME_GAUGES: tuple[tuple[str, str], ...] = (
    ("running_requests", "Running requests (SGLang #running-req, vLLM Running)."),
    ("queued_requests", "Waiting requests (SGLang #queue-req, vLLM Waiting/Pending)."),
    (
        "kv_usage_ratio",
        "Full-attention KV pool usage 0-1 (SGLang 'full token usage' or 'token usage'; vLLM 'GPU KV cache usage'/100, "
        "which for hybrids also holds mamba blocks).",
    ),
    ("kv_used_tokens", "Tokens held in the full-attention KV pool (SGLang '#full token' / '#token')."),
    ("mamba_usage_ratio", "Mamba (linear-attention state) pool usage 0-1 (SGLang 'mamba usage')."),
    ("mamba_used_slots", "Mamba state slots in use, excluding evictable cached states (SGLang 'mamba num')."),
    ("swa_usage_ratio", "Sliding-window KV pool usage 0-1 (SGLang 'swa token usage')."),
    ("swa_used_tokens", "Tokens held in the sliding-window KV pool (SGLang '#swa token')."),
    ("generation_throughput_tokens_per_second", "Decode throughput (SGLang 'gen throughput', vLLM 'Avg generation throughput')."),
    ("input_throughput_tokens_per_second", "Prefill throughput (SGLang 'input throughput', vLLM 'Avg prompt throughput')."),
    ("spec_accept_length", "Speculative decoding mean accepted length (SGLang 'accept len', vLLM 'Mean acceptance length')."),
    ("spec_accept_ratio", "Speculative decoding acceptance rate 0-1."),
    ("prefix_cache_hit_ratio", "Prefix cache hit rate 0-1 (vLLM 'Prefix cache hit rate'/100)."),
    ("pending_prefill_tokens", "Tokens waiting for prefill (SGLang '#pending-token')."),
    ("cpu_kv_usage_ratio", "vLLM V0 CPU (swap) KV cache usage 0-1."),
    ("swapped_requests", "vLLM V0 swapped requests."),
)

# capacity facts (startup lines; reset when the server restarts)
CAPACITY_GAUGES: tuple[tuple[str, str], ...] = (
    (
        "kv_capacity_tokens",
        "Full-attention KV pool size in tokens (SGLang max_total_num_tokens / KV Cache #tokens; vLLM 'GPU KV cache size').",
    ),
    ("kv_capacity_bytes", "Full-attention KV pool size in bytes (SGLang K+V or KV size; vLLM 'Available KV cache memory')."),
    ("mamba_capacity_slots", "Mamba state pool size in slots per DP rank (SGLang max_mamba_cache_size)."),
    ("mamba_slots_per_request", "Mamba state slots each running request holds (SGLang cap warning)."),
    ("max_concurrency", "vLLM 'Maximum concurrency for N tokens per request'."),
    ("swa_capacity_tokens", "Sliding-window KV pool size in tokens."),
    ("context_length_tokens", "Context length (SGLang context_len, vLLM max model len)."),
    ("chunked_prefill_size_tokens", "SGLang chunked_prefill_size."),
    ("available_memory_bytes", "SGLang available_gpu_mem after pools and graphs."),
    ("weights_bytes", "Model weight memory per GPU."),
    ("replayssm_record_length", "SGLang GDN ReplaySSM ring depth (L / record_len)."),
    ("kv_blocks", "vLLM KV cache blocks (# GPU blocks / num_gpu_blocks)."),
    ("mamba_blocks", "vLLM Mamba cache blocks (from 'exceeds available Mamba cache blocks')."),
    ("attention_block_size_tokens", "vLLM hybrid attention block size after page-size unification."),
    ("mamba_page_padding_ratio", "vLLM mamba page padding 0-1."),
    ("requested_max_running_requests", "Requested max running requests before the engine lowered it."),
    ("draft_kv_capacity_tokens", "Speculative draft model KV pool size in tokens."),
)

COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("decode_batches_total", "decode_batches", "SGLang 'Decode batch' lines."),
    ("prefill_batches_total", "prefill_batches", "SGLang 'Prefill batch' lines."),
    ("stats_lines_total", "stats_lines", "vLLM periodic stats lines."),
    (
        "preempted_requests_total",
        "preempted_requests",
        "Requests retracted (SGLang '#retracted_reqs') or preempted (vLLM 'Preemptions' / V0 cumulative count).",
    ),
    ("retractions_total", "retraction_events", "SGLang retraction events ('KV cache pool is full. Retract requests.')."),
    ("retracted_mamba_slots_total", "retracted_mamba_slots", "Mamba slots freed by retractions (SGLang '#mamba_num_gained')."),
    ("spec_accepted_tokens_total", "spec_accepted_tokens", "vLLM speculative accepted tokens."),
    ("spec_drafted_tokens_total", "spec_drafted_tokens", "vLLM speculative drafted tokens."),
)

INFO_KEYS = (
    ("model", ("served_model_name", "model_path", "model")),
    ("kv_cache_dtype", ("kv_cache_dtype",)),
    ("mamba_ssm_dtype", ("mamba_ssm_dtype", "mamba_ssm_cache_dtype")),
    ("radix_cache_strategy", ("mamba_radix_cache_strategy", "mamba_scheduler_strategy", "mamba_cache_mode")),
    ("tp_size", ("tp_size", "tensor_parallel_size")),
    ("dp_size", ("dp_size", "data_parallel_size")),
    ("speculative", ("speculative_algorithm", "speculative_config")),
)


def _fmt(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, dict):
        return str(v.get("method") or v.get("model") or "") if v else ""
    s = str(v)
    return s[:120]


def server_info(src: SourceState) -> dict[str, str]:
    """Labels of ``hybrid_cache_server`` info: the server's configuration as logged."""
    cfg = src.config
    out: dict[str, str] = {}
    for label, keys in INFO_KEYS:
        val = ""
        for k in keys:
            if cfg.get(k) not in (None, ""):
                val = _fmt(cfg[k])
                break
        out[label] = val
    if out["speculative"] in ("None", "none"):
        out["speculative"] = ""
    out["version"] = src.version or ""
    return out


class HybridCacheCollector(Collector):
    """Builds every ``hybrid_cache_*`` family from a :class:`Pipeline` at scrape time."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def collect(self) -> Iterator:
        with self.pipeline.lock:
            self.pipeline.sync()
            fams = list(self._collect(list(self.pipeline.sources.values())))
        # a family with no samples is left out: absent, not 0
        yield from (f for f in fams if f.samples)

    def _collect(self, sources: list[SourceState]) -> Iterator:
        fams: dict[str, GaugeMetricFamily] = {}

        def gauge(name: str, doc: str, labels: list[str] = SERVER_LABELS) -> GaugeMetricFamily:
            f = fams.get(name)
            if f is None:
                f = fams[name] = GaugeMetricFamily(P + name, doc, labels=labels)
            return f

        runtime_doc = dict(RUNTIME_GAUGES)
        cap_doc = dict(CAPACITY_GAUGES)
        counters = {short: CounterMetricFamily(P + name[: -len("_total")], doc, labels=SERVER_LABELS) for name, short, doc in COUNTERS}
        prefill_tokens = CounterMetricFamily(
            P + "prefill_tokens",
            "Prompt tokens in SGLang prefill batches, new (computed) or cached (prefix hit).",
            labels=SERVER_LABELS + ["kind"],
        )
        state_bytes = GaugeMetricFamily(
            P + "mamba_state_bytes",
            "Mamba state pool memory per GPU by state buffer (SGLang 'Mamba Cache is allocated').",
            labels=SERVER_LABELS + ["state"],
        )
        replay_bytes = GaugeMetricFamily(
            P + "replayssm_buffer_bytes", "SGLang GDN ReplaySSM ring buffer memory per GPU.", labels=SERVER_LABELS + ["buffer"]
        )
        max_running = GaugeMetricFamily(
            P + "max_running_requests",
            "Effective max running requests per DP rank (SGLang summary line or mamba cap warning; vLLM max_num_seqs from args or the engine default).",
            labels=SERVER_LABELS,
        )
        finding = GaugeMetricFamily(
            P + "finding", "1 while a diagnosis rule fires for this server, else 0 (rules: docs/rules.md).", labels=SERVER_LABELS + ["rule"]
        )
        reco = InfoMetricFamily(
            P + "recommendation", "A flag that fixes a firing finding, with its value.", labels=SERVER_LABELS + ["rule", "flag", "value"]
        )
        reco_ratio = GaugeMetricFamily(
            P + "recommended_mamba_full_memory_ratio",
            "--mamba-full-memory-ratio that would balance the observed usage of both pools.",
            labels=SERVER_LABELS,
        )
        info = InfoMetricFamily(P + "server", "Server configuration as logged at startup.", labels=["engine", "source"])
        lines = CounterMetricFamily(
            P + "exporter_lines",
            "Log lines read, by outcome (unrecognized = known marker that failed to parse).",
            labels=["source", "outcome"],
        )
        restarts = CounterMetricFamily(
            P + "server_restarts", "Server starts seen in the log after runtime lines.", labels=["engine", "source"]
        )
        last_ts = GaugeMetricFamily(
            P + "last_line_timestamp_seconds", "Log timestamp of the newest line read from the source.", labels=["engine", "source"]
        )

        for src in sources:
            eng = src.engine or ""
            for outcome, n in src.lines.items():
                lines.add_metric([src.name, outcome], n)
            if not src.engine:
                continue
            restarts.add_metric([eng, src.name], src.restarts)
            if src.last_ts is not None:
                last_ts.add_metric([eng, src.name], src.last_ts)
            info.add_metric([eng, src.name], server_info(src))
            for dp, srv in sorted(src.servers.items()):
                lab = [eng, src.name, dp]
                for name, v in srv.gauges.items():
                    gauge(name, runtime_doc[name]).add_metric(lab, v)
                for name, v in srv.capacity.items():
                    doc = cap_doc.get(name)
                    if doc is not None:
                        gauge(name, doc).add_metric(lab, v)
                mr, _ = effective_max_running(src, srv)
                if mr is not None:
                    max_running.add_metric(lab, mr)
                for k, v in srv.mamba_state_bytes.items():
                    state_bytes.add_metric(lab + [k], v)
                for k, v in srv.replayssm_buffer_bytes.items():
                    replay_bytes.add_metric(lab + [k], v)
                for short, fam in counters.items():
                    v = srv.counters.get(short)
                    if v is not None:
                        fam.add_metric(lab, v)
                if srv.counters.get("prefill_batches") is not None:
                    prefill_tokens.add_metric(lab + ["new"], srv.counters.get("prefill_tokens_new", 0.0))
                    prefill_tokens.add_metric(lab + ["cached"], srv.counters.get("prefill_tokens_cached", 0.0))
                for rule, on in sorted(srv.findings.items()):
                    finding.add_metric(lab + [rule], on)
                for rule, flag, value in srv.recommendations:
                    reco.add_metric(lab + [rule, flag, value], {})
                if srv.recommended_ratio is not None:
                    reco_ratio.add_metric(lab, srv.recommended_ratio)

        yield lines
        yield last_ts
        yield restarts
        yield info
        yield from fams.values()
        yield max_running
        yield state_bytes
        yield replay_bytes
        yield from counters.values()
        yield prefill_tokens
        yield finding
        yield reco
        yield reco_ratio
