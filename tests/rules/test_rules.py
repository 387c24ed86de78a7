"""Diagnosis rules on log time: every rule firing and staying quiet, sustain windows, hysteresis,
recommendation filters. Events are built directly and fed through a Pipeline with the rules
attached (the same observer path as replay/serve)."""

from __future__ import annotations

import pytest

from exporter.advice import flags, recommend
from exporter.advice.recommend import observe
from exporter.capacity.version import VersionRange
from exporter.diagnosis import rules
from exporter.diagnosis.rules import Rules, RulesConfig, load_config
from exporter.state import facts
from exporter.state.pipeline import Pipeline
from parsers import events as ev

T0 = 1_786_000_000.0


class Feeder:
    def __init__(self, engine: str = ev.SGLANG, config: RulesConfig | None = None, source: str = "t") -> None:
        self.rules = observe(Rules(config))
        self.pipe = Pipeline(engine, [self.rules])
        self.engine = engine
        self.name = source

    @property
    def src(self):
        return self.pipe.source(self.name)

    def srv(self, dp: str = "0"):
        return self.src.server(dp)

    def event(self, e: object, ts: float | None, dp: str = "0", tp: int | None = 0, raw: str | None = None) -> None:
        src = self.src
        line = ev.Line(ev.PARSED, self.engine, ts, dp, tp, None, e)
        raw = raw if raw is not None else f"[{ts}] {e!r}"
        with self.pipe.lock:
            if src.apply(line, raw=raw):
                srv = src.server(dp)
                for obs in self.pipe.observers:
                    obs(src, srv, line, raw)

    def config(self, kind: str = "server_args", raw: str = "server_args={", **args) -> None:
        self.event(ev.ServerConfig(kind, dict(args)), T0, tp=None, raw=raw + repr(args))

    def decode(self, ts, running=16, queued=0, kv=0.1, mamba=0.5, dp="0", **kw) -> None:
        self.event(ev.BatchStats("decode", running=running, queued=queued, kv_usage=kv, mamba_usage=mamba, **kw), ts, dp=dp)

    def stats(self, ts, running=16, queued=0, kv=0.4, preemptions=None) -> None:
        self.event(ev.BatchStats("stats", running=running, queued=queued, kv_usage=kv, preemptions=preemptions), ts, tp=None)

    def finding(self, rule: str, dp: str = "0") -> int:
        return self.srv(dp).findings.get(rule, -1)


def sglang_boot(
    f: Feeder, cap: int | None = 16, mrr: int = 16, requested: int | None = 48, slots: int = 80, context: int = 262144, **extra
) -> None:
    args = {"max_running_requests": requested, "mamba_ssm_dtype": None, "mamba_radix_cache_strategy": "extra_buffer"}
    args.update(extra)
    f.config(**args)
    if cap is not None:
        f.event(
            ev.MambaCap(cap, cap * 5, 5),
            T0 + 1,
            raw="max_running_requests is capped to 16 by the mamba state cache (max_mamba_cache_size=80, 5 state slots per request).",
        )
    f.event(ev.MambaCacheAllocated(slots, 0.11 * (1 << 30), 5.7 * (1 << 30)), T0 + 1)
    f.event(ev.KVCacheAllocated(211360, k_bytes=3.22 * (1 << 30), v_bytes=3.22 * (1 << 30), dtype="torch.bfloat16"), T0 + 1)
    f.event(ev.SchedulerSummary({"max_total_num_tokens": 211360, "max_running_requests": mrr, "context_len": context}), T0 + 2)


def run(f: Feeder, start: float, seconds: float, step: float = 5.0, **kw) -> float:
    t = start
    while t < start + seconds:
        f.decode(t, **kw)
        t += step
    return t


MAMBA_FULL = {"running": 12, "queued": 5, "kv": 0.1, "mamba": 0.97}
BALANCED = {"running": 10, "queued": 0, "kv": 0.4, "mamba": 0.45}
KV_FULL = {"running": 20, "queued": 4, "kv": 0.96, "mamba": 0.3}


# --------------------------------------------------------------------------------------------
# pre-population


def test_all_rules_prepopulated_per_server_once_engine_known():
    f = Feeder()
    f.decode(T0, dp="0", **BALANCED)
    f.decode(T0, dp="1", **BALANCED)
    for dp in ("0", "1"):
        assert f.srv(dp).findings == dict.fromkeys(rules.RULE_IDS, 0)


