#!/usr/bin/env python3
"""Deterministic generator of realistic mixed SGLang / vLLM server logs for the benchmark.

    python bench/gen.py --engine sglang --lines 2000000 --out /tmp/sglang-2m.log
    python bench/gen.py --engine vllm --lines 100000 --out /tmp/vllm.log --seed 7

The same ``--seed``/``--lines``/``--engine`` always produce byte-identical files.

SGLang (0.5.2x, hybrid GDN, TP0 rank tag): a startup block, then
40 % ``Decode batch`` / 20 % ``Prefill batch`` / 40 % uvicorn access lines.
vLLM (0.31+ prefix): a startup block, then ``Engine 000`` stats lines and access lines.

Timestamps advance monotonically (seconds resolution, like the engines print them).
A ``FILE.truth.json`` sidecar records what a correct parser must count (batch lines,
prefill new/cached tokens, last gauge values); ``--no-truth`` skips it.
"""

from __future__ import annotations

import argparse
import calendar
import json
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

# Pool sizes used in the startup block and to derive usage ratios, so that the
# "mamba num / mamba usage" and "#full token / full token usage" pairs are consistent.
SGL_FULL_TOKENS = 327310
SGL_MAMBA_SLOTS = 186
SGL_MAX_RUNNING = 62

SGL_DEFAULT_START = "2026-08-14 08:17:30"
VLLM_DEFAULT_START = "2026-11-01 10:00:00"

ACCESS_PATHS = (
    ('"POST /v1/chat/completions HTTP/1.1" 200 OK', 70),
    ('"POST /v1/completions HTTP/1.1" 200 OK', 10),
    ('"GET /health HTTP/1.1" 200 OK', 8),
    ('"GET /metrics HTTP/1.1" 200 OK', 8),
    ('"GET /v1/models HTTP/1.1" 200 OK', 2),
    ('"POST /v1/chat/completions HTTP/1.1" 400 Bad Request', 2),
)


@dataclass
class Truth:
    """What a correct SGLang/vLLM parser must extract from the generated file."""

    engine: str
    lines: int = 0
    decode_batches: int = 0
    prefill_batches: int = 0
    prefill_new_tokens: int = 0
    prefill_cached_tokens: int = 0
    access_lines: int = 0
    stats_lines: int = 0
    startup_lines: int = 0
    last: dict = field(default_factory=dict)


class Clock:
    """Monotonic, seconds-resolution wall clock; caches the formatted string per second."""

    def __init__(self, start: str, fmt: str):
        self.t = calendar.timegm(time.strptime(start, "%Y-%m-%d %H:%M:%S"))
        self.fmt = fmt
        self._cache_t = -1
        self._cache_s = ""

    def advance(self, seconds: int) -> None:
        self.t += seconds

    def now(self) -> str:
        if self.t != self._cache_t:
            self._cache_t = self.t
            self._cache_s = time.strftime(self.fmt, time.gmtime(self.t))
        return self._cache_s


def _weighted(rng: random.Random, items: tuple[tuple[str, int], ...]) -> list[str]:
    """A 1000-entry lookup table so choosing is a single randrange."""
    total = sum(w for _, w in items)
    table: list[str] = []
    for s, w in items:
        table.extend([s] * round(1000 * w / total))
    rng.shuffle(table)
    return table


# --------------------------------------------------------------------------- SGLang


