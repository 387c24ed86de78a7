"""SGLang, the Mamba2 family (issues 32 and 36): a tiny Nemotron-H (Mamba2, MLP, Mamba2, attention) on SGLang's Mamba2
path, whose Triton-only kernels are the reference kernels of tests/engine/sglang_cpu: the chunked scan of a prefill
(``mamba_chunk_scan_combined``), the one-token update of a decode (``selective_state_update``) and the causal
convolution the Mamba2 mixer leaves unbound on a CPU. It serves a load until requests are answered and decode lines
with requests running were read at consistent moments, then stops, and boots again in the same file with the SSM dtype
the exporter recommends for the mamba cap.

Nemotron-H has a real SSM state (4 heads x 64 x 64 per Mamba2 layer, float32 by default: 0.37 GB for the pool here,
against 0.01 GB of convolution state), so ``--mamba-ssm-dtype bfloat16`` is legitimate advice here, unlike LFM2's
(test_sglang_mamba.py). The exporter's capacity facts equal the log and SGLang's /metrics at both boots, its gauges
equal the decode lines and SGLang's gauges, ``plan --engine sglang`` reproduces both boots' pools from the config, and
the second boot logs what the exporter predicted for the advice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import checks as c
import harness as h
import pytest
import sglang_checks as sc
import sglang_harness as sh

SOURCE = "sglang-nemotron-h"
# a pool big enough for the log's 0.01 GB to say something about both states (ssm 0.37 GB, conv 0.01 GB); the cap it
# sets (1000) is below SGLang's default, so SGLang prints the cap line and the exporter finds mamba_capped
SLOTS, KV_TOKENS = 3000, 8192
# as for Qwen3-Next: the default radix strategy resolves to extra_buffer, which SGLang refuses on the CPU; no_buffer
# needs the overlap schedule off
ARGS = (
    "--max-mamba-cache-size",
    str(SLOTS),
    "--max-total-tokens",
    str(KV_TOKENS),
    "--mamba-radix-cache-strategy",
    "no_buffer",
    "--disable-overlap-schedule",
)
CLIENTS = 4
MOMENTS = 3  # consistent moments at decode lines with requests running
DECODE_LOG_INTERVAL = 16  # a decode line every 16 steps: a few a second here, so that reads fall between two


def decode_busy(m: h.Moment) -> bool:
    """The moment's newest batch line is a decode line with requests running."""
    return "mamba_num" in m.marker.match.re.groupindex and sc.busy(m)


@dataclass
class Run:
    log: Path
    model: Path
    text1: str  # the log after boot 1 stopped
    boot1: str
    boot1_sglang: str
    recorder: h.Recorder
    load: h.Load
    stopped1: str
    flag: str
    value: str
    boot2: str
    boot2_sglang: str
    end: str
    text: str
    report: dict
    boot_seconds: tuple[float, float]
    advice_boots: dict  # sglang_harness.advice_boots: (a boot's flags, (flag, value)) -> (why not or None, its log)