# --------------------------------------------------------------------------------------------
# mamba_bound


def test_mamba_bound_fires_only_after_the_sustain_window():
    f = Feeder()
    sglang_boot(f, cap=None, mrr=48)
    t = T0 + 100
    for i in range(14):
        f.decode(t + 5 * i, **MAMBA_FULL)
        if 5 * i < 60:
            assert f.finding("mamba_bound") == 0, i
    assert f.finding("mamba_bound") == 1
    assert f.finding("kv_bound") == 0
    assert f.finding("request_cap_bound") == 0


def test_mamba_bound_needs_log_time_not_sample_count():
    f = Feeder()
    for i in range(50):  # 50 samples within 25 s of log time
        f.decode(T0 + i * 0.5, **MAMBA_FULL)
    assert f.finding("mamba_bound") == 0
    f.decode(T0 + 61, **MAMBA_FULL)
    assert f.finding("mamba_bound") == 1


def test_mamba_bound_quiet_when_balanced_or_kv_also_full_or_nobody_waits():
    for kw in (BALANCED, {"running": 12, "queued": 5, "kv": 0.85, "mamba": 0.97}, {"running": 12, "queued": 0, "kv": 0.1, "mamba": 0.97}):
        f = Feeder()
        run(f, T0, 600, **kw)
        assert f.finding("mamba_bound") == 0, kw


def test_mamba_bound_when_pinned_at_the_mamba_cap_below_the_usage_threshold():
    f = Feeder()
    sglang_boot(f, cap=16)
    run(f, T0 + 10, 120, running=16, queued=7, kv=0.11, mamba=0.80)
    assert f.finding("mamba_bound") == 1
    assert f.finding("request_cap_bound") == 0  # the cap is the mamba cap


def test_one_noisy_line_neither_fires_nor_clears():
    f = Feeder()
    t = run(f, T0, 300, **BALANCED)
    f.decode(t, **MAMBA_FULL)  # one noisy line
    t = run(f, t + 5, 300, **BALANCED)
    assert f.finding("mamba_bound") == 0
    t = run(f, t, 120, **MAMBA_FULL)
    assert f.finding("mamba_bound") == 1
    f.decode(t, **BALANCED)  # one noisy line
    t = run(f, t + 5, 300, **MAMBA_FULL)
    assert f.finding("mamba_bound") == 1
    # sustained balance clears it, but only after the clear window
    for i in range(30):
        f.decode(t + 5 * i, **BALANCED)
        if 5 * i < 120:
            assert f.finding("mamba_bound") == 1, i
    assert f.finding("mamba_bound") == 0
    eps = f.srv().rule_memory.episodes["mamba_bound"]
    assert len(eps) == 1 and eps[0][1] is not None


def test_gap_in_the_log_restarts_the_window():
    f = Feeder()
    f.decode(T0, **MAMBA_FULL)
    f.decode(T0 + 10, **MAMBA_FULL)
    f.decode(T0 + 1000, **MAMBA_FULL)  # 16 minutes later: not a sustained condition
    f.decode(T0 + 1005, **MAMBA_FULL)
    assert f.finding("mamba_bound") == 0


def test_evidence_is_kept_bounded_with_timestamps():
    f = Feeder()
    run(f, T0, 3000, **MAMBA_FULL)
    evd = f.srv().rule_memory.evidence["mamba_bound"]
    assert 1 <= len(evd.fire) <= 4 and len(evd.recent) <= 3
    assert all(isinstance(ts, float) and "BatchStats" in line for ts, line in evd.fire)
    assert evd.fire[0][0] == T0


# --------------------------------------------------------------------------------------------
# kv_bound


def test_kv_bound_fires_on_full_kv_with_waiting_and_mamba_room():
    f = Feeder()
    run(f, T0, 120, **KV_FULL)
    assert f.finding("kv_bound") == 1
    assert f.finding("mamba_bound") == 0


def test_kv_bound_quiet_when_mamba_also_full_or_nobody_waits():
    for kw in ({"running": 20, "queued": 4, "kv": 0.96, "mamba": 0.95}, {"running": 20, "queued": 0, "kv": 0.96, "mamba": 0.3}, BALANCED):
        f = Feeder()
        run(f, T0, 600, **kw)
        assert f.finding("kv_bound") == 0, kw