def sglang_startup(ts: str, tag: str = " TP0") -> list[str]:
    p = f"[{ts}{tag}] "
    m = f"[{ts}] "
    return [
        m + "server_args=ServerArgs(model_path='Qwen/Qwen3-Next-80B-A3B-Instruct', tp_size=1, "
        "dp_size=1, mem_fraction_static=0.85, max_running_requests=None, chunked_prefill_size=2048, "
        "max_mamba_cache_size=None, mamba_full_memory_ratio=0.9, disable_radix_cache=False, "
        "decode_log_interval=40, enable_metrics=False, log_level='info')",
        p + "Init torch distributed begin.",
        p + "Init torch distributed ends. mem usage=0.00 GB",
        p + "Load weight begin. avail mem=78.52 GB",
        p + "Load weight end. elapsed=5.54 s, type=Qwen3NextForCausalLM, avail mem=14.08 GB, mem usage=64.44 GB.",
        p + f"Mamba Cache is allocated. max_mamba_cache_size: {SGL_MAMBA_SLOTS}, conv_state size: 0.10GB, ssm_state size: 4.38GB ",
        p + f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {SGL_FULL_TOKENS}, K size: 3.75 GB, V size: 3.75 GB",
        p + "Memory pool end. avail mem=4.21 GB",
        p + "Capture cuda graph begin. This can take up to several minutes. avail mem=4.10 GB",
        p + "Capture cuda graph end. Time elapsed: 12.31 s. mem usage=0.31 GB. avail mem=3.79 GB.",
        p + f"max_total_num_tokens={SGL_FULL_TOKENS}, chunked_prefill_size=2048, max_prefill_tokens=16384, "
        f"max_running_requests={SGL_MAX_RUNNING}, context_len=262144, available_gpu_mem=3.79 GB",
        m + "INFO:     Started server process [1]",
        m + "INFO:     Waiting for application startup.",
        m + "INFO:     Application startup complete.",
        m + "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        m + 'INFO:     127.0.0.1:40000 - "GET /model_info HTTP/1.1" 200 OK',
        m + "The server is fired up and ready to roll!",
    ]


