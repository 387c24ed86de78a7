"""Checks the scenarios share: the exporter against the log, against vLLM's own /metrics, against ``plan``.

No tests here (``test_*.py`` call these). Every comparison is structural or a bound stated in
docs/engine-suite.md; no value is copied from a run.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import harness as h

KV_SIZE_RE = re.compile(r"(\w+) KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
BLOCK_RE = re.compile(r"Setting attention block size to (\d+) tokens")
PAD_RE = re.compile(r"Padding mamba page size by ([\d.]+)%")
GROUPS_RE = re.compile(r"kv cache group sizes \(([\d, ]+)\)")
KV_SET_RE = re.compile(r"(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB for KV cache")


def _int(s: str) -> int:
    return int(s.replace(",", ""))


@dataclass
class Boot:
    """What one boot's startup lines said (the last boot in the text)."""

    tokens: int
    max_len: int
    concurrency: float
    block_size: int | None
    padding: float | None
    groups: int | None
    kv_gib: float | None


def last_boot(text: str) -> Boot:
    i = text.rfind("non-default args:")
    part = text[i:] if i >= 0 else text
    m = KV_SIZE_RE.search(part)
    assert m, "no `KV cache size` line in this boot"
    b, p, g, k = BLOCK_RE.search(part), PAD_RE.search(part), GROUPS_RE.search(part), KV_SET_RE.search(part)
    return Boot(
        tokens=_int(m.group(2)),
        max_len=_int(m.group(3)),
        concurrency=float(m.group(4)),
        block_size=int(b.group(1)) if b else None,
        padding=float(p.group(1)) / 100.0 if p else None,
        groups=len(g.group(1).split(",")) if g else None,
        kv_gib=float(k.group(1)) if k else None,
    )


def cache_config(vllm_metrics: str) -> dict[str, str]:
    return h.labels_of(vllm_metrics, "vllm:cache_config_info")


def exp(text: str, name: str, source: str, **labels: str) -> float | None:
    return h.value(text, "hybrid_cache_" + name, source=source, **labels)


def assert_capacity(e: str, source: str, log: str, vm: str) -> Boot:
    """Issue 19 item 1: the exporter's capacity facts equal the engine's log and vllm:cache_config_info."""
    boot = last_boot(log)
    cc = cache_config(vm)
    assert exp(e, "kv_capacity_tokens", source) == boot.tokens == int(cc["kv_cache_size_tokens"])
    assert exp(e, "max_concurrency", source) == boot.concurrency == round(float(cc["kv_cache_max_concurrency"]), 2)
    assert exp(e, "context_length_tokens", source) == boot.max_len
    if boot.block_size is not None:
        assert exp(e, "attention_block_size_tokens", source) == boot.block_size == int(cc["block_size"])
    else:  # no hybrid alignment line: the block size the engine chose without raising it
        assert exp(e, "attention_block_size_tokens", source) is None
    if boot.padding is not None:
        assert exp(e, "mamba_page_padding_ratio", source) == boot.padding
    assert exp(e, "kv_cache_groups", source) == boot.groups
    assert exp(e, "kv_capacity_bytes", source) == boot.kv_gib * 2**30 == int(cc["kv_cache_memory_bytes"])
    info = h.labels_of(e, "hybrid_cache_server_info", source=source)
    assert info["version"] == h.VLLM_VERSION
    assert info["radix_cache_strategy"] == cc["mamba_cache_mode"]
    if "Reset SSM cache type" in log or "SSM state storage" in log:
        assert info["mamba_ssm_dtype"] == cc["mamba_ssm_cache_dtype"]
        assert CPU_ISA == "avx512-bf16", "vLLM took its AVX512-BF16 branch on a CPU whose /proc/cpuinfo says " + CPU_ISA
    return boot


LOGROTATE = shutil.which("logrotate") or "/usr/sbin/logrotate"