def test_kv_bound_from_retractions_with_waiting():
    f = Feeder()
    t = T0
    for i in range(30):
        if i % 6 == 0:
            f.event(ev.Retraction(1, new_tokens_gained=9000, mamba_num_gained=4), t)
        f.decode(t, running=20, queued=3, kv=0.85, mamba=0.3)
        t += 5
    assert f.finding("kv_bound") == 1


def test_test_retractions_are_not_pressure():
    f = Feeder()
    t = T0
    for _ in range(40):
        f.event(ev.Retraction(1, test=True), t)
        f.decode(t, running=20, queued=3, kv=0.85, mamba=0.3)
        t += 5
    assert f.finding("kv_bound") == 0
    assert f.finding("retraction_storm") == 0


def test_vllm_kv_bound_with_preemptions():
    f = Feeder(ev.VLLM)
    f.config(kind="non_default_args", raw="non-default args: ", max_num_seqs=64)
    for i in range(20):
        f.stats(T0 + 10 * i, running=40, queued=6, kv=0.97, preemptions=2 if i % 3 == 0 else None)
    assert f.finding("kv_bound") == 1
    assert f.finding("request_cap_bound") == 0


# --------------------------------------------------------------------------------------------
# request_cap_bound


def test_request_cap_bound_sglang():
    f = Feeder()
    sglang_boot(f, cap=None, mrr=32, requested=32, slots=300)
    run(f, T0 + 10, 120, running=32, queued=4, kv=0.3, mamba=0.4)
    assert f.finding("request_cap_bound") == 1
    assert ("request_cap_bound", "--max-running-requests", "40", "1") in f.srv().recommendations


def test_request_cap_bound_quiet_below_cap_or_without_queue():
    for kw in ({"running": 20, "queued": 4}, {"running": 32, "queued": 0}):
        f = Feeder()
        sglang_boot(f, cap=None, mrr=32, requested=32, slots=300)
        run(f, T0 + 10, 600, kv=0.3, mamba=0.4, **kw)
        assert f.finding("request_cap_bound") == 0, kw


def test_request_cap_bound_vllm_max_num_seqs_from_args():
    f = Feeder(ev.VLLM)
    f.config(kind="non_default_args", raw="non-default args: ", max_num_seqs=16)
    for i in range(12):
        f.stats(T0 + 10 * i, running=16, queued=9, kv=0.4)
    assert f.finding("request_cap_bound") == 1
    assert f.srv().recommendations == [("request_cap_bound", "--max-num-seqs", "32", "1")]
    # quiet on another server with no waiting
    g = Feeder(ev.VLLM)
    g.config(kind="non_default_args", raw="non-default args: ", max_num_seqs=16)
    for i in range(60):
        g.stats(T0 + 10 * i, running=16, queued=0, kv=0.4)
    assert g.finding("request_cap_bound") == 0


# --------------------------------------------------------------------------------------------
# mamba_capped


def test_mamba_capped_from_the_cap_warning_and_cleared_on_restart():
    f = Feeder()
    sglang_boot(f, cap=16)
    assert f.finding("mamba_capped") == 1
    assert "capped to 16" in f.srv().rule_memory.capped_detail
    f.decode(T0 + 100, **BALANCED)
    # a new boot in the same log (server restarted with a bigger pool and no cap)
    f.config(max_running_requests=16)
    assert f.src.restarts == 1
    assert f.finding("mamba_capped") == 0


def test_mamba_capped_by_arithmetic_on_old_releases():
    f = Feeder()
    f.config(raw="server_args=ServerArgs(", max_running_requests=64, mamba_scheduler_strategy="extra_buffer", mamba_ssm_dtype=None)
    f.event(
        ev.WeightsLoaded(weight_bytes=1e9),
        T0,
        raw="Load weight end. elapsed=43.18 s, type=Qwen3NextForCausalLM, avail mem=38.70 GB, mem usage=39.70 GB.",
    )
    f.event(ev.MambaCacheAllocated(96, 0.05 * (1 << 30), 2.27 * (1 << 30)), T0 + 1)
    assert f.finding("mamba_capped") == 0
    f.event(ev.SchedulerSummary({"max_total_num_tokens": 226560, "max_running_requests": 19, "context_len": 262144}), T0 + 2)
    assert f.finding("mamba_capped") == 1
    assert "96 // 5" in f.srv().rule_memory.capped_detail
    assert str(facts.version_range(f.src)) == "0.5.10..0.5.13"