@pytest.fixture(scope="module")
def run(workdir) -> Run:
    model = sh.build_model("nemotron_h_sglang", workdir / "models" / "tiny-nemotron-h-sglang")
    log = workdir / f"{SOURCE}.log"
    log.touch()
    side = h.Sidecar(log, SOURCE, workdir, rules_yaml=sc.RULES_YAML)
    eng = sh.Engine(model, log, ARGS, served_name="tiny-nemotron-h", decode_log_interval=DECODE_LOG_INTERVAL)
    eng2 = None
    try:
        eng.start()
        e1 = c.wait_exporter(side, lambda e: c.exp(e, "mamba_capacity_slots", SOURCE) is not None, 30, "boot 1's capacity lines")
        sg1 = eng.metrics()
        with h.Load(eng.base, eng.served_name, CLIENTS, max_tokens=48, bound=900) as load:
            h.drive_until(
                lambda: load.done > 0 and any("mamba_num" in m.re.groupindex for m in sh.batch_lines(eng.this_boot())),
                600,
                lambda: f"{load}; {len(sh.batch_lines(eng.this_boot()))} batch lines",
                "a request answered through the Mamba2 path, and a decode line",
                every=1.0,
            )
            rec = sc.recorder(eng, side)
            rec.record(MOMENTS, 300, decode_busy, f"{MOMENTS} consistent moments at decode lines with requests running", every=0.3)
        eng.stop()
        stopped1 = c.wait_exporter(side, lambda e: c.state_of(e, SOURCE) == "stopped", 60, "boot 1 stopped")
        text1 = h.read(log)
        reco = [lab for lab, _ in h.samples(stopped1, "hybrid_cache_recommendation_info", source=SOURCE, rule="mamba_capped")]
        ssm = [lab for lab in reco if lab["flag"] == "--mamba-ssm-dtype"]
        assert ssm, f"no --mamba-ssm-dtype among mamba_capped's recommendations for a 0.37 GB SSM state: {reco}"
        flag, value = ssm[0]["flag"], ssm[0]["value"]
        # boot 2: the advice applied, appending to the same file
        eng2 = sh.Engine(model, log, (*ARGS, flag, value), served_name="tiny-nemotron-h", decode_log_interval=DECODE_LOG_INTERVAL)
        eng2.start()
        logged2 = sc.last_boot(eng2.this_boot())
        e2 = c.wait_exporter(
            side,
            lambda e: (
                c.exp(e, "server_restarts_total", SOURCE) == 1 and c.exp(e, "mamba_state_bytes", SOURCE, state="ssm") == logged2.ssm_bytes
            ),
            60,
            "boot 2's capacity lines",
        )
        sg2 = eng2.metrics()
        eng2.stop()
        end = c.wait_exporter(side, lambda e: c.state_of(e, SOURCE) == "stopped", 60, "boot 2 stopped")
        text = h.read(log)
        report = next(s for s in json.loads(c.reports([log], side.rules)["json"])["sources"] if s["source"] == SOURCE)
        # every other recommendation of either boot, each applied to that boot's flags on a boot of its own (a log of
        # its own): the engine takes it
        advice_boots = sh.advice_boots(
            model,
            workdir,
            SOURCE,
            [(ARGS, stopped1), (sh.with_flag(ARGS, flag, value), end)],
            skip=((flag, value),),
            served_name="tiny-nemotron-h",
            decode_log_interval=DECODE_LOG_INTERVAL,
        )
        sh.save_fixture(log, SOURCE, workdir)
        (workdir / f"{SOURCE}.boot-seconds").write_text(f"{eng.boot_seconds:.1f} {eng2.boot_seconds:.1f}\n")
        return Run(
            log,
            model,
            text1,
            e1,
            sg1,
            rec,
            load,
            stopped1,
            flag,
            value,
            e2,
            sg2,
            end,
            text,
            report,
            (eng.boot_seconds, eng2.boot_seconds),
            advice_boots,
        )
    finally:
        eng.stop()
        if eng2 is not None:
            eng2.stop()
        side.stop()


def test_capacity_equals_the_log_and_sglang(run):
    """Boot 1: slots, both states' bytes, the KV pool, the cap line (1000 = 3000 // 3), context and memory equal the
    log, and SGLang's own constants."""
    b = sc.assert_capacity(run.boot1, SOURCE, run.text1, run.boot1_sglang)
    assert b.slots == SLOTS and b.kv_tokens == KV_TOKENS
    assert b.cap is not None and b.cap == SLOTS // b.slots_per_request == b.max_running, "the cap line"
    assert b.ssm_bytes > 0.1 * sc.GIB and b.conv_bytes < b.ssm_bytes, "a real SSM state, larger than the conv state"
    assert "mamba_capped" in c.findings_on(run.boot1, SOURCE)


def test_the_mamba2_path_serves(run):
    """Requests answered through the reference Mamba2 kernels (prefill: chunked scan; decode: state update); the
    exporter counted every prefill and decode line of both boots, and read no line as format drift."""
    assert run.load.done > 0 and run.load.failed == 0, str(run.load)
    lines = sh.batch_lines(run.text)
    decode = sum(1 for m in lines if "mamba_num" in m.re.groupindex)
    assert decode > 0 and len(lines) > decode
    assert c.exp(run.end, "decode_batches_total", SOURCE) == decode
    assert c.exp(run.end, "prefill_batches_total", SOURCE) == len(lines) - decode
    assert c.exp(run.end, "server_restarts_total", SOURCE) == 1
    assert c.state_of(run.end, SOURCE) == "stopped" and c.exp(run.end, "server_deaths_total", SOURCE) == 0
    c.assert_clean_lines(run.end, SOURCE)


