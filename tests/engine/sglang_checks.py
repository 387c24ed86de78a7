"""Checks the SGLang scenarios share: the exporter against SGLang's log and against SGLang's own /metrics
(``--enable-metrics``). No tests here; every comparison is structural or a bound stated in docs/engine-suite.md."""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import checks as c
import harness as h
import sglang_harness as sh

# the suite's rules for SGLang, kept in a data file that tests/rules/test_silence.py reads too: a sample is the last
# batch line of a 10-s bucket of log time, so 3 samples are at least 20 s of log time (docs/engine-suite.md, "SGLang")
SAMPLE_SECONDS = 10  # the sampler's bucket of log time (exporter/state/sampler.py)
FOR_SECONDS = 2 * SAMPLE_SECONDS
RULES_YAML = (Path(__file__).resolve().parent / "sglang-rules.yaml").read_text()
assert f"for_seconds: {FOR_SECONDS}\n" in RULES_YAML, "tests/engine/sglang-rules.yaml: windows scaled to the sampler"

CAP_RE = re.compile(
    r"max_running_requests is capped to (?P<cap>\d+) by the mamba state cache \(max_mamba_cache_size=(?P<slots>\d+), "
    r"(?P<spr>\d+) state slots per request\)"
)
MAMBA_RE = re.compile(
    r"Mamba Cache is allocated\. max_mamba_cache_size: (?P<slots>\d+), conv_state size: (?P<conv>[\d.]+)GB, ssm_state size: (?P<ssm>[\d.]+)GB"
)
KV_RE = re.compile(
    r"KV Cache is allocated\. dtype: torch\.(?P<dtype>\w+), #tokens: (?P<tokens>\d+), K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB"
)
SUMMARY_RE = re.compile(
    r"max_total_num_tokens=(?P<tokens>\d+), chunked_prefill_size=(?P<chunk>\d+), max_prefill_tokens=\d+, "
    r"max_running_requests=(?P<running>\d+), context_len=(?P<ctx>\d+), available_cpu_mem=(?P<avail>[\d.]+) GB"
)
GIB = 2**30


@dataclass
class Boot:
    """What one SGLang boot's startup lines said (the last boot in the text)."""

    slots: int
    conv_bytes: float
    ssm_bytes: float
    kv_tokens: int
    kv_dtype: str
    kv_bytes: float
    max_running: int
    context_len: int
    chunked_prefill: int
    available_bytes: float
    cap: int | None  # the cap warning's, when the mamba pool lowered the request cap
    slots_per_request: int | None


def last_boot(text: str) -> Boot:
    i = text.rfind("server_args=")
    part = text[i:] if i >= 0 else text
    m, k, s = MAMBA_RE.search(part), KV_RE.search(part), SUMMARY_RE.search(part)
    assert m and k and s, "the boot's Mamba Cache, KV Cache and max_total_num_tokens lines"
    cap = CAP_RE.search(part)
    return Boot(
        slots=int(m["slots"]),
        conv_bytes=float(m["conv"]) * GIB,
        ssm_bytes=float(m["ssm"]) * GIB,
        kv_tokens=int(k["tokens"]),
        kv_dtype=k["dtype"],
        kv_bytes=(float(k["k"]) + float(k["v"])) * GIB,
        max_running=int(s["running"]),
        context_len=int(s["ctx"]),
        chunked_prefill=int(s["chunk"]),
        available_bytes=float(s["avail"]) * GIB,
        cap=int(cap["cap"]) if cap else None,
        slots_per_request=int(cap["spr"]) if cap else None,
    )


def assert_capacity(e: str, source: str, log: str, sg: str) -> Boot:
    """Every startup fact the exporter exports equals its log line, and SGLang's own constants where it has them."""
    b = last_boot(log)
    x = c.exp
    assert x(e, "mamba_capacity_slots", source) == b.slots
    assert x(e, "mamba_state_bytes", source, state="conv") == b.conv_bytes
    assert x(e, "mamba_state_bytes", source, state="ssm") == b.ssm_bytes
    assert x(e, "kv_capacity_tokens", source) == b.kv_tokens
    assert x(e, "kv_capacity_bytes", source) == b.kv_bytes
    assert x(e, "max_running_requests", source) == b.max_running
    assert x(e, "context_length_tokens", source) == b.context_len
    assert x(e, "chunked_prefill_size_tokens", source) == b.chunked_prefill
    assert x(e, "available_memory_bytes", source) == b.available_bytes
    if b.cap is not None:
        assert b.cap == b.max_running
        assert x(e, "mamba_slots_per_request", source) == b.slots_per_request
        assert b.slots // b.slots_per_request == b.cap
    # SGLang's own constants (/metrics): the KV pool and the context; the mamba pool's size is the sum of its
    # available, evictable and used slots (SGLang exports no gauge of it)
    assert h.value(sg, "sglang:max_total_num_tokens") == b.kv_tokens
    assert h.value(sg, "sglang:context_len") == b.context_len
    mamba = [h.value(sg, f"sglang:mamba_{k}_tokens") for k in ("available", "evictable", "used")]
    assert sum(mamba) == b.slots, mamba
    info = h.labels_of(e, "hybrid_cache_server_info", source=source)
    assert info["engine"] == "sglang" and info["kv_cache_dtype"] == "auto"
    return b