def test_mamba_capped_quiet_when_the_request_was_granted():
    f = Feeder()
    f.config(raw="server_args=ServerArgs(", max_running_requests=16, mamba_scheduler_strategy="extra_buffer")
    f.event(ev.MambaCacheAllocated(96, 1e8, 2e9), T0 + 1)
    f.event(ev.SchedulerSummary({"max_total_num_tokens": 226560, "max_running_requests": 16, "context_len": 262144}), T0 + 2)
    assert f.finding("mamba_capped") == 0


def test_mamba_capped_vllm_blocks_exceeded():
    f = Feeder(ev.VLLM)
    f.event(ev.MambaBlocksExceeded(256, 180), T0, tp=None, raw="ValueError: max_num_seqs (256) exceeds available Mamba cache blocks (180).")
    assert f.finding("mamba_capped") == 1
    assert ("mamba_capped", "--max-num-seqs", "180") in {r[:3] for r in f.srv().recommendations}


# --------------------------------------------------------------------------------------------
# retraction_storm, mamba_exhausted


def test_retraction_storm_fires_on_dense_retractions_and_clears():
    f = Feeder()
    for i in range(3):
        f.event(ev.Retraction(1), T0 + 30 * i)
    assert f.finding("retraction_storm") == 1
    t = T0 + 100
    for i in range(60):
        f.decode(t + 5 * i, **BALANCED)
    assert f.finding("retraction_storm") == 0


def test_two_retractions_are_not_a_storm():
    f = Feeder()
    f.event(ev.Retraction(2), T0)
    f.event(ev.Retraction(1), T0 + 60)
    f.event(ev.Retraction(1), T0 + 200)
    assert f.finding("retraction_storm") == 0


def test_mamba_exhausted_fires_and_holds_for_the_hold_window():
    f = Feeder()
    f.event(
        ev.PoolExhausted("mamba", True),
        T0,
        raw="AssertionError: Not enough space for mamba cache, try to increase --mamba-full-memory-ratio or --max-mamba-cache-size.",
    )
    assert f.finding("mamba_exhausted") == 1
    f.decode(T0 + 300, **BALANCED)
    assert f.finding("mamba_exhausted") == 1
    f.decode(T0 + 601, **BALANCED)
    assert f.finding("mamba_exhausted") == 0
    g = Feeder()
    g.event(ev.PoolExhausted("kv", False), T0)
    assert g.finding("mamba_exhausted") == 0


# --------------------------------------------------------------------------------------------
# configuration


def test_rules_config_yaml(tmp_path):
    p = tmp_path / "rules.yaml"
    p.write_text("mamba_high: 0.99\nfor_seconds: 30\nmin_samples: 2\nengine_version: 0.5.19\n")
    cfg = load_config(str(p))
    assert cfg.mamba_high == 0.99 and cfg.for_seconds == 30 and cfg.min_samples == 2 and cfg.engine_version == "0.5.19"
    f = Feeder(config=cfg)
    run(f, T0, 300, **MAMBA_FULL)  # 0.97 < 0.99 and no mamba cap known: not mamba-bound
    assert f.finding("mamba_bound") == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("mamba_hihg: 0.9\n")
    with pytest.raises(ValueError, match="mamba_hihg"):
        load_config(str(bad))


def test_the_pipeline_has_one_rules_observer_configured_from_args(tmp_path):
    import argparse

    from exporter.app import new_pipeline
    from exporter.cli.common import add_rules_args, rules_config

    p = tmp_path / "r.yaml"
    p.write_text("kv_high: 0.8\n")
    ap = argparse.ArgumentParser()
    add_rules_args(ap)
    pipe = new_pipeline(config=rules_config(ap.parse_args(["--rules-config", str(p)])))
    (r1,) = [o for o in pipe.observers if isinstance(o, Rules)]
    assert r1.config.kv_high == 0.8


# --------------------------------------------------------------------------------------------
# release inference and the slots table