def copytruncate(log: Path, workdir: Path) -> Path:
    """The real ``logrotate`` copytruncates ``log`` now (its config and state beside it in ``workdir``); returns the
    rotated copy."""
    assert Path(LOGROTATE).exists(), "logrotate is not installed (make tools installs it)"
    conf = workdir / f"logrotate-{log.stem}.conf"
    conf.write_text(f"{log} {{\n    copytruncate\n    rotate 2\n    missingok\n    nocompress\n}}\n")
    state = workdir / f"logrotate-{log.stem}.state"
    r = subprocess.run([LOGROTATE, "-f", "-s", str(state), str(conf)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return Path(str(log) + ".1")


def cpu_isa(cpuinfo: str) -> str:
    """This CPU as ``plan --cpu-isa`` takes it, from the flags of /proc/cpuinfo as its help says: what vLLM's CPU
    build asks torch (``_is_avx512_bf16_supported``, ``_is_avx512_supported``) decides the SSM dtype and fp8."""
    m = re.search(r"^flags\s*:(.*)$", cpuinfo, re.M)
    flags = set(m.group(1).split()) if m else set()
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        return "avx512-bf16"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags or "sse2" in flags else "other"


CPU_ISA = cpu_isa(Path("/proc/cpuinfo").read_text())


def plan(config: Path, *args: str) -> dict:
    """``plan --json`` for this CPU (``--cpu-isa`` from /proc/cpuinfo unless given)."""
    isa = () if "--cpu-isa" in args else ("--cpu-isa", CPU_ISA)
    r = subprocess.run(
        [str(h.EXE), "plan", "--config", str(config), "--engine", "vllm", "--json", *isa, *args], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def assert_plan(config: Path, boot: Boot, vm: str, cap: float | None, *args: str) -> dict:
    """``plan`` for the same configuration, budget and platform reproduces what the engine logged."""
    cc = cache_config(vm)
    p = plan(
        config,
        "--platform",
        "cpu",
        "--kv-budget",
        repr(boot.kv_gib),
        "--context-len",
        str(boot.max_len),
        "--vllm-version",
        h.VLLM_VERSION,
        *args,
    )
    v = p["vllm"]
    assert v["block_size"] == int(cc["block_size"])
    assert v["num_blocks"] == int(cc["num_gpu_blocks"])
    assert round(v["max_concurrency"], 2) == boot.concurrency
    assert v["kv_cache_tokens_new"] == boot.tokens
    if boot.padding is not None:
        assert round(v["padding_pct"], 2) == round(boot.padding * 100, 2)
    assert v["n_attn_groups"] + v["n_mamba_groups"] == boot.groups
    if cap is not None:
        assert p["cap"] == cap
    return p


# --------------------------------------------------------------------------------------------
# under load: a consistent moment of the log, vLLM's /metrics and the exporter


def recorder(eng: h.Engine, side: h.Sidecar, load: h.Load) -> h.Recorder:
    """vLLM's recorder (:class:`harness.Recorder`): the log's newest stats line is the marker; between two reads of
    it, the requests the client has in flight, vLLM's /metrics and the exporter's (caught up with the file)."""
    return h.Recorder(
        h.newest_line(eng.log, h.STATS_RE), {"inflight": lambda: load.inflight, "vllm": eng.metrics, "exporter": side.caught_up}
    )


def busy(m: h.Moment) -> bool:
    """The moment's stats line shows requests running."""
    return int(m.marker.match.group("running")) > 0


def assert_gauges_equal_line(m: h.Moment, source: str) -> None:
    """Issue 19 item 2: each per-interval gauge equals the newest stats line, exactly."""
    e, ln = m.reads["exporter"], m.marker.match
    assert exp(e, "running_requests", source) == float(ln.group("running"))
    assert exp(e, "queued_requests", source) == float(ln.group("waiting"))
    assert exp(e, "kv_usage_ratio", source) == float(ln.group("kv")) / 100.0
    assert exp(e, "generation_throughput_tokens_per_second", source) == float(ln.group("gen"))
    assert exp(e, "input_throughput_tokens_per_second", source) == float(ln.group("prompt"))
    if ln.group("hit") is not None:
        assert exp(e, "prefix_cache_hit_ratio", source) == float(ln.group("hit")) / 100.0


def assert_live_bounds(m: h.Moment, source: str, concurrency: int, max_num_seqs: int, blocks_per_request: int, num_blocks: int) -> None:
    """The bounds docs/engine-suite.md states between the exporter (the log's last interval) and vLLM's live
    gauges at the same moment: running and waiting lie within what the client has in flight (and running
    within max_num_seqs); KV usage differs by at most what the client's requests can hold."""
    e, vm = m.reads["exporter"], m.reads["vllm"]
    for name, live in (("running_requests", "vllm:num_requests_running"), ("queued_requests", "vllm:num_requests_waiting")):
        a, b = exp(e, name, source), h.value(vm, live)
        assert 0 <= a <= concurrency and 0 <= b <= concurrency, (name, a, b)
    assert exp(e, "running_requests", source) <= max_num_seqs and h.value(vm, "vllm:num_requests_running") <= max_num_seqs
    kv_log, kv_live = exp(e, "kv_usage_ratio", source), h.value(vm, "vllm:kv_cache_usage_perc")
    bound = min(1.0, concurrency * blocks_per_request / num_blocks) + 0.001  # the log prints 0.1 % steps
    assert 0.0 <= kv_log <= 1.0 and 0.0 <= kv_live <= 1.0
    assert abs(kv_log - kv_live) <= bound, (kv_log, kv_live, bound)


def _log_time(ts: str, year: int) -> float:
    return time.mktime(time.strptime(f"{year}-{ts}", "%Y-%m-%d %H:%M:%S"))


def stats_times(text: str, year: int) -> list[tuple[float, re.Match]]:
    return [(_log_time(mt.group("ts"), year), mt) for mt in h.stats_lines(text)]


# the engine core ready: the API server makes its stats logger after this line, and before `Supported tasks`
ENGINE_READY_RE = re.compile(r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d) \[[^\]]*\] init engine \(profile, create kv cache, warmup model\) took")


def integrate(text: str, group: str, interval: float) -> tuple[float, float]:
    """The least and the most tokens the stats lines' ``group`` rate can stand for: Σ rate × the time vLLM divided it by.
    vLLM's API server calls its stats logger every ``interval`` s or later (an asyncio sleep, then the call), which
    divides the tokens since its previous call by the time since it (``loggers.py::_get_throughput``) and prints only
    when there is something to say (an idle call logs at DEBUG). The log's times have a resolution of 1 s, so a line
    d s after the previous printed line took (d - 1, d + 1) s, and at least ``interval``; once d > 2 × interval - 1 an
    unprinted call may lie between them, so only [interval, d + 1]. A boot's first line counts from the stats logger's
    making, after the engine core's ``init engine ... took`` line: [interval, t - t_init + 1] (on an engine slowed
    down that was 5.8 s, not the interval: docs/engine-suite.md). Each rate is printed to 0.05 token/s."""
    year = time.localtime().tm_year
    marks = [(m.start(), _log_time(m.group("ts"), year), None) for m in ENGINE_READY_RE.finditer(text)]
    marks += [(m.start(), t, m) for t, m in stats_times(text, year)]
    lo = hi = 0.0
    prev: tuple[float, bool] | None = None  # the time of the previous mark, and whether it was a stats line
    for _, t, mt in sorted(marks, key=lambda x: x[0]):
        if mt is None:
            prev = (t, False)
            continue
        assert prev is not None, "a stats line before the engine core's `init engine` line"
        d = t - prev[0]
        least = max(interval, d - 1) if prev[1] and d <= 2 * interval - 1 else interval
        rate = float(mt.group(group))
        lo += max(0.0, rate - 0.05) * least
        hi += (rate + 0.05) * (d + 1)
        prev = (t, True)
    return lo, hi


def assert_clean_lines(e: str, source: str) -> None:
    """Every line of the real log is parsed or ignored: none is format drift."""
    assert exp(e, "exporter_lines_total", source, outcome="unrecognized") == 0
    assert exp(e, "exporter_lines_total", source, outcome="parsed") > 0


def state_of(e: str, source: str) -> str:
    on = [lab["state"] for lab, v in h.samples(e, "hybrid_cache_server_state", source=source) if v == 1.0]
    assert len(on) == 1, on
    return on[0]


def findings_on(e: str, source: str) -> set[str]:
    return {lab["rule"] for lab, v in h.samples(e, "hybrid_cache_finding", source=source) if v == 1.0}


def scenario(
    model: Path, workdir: Path, source: str, *args: str, served_name: str = "tiny-qwen3-next", logging: str = "default"
) -> tuple[Path, h.Sidecar, h.Engine]:
    """A scenario's log (empty), the sidecar following it from its first byte, and the engine (not started). With
    ``logging="both"`` the sidecar also follows the JSON copy of the same records as source ``<source>-json``."""
    log = workdir / f"{source}.log"
    log.touch()
    eng = h.Engine(model, log, served_name=served_name, args=("--max-model-len", "2048", *args), logging=logging)
    extra: tuple[str, ...] = ()
    if logging == "both":
        eng.json_log.touch()
        extra = ("--log", f"{source}-json={eng.json_log}")
    side = h.Sidecar(log, source, workdir, *extra)
    return log, side, eng


# the families whose values come from the exporter's reading, not from the log's content (per file: bytes, lag,
# file times, line outcomes), and the times of the last line / of a state entered, which lines of uvicorn (in the
# default log only: it is not a vllm logger) can set
_NOT_CONTENT = re.compile(r"^hybrid_cache_(exporter_|last_line_timestamp_seconds|server_state_since_timestamp_seconds)")


def content_samples(e: str, source: str) -> dict[tuple[str, tuple], float]:
    """Every sample of ``source`` the log's content sets, by (name, labels without source)."""
    out = {}
    for m in h._SAMPLE_RE.finditer(e):
        name = m.group(1)
        if _NOT_CONTENT.match(name) or not name.startswith("hybrid_cache_"):
            continue
        lab = dict(h._LABEL_RE.findall(m.group(2) or ""))
        if lab.pop("source", None) != source:
            continue
        out[(name, tuple(sorted(lab.items())))] = float(m.group(3))
    return out


def assert_same_metrics(e: str, a: str, b: str) -> int:
    """Sources ``a`` and ``b`` (one run in two formats) export the same content samples; returns how many."""
    sa, sb = content_samples(e, a), content_samples(e, b)
    diff = sorted(k for k in set(sa) | set(sb) if sa.get(k) != sb.get(k))
    assert not diff, [(k, sa.get(k), sb.get(k)) for k in diff[:20]]
    return len(sa)


def boot(side: h.Sidecar, eng: h.Engine, source: str) -> tuple[str, str]:
    """Start the engine; the exporter's exposition once it read the capacity lines, and vLLM's /metrics."""
    eng.start()
    e = wait_exporter(side, lambda e: exp(e, "kv_capacity_tokens", source) is not None, 30, "the capacity lines")
    return e, eng.metrics()


def restart(side: h.Sidecar, eng: h.Engine, source: str, fact: str, timeout: float) -> str:
    """Start ``eng`` as the second boot in its log: the exporter's exposition once it counted the restart and read
    the boot's ``fact`` (a capacity family)."""
    eng.start()
    return wait_exporter(
        side, lambda e: exp(e, "server_restarts_total", source) == 1 and exp(e, fact, source) is not None, timeout, "the second boot"
    )


def seen_by(side: h.Sidecar, e: str) -> str:
    """What the exporter says of each file it follows: state, findings, stats lines read."""
    out = []
    for src in side.files:
        on = [lab["state"] for lab, v in h.samples(e, "hybrid_cache_server_state", source=src) if v == 1.0]
        lines = exp(e, "stats_lines_total", src)
        read = f", {lines:.0f} stats lines" if lines else ""  # vLLM's (SGLang prints batch lines)
        out.append(f"{src}: state {'/'.join(on) or '-'}, findings {sorted(findings_on(e, src)) or '-'}{read}")
    return "; ".join(out) if e else "no exposition yet"


def wait_exporter(sidecar: h.Sidecar, pred, timeout: float, what: str) -> str:
    """The exporter's exposition (caught up with its files) once ``pred`` holds for it, within ``timeout`` s."""
    last = {"e": ""}

    def ok() -> bool:
        last["e"] = sidecar.caught_up()
        return pred(last["e"])

    h.drive_until(ok, timeout, lambda: seen_by(sidecar, last["e"]), what)
    return last["e"]


def last_stats(text: str) -> str:
    ms = h.stats_lines(text)
    return f"{len(ms)} stats lines, the last {ms[-1].group(0)[ms[-1].group(0).find('Running') :]!r}" if ms else "no stats line"


def wait_log(log: Path, pattern: str, timeout: float, after: int = 0, what: str = "") -> re.Match:
    """The first match of ``pattern`` in ``log`` at or after offset ``after``, within ``timeout`` s."""
    rx = re.compile(pattern)
    m = h.drive_until(
        lambda: rx.search(h.read(log), after), timeout, lambda: last_stats(h.read(log)), what or f"{pattern!r} in {log.name}", every=0.3
    )
    return m


def busy_lines(text: str, after: int = 0) -> list[re.Match]:
    """The stats lines at or after offset ``after`` that show requests running."""
    return [m for m in h.stats_lines(text) if m.start() >= after and int(m.group("running")) > 0]


# the time bound of the suite's loads and of the conditions they are driven to: many times what they take here (a
# condition met in 10-30 s on this 2-core machine), so that only a condition never met runs into it
LOAD_BOUND = 240.0


def wait_busy(log: Path, n: int, after: int = 0, bound: float = LOAD_BOUND) -> list[re.Match]:
    """Drive until ``log`` has ``n`` stats lines with requests running (at or after ``after``)."""
    return h.drive_until(
        lambda: len(found := busy_lines(h.read(log), after)) >= n and found,
        bound,
        lambda: last_stats(h.read(log)[after:]),
        f"{n} stats lines with requests running",
    )


IDLE_LINE = r"Running: 0 reqs, Waiting: 0 reqs"


def wait_idle(log: Path) -> re.Match:
    """The idle stats line after a load stopped: the first stats line from the newest one on with nothing running
    nor waiting (vLLM prints one, then nothing while idle)."""
    return wait_log(log, IDLE_LINE, 4 * h.STATS_INTERVAL + 60, after=max(0, h.read(log).rfind("Avg prompt")), what="the idle stats line")


BUSY = 2  # stats lines with requests running that a scenario which only serves a load waits for


@dataclass
class Served:
    """One boot that served a load, went idle and was stopped: what the log, the sidecar and vLLM said."""

    log: str
    exposition: str  # the sidecar once it read the capacity lines
    vllm: str  # vLLM's /metrics at that moment
    end_exposition: str  # the sidecar once the server is stopped
    load: h.Load


def serve_load_stop(model: Path, workdir: Path, source: str, *args: str, served_name: str = "tiny-qwen3-next") -> Served:
    """Boot ``model`` with ``args``, drive a load from 4 clients until :data:`BUSY` stats lines show requests
    running, stop it, wait for the idle stats line, stop the engine (SIGTERM) and wait for the sidecar to say so;
    the scrubbed log is saved as a fixture when asked."""
    log, side, eng = scenario(model, workdir, source, *args, served_name=served_name)
    try:
        e, vm = boot(side, eng, source)
        with h.Load(eng.base, eng.served_name, clients=4, max_tokens=h.paced(32), bound=LOAD_BOUND) as ld:
            wait_busy(log, BUSY)
        wait_idle(log)
        eng.stop()
        e_end = wait_exporter(side, lambda e: state_of(e, source) == "stopped", 30, "the stopped state")
        h.save_fixture(log, source, workdir)
        return Served(h.read(log), e, vm, e_end, ld)
    finally:
        eng.stop()
        side.stop()


def assert_served_and_stopped(run: Served, source: str) -> None:
    """Every request served, stats lines with requests running, one stats line counted per stats line logged, the
    server stopped, no format drift."""
    assert run.load.done > 0 and run.load.failed == 0, str(run.load)
    assert len(busy_lines(run.log)) >= BUSY
    assert exp(run.end_exposition, "stats_lines_total", source) == len(h.stats_lines(run.log)) > 0
    assert state_of(run.end_exposition, source) == "stopped"
    assert_clean_lines(run.end_exposition, source)


def blocks_per_request(p: dict, max_len: int) -> int:
    v = p["vllm"]
    return v["n_attn_groups"] * math.ceil(max_len / v["block_size"]) + v["n_mamba_groups"] * v["blocks_per_request"]


# --------------------------------------------------------------------------------------------
# the two boots compared (exporter/presentation/boots.py) on every face: report text, markdown, JSON, HTML and the status page


def reports(paths: list[Path], rules: Path) -> dict[str, str]:
    """``report`` of the real log in its four formats."""
    out = {}
    for fmt, flag in (("text", ()), ("markdown", ("--markdown",)), ("json", ("--json",)), ("html", ("--html",))):
        r = subprocess.run(
            [str(h.EXE), "report", *flag, "--rules-config", str(rules), *map(str, paths)], capture_output=True, text=True, timeout=180
        )
        assert r.returncode == 0, (fmt, r.stderr)
        out[fmt] = r.stdout
    return out


def _pct(v: float) -> str:
    return f"{v * 100:.0f}%"


def assert_before_after(reps: dict[str, str], page: str, source: str, cap: int, recommended: int, kv_tokens: int, fired: str) -> dict:
    """The restart with ``--max-num-seqs`` changed from ``cap`` to ``recommended``: the flag that changed, the pools
    and the cap before / after / predicted (the prediction equal to what vLLM then logged), the binding and queueing
    shares before and after, and the finding ``fired`` before only, the same on every face. Returns the JSON block."""
    (src,) = [s for s in json.loads(reps["json"])["sources"] if s["source"] == source]
    (srv,) = src["servers"]
    ba = srv["before_after"]
    assert ba is not None and ba["boots"] == 2, ba
    assert ba["changed"] == [{"setting": "max_num_seqs", "before": cap, "after": recommended, "flag": "--max-num-seqs"}], ba["changed"]
    pools = {r["what"]: r for r in ba["pools"]}
    rc = pools["request cap"]
    assert (rc["before"], rc["after"], rc.get("predicted"), rc.get("verdict")) == (cap, recommended, recommended, "agrees"), rc
    kv = pools["KV tokens"]
    assert kv["before"] == kv["after"] == kv_tokens, kv  # V1's one pool: the cap frees no KV
    (pred,) = [p for p in ba["predictions"] if p["flag"] == "--max-num-seqs"]
    assert pred["value"] == str(recommended) and f"cap {cap} → {recommended}" in pred["effect"], pred
    b, a = ba["before"], ba["after"]
    assert b["binding"]["requests"] > a["binding"]["requests"] and b["queued"] > a["queued"], (b, a)
    assert fired in b["fired"] and fired not in a["fired"], (b["fired"], a["fired"])
    # text and markdown: the same lines
    for fmt in ("text", "markdown"):
        t = reps[fmt]
        assert "Before and after the restart at " in t and "(2 boots in the log)" in t, fmt
        assert f"changed: max_num_seqs {cap} → {recommended} (--max-num-seqs)" in t, fmt
        assert re.search(rf"request cap\s+{cap}\s+{recommended}\s+{recommended} \(agrees\)", t), fmt
        assert re.search(rf"KV tokens\s+{kv_tokens:,}\s+{kv_tokens:,}", t), fmt
        assert f"the exporter's prediction for --max-num-seqs {recommended}: " in t, fmt
        assert f"request cap {_pct(b['binding']['requests'])} → {_pct(a['binding']['requests'])}" in t, fmt
        assert f"requests waiting: {_pct(b['queued'])} → {_pct(a['queued'])} of log time" in t, fmt
        assert f"findings: {', '.join(b['fired'])} → {', '.join(a['fired']) or 'none'}" in t, fmt
    # the HTML report and the live status page: the same table
    for face, html in (("html", reps["html"]), ("status page", page)):
        assert "Before and after the restart" in html and "(2 boots in the log)" in html, face
        assert f"Changed: max_num_seqs {cap} → {recommended}" in html, face
        assert f"<tr><td>request cap</td><td>{cap}</td><td>{recommended:,}</td><td>{recommended:,} (agrees)</td></tr>" in html, face
        assert f"<tr><td>KV tokens</td><td>{kv_tokens:,}</td><td>{kv_tokens:,}</td>" in html, face
        assert f"predicted for <code>--max-num-seqs {recommended}</code>: " in html, face
        assert f"<tr><td>requests waiting</td><td>{_pct(b['queued'])}</td><td>{_pct(a['queued'])}</td>" in html, face
    return ba