def server_arg(log: str, key: str) -> str:
    """A value of the (last) ``server_args={...}`` dump, as printed (strings unquoted)."""
    i = log.rfind("server_args=")
    m = re.search(rf"'{key}': ([^,}}]+)", log[i:])
    assert m, key
    return m.group(1).strip("'")


def assert_plan(config: Path, log: str, sg: str, extra: tuple[str, ...] = ()) -> dict:
    """``plan --engine sglang`` for the boot's configuration reproduces its pools: the slots (explicit), the slots per
    request and the cap, each state's bytes to the 0.01 GB the log prints (the pool holds the slots and one padding
    slot), and the KV bytes per token exactly (x the tokens and one page, page size 1 = SGLang's own
    ``kv_cache_memory_usage_gb``). ``extra``: more of ``plan``'s flags (the boot's other settings)."""
    b = last_boot(log)
    args = ["--max-mamba-cache-size", str(b.slots), "--radix-strategy", server_arg(log, "mamba_radix_cache_strategy")]
    args += ["--kv-budget", "1", "--context-len", str(b.context_len)]
    args += ["--disable-overlap-schedule"] if server_arg(log, "disable_overlap_schedule") == "True" else []
    args += list(extra)
    r = subprocess.run(
        [str(h.EXE), "plan", "--config", str(config), "--engine", "sglang", "--sglang-version", sh.VERSION, "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["sglang"]["mamba_slots"] == b.slots
    if b.cap is not None:  # the cap warning: the mamba pool set the request cap
        assert p["slots_per_request"] == b.slots_per_request and p["sglang"]["mamba_cap"] == b.cap == b.max_running
    else:  # no warning: the mamba pool allows at least the cap SGLang chose
        assert p["sglang"]["mamba_cap"] >= b.max_running
    for what, logged in (("conv", b.conv_bytes), ("ssm", b.ssm_bytes)):
        planned = p["state"][f"{what}_bytes_per_request_per_gpu"] * (b.slots + 1)
        assert abs(planned - logged) <= 0.005 * GIB, (what, planned / GIB, logged / GIB)
    assert p["kv_bytes_per_token_per_gpu"] * (b.kv_tokens + 1) == round(h.value(sg, "sglang:kv_cache_memory_usage_gb") * GIB)
    return p


# --------------------------------------------------------------------------------------------
# consistent moments: the log's newest batch line, SGLang's /metrics and the exporter


def recorder(engine: sh.Engine, sidecar: h.Sidecar) -> h.Recorder:
    """SGLang's recorder (:class:`harness.Recorder`): the marker is this boot's newest batch line (SGLang sets its
    gauges at each batch line), the reads SGLang's /metrics and the sidecar's."""
    return h.Recorder(
        lambda: h.marker(sh.batch_lines(engine.this_boot())),
        {"sglang": engine.metrics, "exporter": sidecar.caught_up},
        unset_by_line=idle_published,
    )


def idle_published(marker: h.Marker, reads: dict) -> str | None:
    """Whether SGLang published its gauges after the batch line without logging one: when its scheduler finds no batch
    (``Scheduler.on_idle`` -> ``MetricsReporter._maybe_log_idle_metrics``, metrics_reporter.py) it sets the running
    count to its running batch's (0 when idle) and the generation throughput to 0, and logs nothing. The log's newest
    line then still says requests were running; the moment stands for no line, and is not kept. The signature: the
    throughput gauge 0 while the line's running count differs from SGLang's, or a decode line's throughput was not 0."""
    ln, sg = marker.match, reads["sglang"]
    if h.value(sg, "sglang:gen_throughput") != 0:
        return None
    decode_gen = float(ln["gen"]) if "gen" in ln.re.groupindex else 0.0
    if decode_gen > 0 or h.value(sg, "sglang:num_running_reqs") != int(ln["running"]):
        return f"SGLang's idle publish: running {h.value(sg, 'sglang:num_running_reqs'):g}, line {ln['running']}"
    return None


def busy(m: h.Moment) -> bool:
    """The moment's batch line shows requests running."""
    return int(m.marker.match["running"]) > 0


def assert_gauges_equal_line(m: h.Moment, source: str) -> None:
    """Each gauge equals the newest batch line, exactly (a prefill line has no ``mamba num``: that gauge keeps the
    last decode line's)."""
    e, ln = m.reads["exporter"], m.marker.match
    assert c.exp(e, "running_requests", source) == int(ln["running"])
    assert c.exp(e, "queued_requests", source) == int(ln["queued"])
    assert c.exp(e, "kv_usage_ratio", source) == float(ln["kv"])
    assert c.exp(e, "mamba_usage_ratio", source) == float(ln["mamba"])
    if "mamba_num" in ln.re.groupindex:
        assert c.exp(e, "mamba_used_slots", source) == int(ln["mamba_num"])
        assert c.exp(e, "kv_used_tokens", source) == int(ln["tokens"])
        assert c.exp(e, "generation_throughput_tokens_per_second", source) == float(ln["gen"])
    else:
        assert c.exp(e, "input_throughput_tokens_per_second", source) == float(ln["input"])


def assert_gauges_equal_sglang(m: h.Moment, source: str) -> None:
    """At a consistent moment SGLang's gauges were set by the same batch line (metrics_reporter.py: the prefill and
    decode reports set them as they log): counts equal, ratios within the 0.005 of the line's two decimals."""
    e, sg = m.reads["exporter"], m.reads["sglang"]
    assert c.exp(e, "running_requests", source) == h.value(sg, "sglang:num_running_reqs")
    assert c.exp(e, "queued_requests", source) == h.value(sg, "sglang:num_queue_reqs")
    assert abs(c.exp(e, "kv_usage_ratio", source) - h.value(sg, "sglang:full_token_usage")) <= 0.005 + 1e-9
    assert abs(c.exp(e, "mamba_usage_ratio", source) - h.value(sg, "sglang:mamba_usage")) <= 0.005 + 1e-9
    if "mamba_num" in m.marker.match.re.groupindex:
        assert c.exp(e, "mamba_used_slots", source) == h.value(sg, "sglang:mamba_used_tokens")
        assert c.exp(e, "kv_used_tokens", source) == h.value(sg, "sglang:kv_used_tokens") == h.value(sg, "sglang:num_used_tokens")
        assert abs(c.exp(e, "generation_throughput_tokens_per_second", source) - h.value(sg, "sglang:gen_throughput")) <= 0.005 + 1e-9


def log_time(m: re.Match) -> float:
    """A batch line's log time (SGLang prints ``YYYY-MM-DD HH:MM:SS``), in seconds: differences only."""
    return time.mktime(time.strptime(m["ts"], "%Y-%m-%d %H:%M:%S"))


def wait_lines(engine: sh.Engine, n: int, timeout: float, what: str, pred=lambda m: True) -> list[re.Match]:
    """Until this boot has logged ``n`` batch lines meeting ``pred`` (failing with what it logged instead)."""

    def got() -> list[re.Match]:
        return [m for m in sh.batch_lines(engine.this_boot()) if pred(m)]

    return h.drive_until(
        lambda: len(found := got()) >= n and found,
        timeout,
        lambda: f"{len(got())} such lines; the last line {h.tail(engine.log, 1)[-160:]!r}",
        f"{n} batch lines {what}",
        every=0.3,
    )


def assert_advice_boots(boots: dict, kv_tokens: int, must: tuple[str, ...] = ()) -> None:
    """What ``sglang_harness.advice_boots`` booted: SGLang got ready with every recommendation; a larger mamba pool, if
    one is exported, logs the slots advised and keeps the KV pool at ``kv_tokens`` (the boot's ``--max-total-tokens``);
    ``must``: flags that must be among them."""
    refused = {advice: why for (_, advice), (why, _) in boots.items() if why is not None}
    assert not refused, refused
    flags = {flag for _, (flag, _) in boots}
    assert set(must) <= flags, (must, sorted(advice for _, advice in boots))
    for (_, (flag, value)), (_, text) in boots.items():
        if flag == "--max-mamba-cache-size":
            b = last_boot(text)
            assert (b.slots, b.kv_tokens) == (int(value), kv_tokens), (value, b)