def test_slots_per_request_table():
    t = facts.slots_per_request_table
    assert t((0, 5, 19, 0), "extra_buffer", True, False) == 5
    assert t((0, 5, 19, 0), "extra_buffer", False, False) == 4
    assert t((0, 5, 8, 0), "extra_buffer", True, True) == 4
    assert t((0, 5, 7, 0), "no_buffer", True, False) == 5
    assert t((0, 5, 19, 0), "no_buffer", True, False) == 3
    assert t((0, 5, 13, 0), "extra_buffer_lazy", True, False) == 4
    assert t((0, 5, 19, 0), "disabled", True, False) == 1


def test_version_range_checks():
    vr = VersionRange((0, 5, 10, 0), (0, 5, 13, 0))
    assert vr.at_least("0.5.10") and not vr.at_least("0.5.11")
    assert vr.below("0.5.14") and not vr.below("0.5.13")
    assert not vr.may_be_in("0.5.3.post3", "0.5.6") and vr.may_be_in("0.5.12", "0.5.20")
    assert VersionRange().may_be_in("0.5.3.post3", "0.5.6")


# --------------------------------------------------------------------------------------------
# recommendation filters


def _mamba_bound(**extra) -> Feeder:
    f = Feeder()
    sglang_boot(f, cap=16, **extra)
    run(f, T0 + 10, 120, running=16, queued=7, kv=0.11, mamba=0.95)
    assert f.finding("mamba_bound") == 1
    return f


def _flags(f: Feeder, rule: str = "mamba_bound") -> dict[str, str]:
    return {r.flag: r.value for r in f.srv().rule_memory.recommendations if r.rule == rule}


def test_mamba_bound_recommendations_on_a_current_release():
    f = _mamba_bound()
    flags = _flags(f)
    assert flags["--mamba-ssm-dtype"] == "bfloat16"
    assert float(flags["--mamba-full-memory-ratio"]) > 0.9
    assert int(flags["--max-mamba-cache-size"]) > 80
    assert flags["SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK"] == "1"
    assert flags["--mamba-radix-cache-strategy"] == "extra_buffer_lazy"
    assert flags["--enable-unified-memory"] == "true"
    assert f.srv().recommended_ratio is not None and f.srv().recommended_ratio > 0.9
    effects = {r.flag: r.effect for r in f.srv().rule_memory.recommendations if r.rule == "mamba_bound"}
    assert "cap 16 → " in effects["--mamba-ssm-dtype"]


def test_recommendation_filters_from_the_log():
    flags = _flags(_mamba_bound(mamba_ssm_dtype="bfloat16"))
    assert "--mamba-ssm-dtype" not in flags
    flags = _flags(_mamba_bound(disaggregation_mode="decode", disaggregation_transfer_backend="nixl"))
    assert "--enable-unified-memory" not in flags and "--mamba-radix-cache-strategy" not in flags
    flags = _flags(_mamba_bound(speculative_algorithm="NGRAM"))
    assert "--enable-unified-memory" not in flags
    flags = _flags(_mamba_bound(enable_unified_memory=True))
    assert "--mamba-full-memory-ratio" not in flags and "--enable-unified-memory" not in flags
    flags = _flags(_mamba_bound(mamba_radix_cache_strategy="no_buffer"))
    assert "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK" not in flags and "--mamba-radix-cache-strategy" not in flags


def _unified(version: str, **extra) -> tuple[str | None, tuple[str, ...]]:
    """The --enable-unified-memory recommendation on a mamba-bound server of SGLang ``version``: (value, caveats)."""
    f = Feeder(config=RulesConfig(engine_version=version))
    sglang_boot(f, cap=16, **extra)
    run(f, T0 + 10, 120, running=16, queued=7, kv=0.11, mamba=0.95)
    for r in f.srv().rule_memory.recommendations:
        if r.flag == "--enable-unified-memory" and r.rule == "mamba_bound":
            return r.value, r.caveats
    return None, ()