class SglangState:
    """A small random walk so consecutive batch lines look like a live server."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.running = 8
        self.queued = 0

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.3:
            self.running = min(SGL_MAX_RUNNING, self.running + 1)
        elif r < 0.6:
            self.running = max(0, self.running - 1)
        q = self.rng.random()
        if self.running >= SGL_MAX_RUNNING - 2 and q < 0.5:
            self.queued += 1
        elif q < 0.4:
            self.queued = max(0, self.queued - 1)


def sglang_decode(
    rng: random.Random,
    st: SglangState,
    prefix: str,
    truth: Truth,
    running: int | None = None,
) -> str:
    run = st.running if running is None else running
    full = run * rng.randint(180, 1400) + rng.randint(0, 255)
    full = min(full, SGL_FULL_TOKENS)
    mamba = min(SGL_MAMBA_SLOTS, run * 3 + rng.randint(0, 3))
    gen = run * rng.uniform(20.0, 60.0)
    truth.decode_batches += 1
    truth.last = {
        "running": run,
        "queued": st.queued,
        "kv_usage": float(f"{full / SGL_FULL_TOKENS:.2f}"),
        "mamba_usage": float(f"{mamba / SGL_MAMBA_SLOTS:.2f}"),
        "mamba_used_slots": mamba,
        "gen_throughput": float(f"{gen:.2f}"),
    }
    return (
        f"{prefix}Decode batch, #running-req: {run}, #full token: {full}, "
        f"full token usage: {full / SGL_FULL_TOKENS:.2f}, mamba num: {mamba}, "
        f"mamba usage: {mamba / SGL_MAMBA_SLOTS:.2f}, cuda graph: {'True' if run <= 48 else 'False'}, "
        f"gen throughput (token/s): {gen:.2f}, #queue-req: {st.queued}"
    )


def sglang_prefill(rng: random.Random, st: SglangState, prefix: str, truth: Truth) -> str:
    new_seq = rng.randint(1, 8)
    new_tok = rng.randint(16, 2048)
    cached = rng.choice((0, 0, 64, 128, 256, 576, 1024, 4096)) * new_seq
    full = st.running * rng.randint(180, 1400)
    full = min(full, SGL_FULL_TOKENS)
    mamba = min(SGL_MAMBA_SLOTS, st.running * 3 + new_seq)
    pending = rng.choice((0, 0, 0, 64, 512))
    tput = rng.uniform(2000.0, 120000.0)
    truth.prefill_batches += 1
    truth.prefill_new_tokens += new_tok
    truth.prefill_cached_tokens += cached
    truth.last.update(
        running=st.running,
        queued=st.queued,
        kv_usage=float(f"{full / SGL_FULL_TOKENS:.2f}"),
        mamba_usage=float(f"{mamba / SGL_MAMBA_SLOTS:.2f}"),
    )
    return (
        f"{prefix}Prefill batch, #new-seq: {new_seq}, #new-token: {new_tok}, #cached-token: {cached}, "
        f"full token usage: {full / SGL_FULL_TOKENS:.2f}, mamba usage: {mamba / SGL_MAMBA_SLOTS:.2f}, "
        f"#running-req: {st.running}, #queue-req: {st.queued}, #pending-token: {pending}, "
        f"cuda graph: False, input throughput (token/s): {tput:.2f}"
    )


def sglang_lines(
    n: int,
    seed: int,
    start: str = SGL_DEFAULT_START,
    startup: bool = True,
    truth: Truth | None = None,
    rate: float = 5.0,
) -> Iterator[str]:
    """Yield ``n`` lines (without newline) of a 0.5.2x hybrid SGLang server log, about ``rate``
    lines per second of log time (a busy server writes about 10: the rules see one sample per
    line kind per 10 s bucket, so the rate sets how many lines each sample stands for)."""
    rng = random.Random(seed)
    truth = truth if truth is not None else Truth("sglang")
    clock = Clock(start, "%Y-%m-%d %H:%M:%S")
    st = SglangState(rng)
    access = _weighted(rng, ACCESS_PATHS)
    emitted = 0
    if startup:
        for line in sglang_startup(clock.now())[:n]:
            truth.startup_lines += 1
            emitted += 1
            yield line
        clock.advance(3)
    rand = rng.random
    tick = 1.0 / rate
    while emitted < n:
        # ~rate lines per second on average; never goes backwards.
        if rand() < tick:
            clock.advance(1)
        ts = clock.now()
        r = rand()
        if r < 0.4:
            st.step()
            line = sglang_decode(rng, st, f"[{ts} TP0] ", truth)
        elif r < 0.6:
            line = sglang_prefill(rng, st, f"[{ts} TP0] ", truth)
        else:
            truth.access_lines += 1
            line = f"[{ts}] INFO:     127.0.0.1:{rng.randint(32768, 60999)} - {access[rng.randrange(1000)]}"
        emitted += 1
        yield line
    truth.lines = emitted


# --------------------------------------------------------------------------- vLLM


def vllm_startup(ts: str) -> list[str]:
    api = "(APIServer pid=1) INFO " + ts
    core = "(EngineCore pid=312) INFO " + ts
    return [
        api + " [utils.py:253] non-default args: {'model_tag': 'Qwen/Qwen3-Next-80B-A3B-Instruct', "
        "'model': 'Qwen/Qwen3-Next-80B-A3B-Instruct', 'max_num_seqs': 64}",
        api + " [model.py:548] Resolved architecture: Qwen3NextForCausalLM",
        api + " [model.py:1510] Using max model len 262144",
        api + " [config.py:367] Setting attention block size to 544 tokens to ensure that attention page size is >= mamba page size.",
        api + " [config.py:388] Padding mamba page size by 1.49% to ensure that mamba page size and attention page size are exactly equal.",
        core + " [core.py:93] Initializing a V1 LLM engine (v0.31.0) with config: "
        "model='Qwen/Qwen3-Next-80B-A3B-Instruct', max_seq_len=262144, tensor_parallel_size=1",
        core + " [gpu_model_runner.py:2602] Model loading took 74.89 GiB and 41.23 seconds",
        core + " [gpu_worker.py:298] Available KV cache memory: 3.21 GiB",
        core + " [kv_cache_utils.py:1087] GPU KV cache size: 567,978 tokens, Maximum concurrency for 131,072 tokens per request: 4.33x",
        core + " [core.py:210] init engine (profile, create kv cache, warmup model) took 95.11 seconds",
        api + " [api_server.py:1885] Starting vLLM API server 0 on http://0.0.0.0:8000",
        "(APIServer pid=1) INFO:     Started server process [1]",
        "(APIServer pid=1) INFO:     Waiting for application startup.",
        "(APIServer pid=1) INFO:     Application startup complete.",
    ]


def vllm_lines(
    n: int,
    seed: int,
    start: str = VLLM_DEFAULT_START,
    startup: bool = True,
    truth: Truth | None = None,
) -> Iterator[str]:
    """Yield ``n`` lines of a vLLM 0.31+ API server log: stats lines every 10 s plus access lines."""
    rng = random.Random(seed)
    truth = truth if truth is not None else Truth("vllm")
    clock = Clock(start, "%m-%d %H:%M:%S")
    access = _weighted(rng, ACCESS_PATHS)
    emitted = 0
    if startup:
        for line in vllm_startup(clock.now())[:n]:
            truth.startup_lines += 1
            emitted += 1
            yield line
        clock.advance(10)
    running, waiting = 4, 0
    rand = rng.random
    while emitted < n:
        r = rand()
        if r < 0.1:
            # the periodic stats line: one per 10 s interval
            clock.advance(10)
            ts = clock.now()
            running = max(0, min(64, running + rng.randint(-3, 3)))
            waiting = max(0, waiting + rng.randint(-1, 1)) if running >= 60 else 0
            pre = rng.choice(("", "", "", "", ", Preemptions: 1"))
            line = (
                f"(APIServer pid=1) INFO {ts} [loggers.py:310] Engine 000: "
                f"Avg prompt throughput: {rng.uniform(0, 4000):.1f} tokens/s, "
                f"Avg generation throughput: {running * rng.uniform(20, 60):.1f} tokens/s, "
                f"Running: {running} reqs, Waiting: {waiting} reqs{pre}, "
                f"GPU KV cache usage: {min(100.0, running * rng.uniform(0.5, 1.6)):.1f}%, "
                f"Prefix cache hit rate: {rng.uniform(0, 80):.1f}%"
            )
            truth.stats_lines += 1
            truth.last = {"running": running, "queued": waiting}
        else:
            truth.access_lines += 1
            line = f"(APIServer pid=1) INFO:     127.0.0.1:{rng.randint(32768, 60999)} - {access[rng.randrange(1000)]}"
        emitted += 1
        yield line
    truth.lines = emitted


# --------------------------------------------------------------------------- CLI


def generate(
    engine: str,
    lines: int,
    seed: int,
    out: str,
    start: str | None = None,
    startup: bool = True,
    rate: float = 5.0,
) -> Truth:
    truth = Truth(engine)
    if engine == "sglang":
        it = sglang_lines(lines, seed, start or SGL_DEFAULT_START, startup, truth, rate)
    elif engine == "vllm":
        it = vllm_lines(lines, seed, start or VLLM_DEFAULT_START, startup, truth)
    else:
        raise SystemExit(f"unknown engine {engine!r}")
    with open(out, "w", encoding="utf-8", buffering=1 << 20) as f:
        buf: list[str] = []
        for line in it:
            buf.append(line)
            if len(buf) >= 8192:
                buf.append("")
                f.write("\n".join(buf))
                buf.clear()
        if buf:
            buf.append("")
            f.write("\n".join(buf))
    return truth


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("sglang", "vllm"), default="sglang")
    ap.add_argument("--lines", type=int, default=100_000, help="total lines incl. the startup block")
    ap.add_argument("--out", required=True, help="output file ('-' for stdout)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--start", default=None, help="first timestamp, 'YYYY-MM-DD HH:MM:SS'")
    ap.add_argument("--no-startup", action="store_true", help="omit the startup block")
    ap.add_argument("--rate", type=float, default=5.0, help="SGLang: lines per second of log time (default 5; a busy server writes ~10)")
    ap.add_argument("--no-truth", action="store_true", help="do not write FILE.truth.json")
    a = ap.parse_args(argv)
    if a.out == "-":
        gen = sglang_lines if a.engine == "sglang" else vllm_lines
        start = a.start or (SGL_DEFAULT_START if a.engine == "sglang" else VLLM_DEFAULT_START)
        kw = {"rate": a.rate} if a.engine == "sglang" else {}
        for line in gen(a.lines, a.seed, start, not a.no_startup, **kw):
            sys.stdout.write(line + "\n")
        return 0
    truth = generate(a.engine, a.lines, a.seed, a.out, a.start, not a.no_startup, a.rate)
    if not a.no_truth:
        with open(a.out + ".truth.json", "w", encoding="utf-8") as f:
            json.dump(asdict(truth), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