def test_gauges_equal_the_decode_line_and_sglang(run):
    assert len(run.recorder.distinct(decode_busy)) >= MOMENTS, run.recorder.summary(decode_busy)
    for m in run.recorder.distinct(decode_busy):
        sc.assert_gauges_equal_line(m, SOURCE)
        sc.assert_gauges_equal_sglang(m, SOURCE)


def test_plan_reproduces_both_boots(run):
    """``plan --engine sglang`` from the config: slots, 3 per request, the cap, conv and SSM bytes to the log's 0.01 GB
    and the KV bytes per token exactly; at boot 2 with the SSM dtype it was given, half the SSM bytes per slot."""
    p1 = sc.assert_plan(run.model / "config.json", run.text1, run.boot1_sglang)
    assert p1["state"]["ssm_dtype"] == "float32" and p1["state"]["ssm_bytes_per_request_per_gpu"] > 0
    p2 = sc.assert_plan(run.model / "config.json", run.text, run.boot2_sglang, extra=(run.flag, run.value))
    assert p2["state"]["ssm_dtype"] == run.value
    assert 2 * p2["state"]["ssm_bytes_per_request_per_gpu"] == p1["state"]["ssm_bytes_per_request_per_gpu"]
    assert p2["state"]["conv_bytes_per_request_per_gpu"] == p1["state"]["conv_bytes_per_request_per_gpu"]


def test_ssm_dtype_advice_respects_the_state(run):
    """Issue 32's advice defect, the other side: withheld for LFM2's empty SSM state, the SSM dtype is recommended for
    Nemotron-H's real one; boot 2 with it logs the SSM state halved (to the log's 0.01 GB), the same conv state and KV
    pool, and its capacity facts equal the log and SGLang's /metrics."""
    assert (run.flag, run.value) == ("--mamba-ssm-dtype", "bfloat16")
    b1, b2 = sc.last_boot(run.text1), sc.last_boot(run.text)
    assert abs(b2.ssm_bytes - b1.ssm_bytes / 2) <= 0.01 * sc.GIB, (b1.ssm_bytes / sc.GIB, b2.ssm_bytes / sc.GIB)
    assert b2.conv_bytes == b1.conv_bytes and b2.kv_tokens == b1.kv_tokens
    sc.assert_capacity(run.boot2, SOURCE, run.text, run.boot2_sglang)
    assert sc.server_arg(run.text, "mamba_ssm_dtype") == run.value


def test_second_boot_has_what_the_exporter_predicted(run):
    """The before/after of ``report``: the setting that changed is the SSM dtype, and the mamba slots and request cap
    boot 2 logs are the ones the exporter predicted for its advice (verdict ``agrees``)."""
    ba = run.report["servers"][0]["before_after"]
    assert ba is not None and ba["boots"] == 2, ba
    assert [ch["setting"] for ch in ba["changed"]] == ["mamba_ssm_dtype"], ba["changed"]
    pools = {r["what"]: r for r in ba["pools"]}
    b2 = sc.last_boot(run.text)
    for what, logged in (("mamba slots", b2.slots), ("request cap", b2.max_running)):
        row = pools[what]
        assert row["after"] == logged and row.get("predicted") == logged and row.get("verdict") == "agrees", row


def test_every_recommendation_boots(run):
    """What the exporter advised at either boot, each applied to that boot's flags on a boot of its own: the real
    SGLang starts with it (boot 2 is the SSM dtype's). The CPU refused --enable-unified-memory this way, which the
    advice no longer offers on a CPU (docs/rules.md#unified-memory). The KV pool sits at --max-total-tokens, so
    whether a larger mamba pool fits is not in the log: that advice is held, not exported (this CPU took one 0.40 GiB
    larger here, and refused one 1.85 GiB larger for Qwen3-Next)."""
    sc.assert_advice_boots(run.advice_boots, KV_TOKENS)