def test_unified_memory_gates_follow_the_release():
    """The gates of SGLang 0.5.15-0.5.23 as their released code has them (docs/rules.md#unified-memory)."""
    # Triton attention on 0.5.15-0.5.18 for a model without MLA: a need (never in the metric), gone from 0.5.19
    for v in ("0.5.15", "0.5.17", "0.5.18"):
        value, caveats = _unified(v, model_path="Qwen/Qwen3.5-27B", attention_backend="fa3")
        assert value == "true" and any("--attention-backend triton" in c for c in caveats), v
    assert _unified("0.5.17", model_path="Qwen/Qwen3.5-27B", attention_backend="triton") == ("true", ())
    assert _unified("0.5.19", model_path="Qwen/Qwen3.5-27B", attention_backend="fa3") == ("true", ())
    # speculative decoding: refused to 0.5.17, DSPARK only to 0.5.21, EAGLE from 0.5.22
    assert _unified("0.5.17", speculative_algorithm="DSPARK")[0] is None
    assert _unified("0.5.20", speculative_algorithm="DSPARK")[0] == "true"
    assert _unified("0.5.21", speculative_algorithm="EAGLE")[0] is None
    assert _unified("0.5.23", speculative_algorithm="EAGLE")[0] == "true"
    # PD: refused to 0.5.17, from 0.5.18 over mooncake (the default transfer backend)
    assert _unified("0.5.17", disaggregation_mode="decode")[0] is None
    assert _unified("0.5.18", disaggregation_mode="decode", attention_backend="triton")[0] == "true"
    # HiCache refused to 0.5.20; LMCache always; two-batch overlap from 0.5.20
    assert _unified("0.5.20", enable_hierarchical_cache=True)[0] is None
    assert _unified("0.5.21", enable_hierarchical_cache=True)[0] == "true"
    assert _unified("0.5.23", enable_lmcache=True)[0] is None
    assert _unified("0.5.19", enable_two_batch_overlap=True)[0] == "true"
    assert _unified("0.5.23", enable_two_batch_overlap=True)[0] is None
    # DCP: refused to 0.5.19, then MLA models only
    assert _unified("0.5.23", dcp_size=2, model_path="Qwen/Qwen3.5-27B")[0] is None
    assert _unified("0.5.23", dcp_size=2, model_path="moonshotai/Kimi-Linear-48B-A3B-Instruct")[0] == "true"
    assert _unified("0.5.19", dcp_size=2, model_path="moonshotai/Kimi-Linear-48B-A3B-Instruct")[0] is None
    # the attention backends the unified pool admits from 0.5.19: another GPU backend is a need, never in the metric
    value, caveats = _unified("0.5.23", model_path="Qwen/Qwen3.5-27B", attention_backend="flex_attention")
    assert value == "true" and any("--attention-backend triton" in c and "flex_attention" in c for c in caveats)
    value, caveats = _unified("0.5.23", model_path="Qwen/Qwen3.5-27B", decode_attention_backend="aiter")
    assert value == "true" and any("aiter" in c for c in caveats)
    assert _unified("0.5.23", model_path="moonshotai/Kimi-Linear-48B-A3B-Instruct", attention_backend="flashmla") == ("true", ())


def test_unified_memory_is_never_advised_on_the_cpu():
    """SGLang's unified pool takes GPU attention backends only (Triton in 0.5.15-0.5.18, the allow-lists of
    ``handle_page_major_kv_layout`` from 0.5.19). The real SGLang 0.5.23 on this machine's CPU, asked for it, stops:
    "the resolved attention backends ['torch_native'] are not in the allowed set". So on a CPU log, in any release,
    the flag is withheld: by ``device`` or by a backend only the CPU has."""
    for v in ("0.5.15", "0.5.18", "0.5.19", "0.5.23"):
        assert _unified(v, device="cpu", attention_backend="torch_native")[0] is None, v
        assert _unified(v, device="cpu")[0] is None, v
    assert _unified("0.5.23", attention_backend="intel_amx")[0] is None
    # torch_native on a GPU: the flag with its need (another backend), as for any backend outside the allow-list
    value, caveats = _unified("0.5.23", attention_backend="torch_native")
    assert value == "true" and any("torch_native" in c for c in caveats)


def test_old_release_gets_no_new_flags():
    f = Feeder()
    f.config(raw="server_args=ServerArgs(", max_running_requests=64, mamba_scheduler_strategy="extra_buffer", mamba_ssm_dtype=None)
    f.event(ev.WeightsLoaded(weight_bytes=1e9), T0, raw="Load weight end. elapsed=43.18 s, type=X, avail mem=38.70 GB, mem usage=39.70 GB.")
    f.event(ev.MambaCacheAllocated(96, 0.05 * (1 << 30), 2.27 * (1 << 30)), T0 + 1)
    f.event(ev.KVCacheAllocated(226560, k_bytes=1.3 * (1 << 30), v_bytes=1.3 * (1 << 30)), T0 + 1)
    f.event(ev.SchedulerSummary({"max_total_num_tokens": 226560, "max_running_requests": 19, "context_len": 262144}), T0 + 2)
    flags = _flags(f, "mamba_capped")
    assert "--mamba-ssm-dtype" in flags and "--max-mamba-cache-size" in flags
    for new in (
        "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK",
        "--enable-unified-memory",
        "--mamba-radix-cache-strategy",
        "--mamba-scheduler-strategy",
    ):
        assert new not in flags


def test_max_mamba_cache_size_not_recommended_where_it_is_ignored():
    f = Feeder(config=RulesConfig(engine_version="0.5.5"))
    f.config(raw="server_args=ServerArgs(", max_running_requests=64)
    f.event(ev.MambaCacheAllocated(90, 1e8, 2e9), T0 + 1)
    f.event(ev.KVCacheAllocated(226560, k_bytes=1e9, v_bytes=1e9), T0 + 1)
    f.event(ev.SchedulerSummary({"max_total_num_tokens": 226560, "max_running_requests": 30, "context_len": 262144}), T0 + 2)
    assert f.finding("mamba_capped") == 1  # 90 // 3 (no_buffer) = 30 < 64
    flags = _flags(f, "mamba_capped")
    assert "--max-mamba-cache-size" not in flags and "--mamba-full-memory-ratio" in flags


def test_vllm_recommendation_filters():
    def kv_bound(version: str, **args) -> dict[str, str]:
        f = Feeder(ev.VLLM)
        f.event(ev.ServerStarting(version=version), T0, tp=None, raw=f"version {version}")
        f.config(kind="non_default_args", raw="non-default args: ", max_num_seqs=64, **args)
        f.event(
            ev.HybridLayout(block_size=1568),
            T0,
            tp=None,
            raw="Mamba cache mode is set to 'align' for Qwen3_5ForConditionalGeneration by default",
        )
        for i in range(20):
            f.stats(T0 + 10 * i, running=40, queued=6, kv=0.97)
        assert f.finding("kv_bound") == 1
        return _flags(f, "kv_bound")

    flags = kv_bound("0.24.0", model="Qwen/Qwen3.5-27B")
    assert flags["--kv-cache-dtype"] == "fp8"
    assert flags["--mamba-ssm-cache-dtype"] == "bfloat16"
    assert flags["--language-model-only"] == "true"
    flags = kv_bound("0.16.0", model="Qwen/Qwen3.5-27B", kv_cache_dtype="fp8")
    assert "--kv-cache-dtype" not in flags
    assert flags["--mamba-ssm-cache-dtype"] == "float16"
    assert "--language-model-only" not in flags  # needs >= 0.17
    flags = kv_bound("0.24.0", model="Qwen/Qwen3.5-27B", mamba_ssm_cache_dtype="bfloat16", language_model_only=True)
    assert "--mamba-ssm-cache-dtype" not in flags and "--language-model-only" not in flags


def test_recommendations_cleared_with_the_finding():
    f = Feeder()
    t = run(f, T0, 120, **MAMBA_FULL)
    assert f.srv().recommendations
    run(f, t, 300, **BALANCED)
    assert f.finding("mamba_bound") == 0
    assert f.srv().recommendations == []
    assert f.srv().recommended_ratio is None
    assert recommend.update(f.src, f.srv()) == []


# --------------------------------------------------------------------------------------------
# one way through: facts once, one value per flag, the catalogue, KV below the context said


def test_one_value_per_flag_per_server():
    """mamba_bound and mamba_capped both live: --max-mamba-cache-size once, the same value under both."""
    f = _mamba_bound()
    assert f.finding("mamba_capped") == 1
    values: dict[str, set[str]] = {}
    for r in f.srv().rule_memory.recommendations:  # the caveated ones too (not exported)
        values.setdefault(r.flag, set()).add(r.value)
    assert values["--max-mamba-cache-size"] and all(len(v) == 1 for v in values.values()), values
    capped, bound = _flags(f, "mamba_capped"), _flags(f, "mamba_bound")
    assert capped["--max-mamba-cache-size"] == bound["--max-mamba-cache-size"]


def test_ratio_never_silently_below_the_context():
    """The pool holds 211,360 tokens < the 262,144 context: every pool-moving effect says so; where the pool
    does hold one request of the context, the ratio is limited so that it still does."""
    f = _mamba_bound()
    for r in f.srv().rule_memory.recommendations:
        if r.flag in ("--mamba-full-memory-ratio", "--max-mamba-cache-size"):
            assert "< context length 262,144" in r.effect, r.effect
    g = Feeder()
    sglang_boot(g, context=100000)  # (a second summary line would be the next boot: its pools unknown)
    run(g, T0 + 10, 120, running=16, queued=7, kv=0.11, mamba=0.95)
    recs = {r.flag: r for r in g.srv().rule_memory.recommendations if r.rule == "mamba_bound"}
    ratio = recs["--mamba-full-memory-ratio"]
    assert "keeps one 100,000-token request" in ratio.why
    assert "no longer fits" not in ratio.effect
    after = flags.effect_from_log(recommend.observed(g.src, g.srv()), ratio.flag, ratio.value)
    assert 100000 <= after.kv_tokens_after < 211360 and after.mamba_slots_after > 80


def test_facts_are_derived_once_per_generation():
    f = _mamba_bound()
    srv = f.srv()
    facts = srv.facts
    run(f, T0 + 200, 60, running=16, queued=7, kv=0.11, mamba=0.95)
    assert srv.facts is facts  # batch samples reuse them
    f.event(ev.SchedulerSummary({"max_total_num_tokens": 211360, "max_running_requests": 16, "context_len": 131072}), T0 + 300)
    run(f, T0 + 301, 10, running=16, queued=7, kv=0.11, mamba=0.95)
    assert srv.facts is not facts and srv.facts.context_len == 131072


def test_the_catalogue_is_the_only_dispatch():
    """Every flag a finding may suggest and every flag `plan` shows has one catalogue entry; the old string
    dispatchers are gone from the capacity model and the recommendations."""
    import inspect

    from exporter import capacity
    from exporter.catalogues import rulebook

    for r in rulebook.RULES:
        for names in r.actions.values():
            for n in names:
                assert n == rulebook.POOL_SIDE or capacity.norm_flag(n) in flags.BY_NAME, n
    assert len({e.flag for e in flags.CATALOGUE}) == len(flags.CATALOGUE)
    for gone in ("project_effect", "flag_effect", "all_flag_effects"):
        assert not hasattr(capacity, gone)
    src = inspect.getsource(recommend)
    assert '"--' not in src and "SGLANG_OPT" not in src  # no flag named outside the catalogue


def test_bf16_ssm_with_replayssm_spec_carries_the_engines_warning():
    """SGLang 0.5.20+ (arg_groups/attention_hook.py) sets float32 SSM state for --enable-linear-replayssm-spec and
    warns on bfloat16: the recommendation says so and is never exported (issue 21.7)."""
    f = Feeder(config=RulesConfig(engine_version="0.5.23"))
    sglang_boot(f, cap=16, enable_linear_replayssm_spec=True)
    run(f, T0 + 10, 120, running=16, queued=7, kv=0.11, mamba=0.95)
    (bf16,) = [r for r in f.srv().rule_memory.recommendations if r.flag == "--mamba-ssm-dtype" and r.rule == "mamba_bound"]
    assert bf16.rank == 0 and any("wants float32 SSM state and warns on bfloat16" in c for c in bf16.caveats)
    assert "--mamba-ssm-dtype" not in {flag for _, flag, _, _ in f.srv().recommendations}
    # before 0.5.20 the engine has no such rule: no caveat
    g = Feeder(config=RulesConfig(engine_version="0.5.19"))
    sglang_boot(g, cap=16, enable_linear_replayssm_spec=True)
    run(g, T0 + 10, 120, running=16, queued=7, kv=0.11, mamba=0.95)
    assert "--mamba-ssm-dtype" in {flag for _, flag, _, _ in g.srv().recommendations}
