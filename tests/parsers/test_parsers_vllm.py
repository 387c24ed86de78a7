"""vLLM parser: real-format lines of every release era -> exact event fields.

Lines go through ``parsers.parse_line`` (collector prefix, ANSI, vLLM header, then the message
parser), so the prefix rules of each era are exercised together with the messages.
"""

from __future__ import annotations

import pathlib

import pytest

from parsers import events as ev
from parsers import parse_line
from parsers.numbers import GIB

FIX = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "vllm"
V = "vllm"
approx = pytest.approx


def one(line: str, engine: str | None = V) -> ev.Line:
    return parse_line(line, engine=engine)


def event(line: str, engine: str | None = V) -> object:
    r = one(line, engine)
    assert r.outcome == ev.PARSED, (r.outcome, r.reason, line)
    return r.event


# ---------------------------------------------------------------------------------------------
# periodic stats line, every era

STATS = [
    # V0 0.4.3-0.10.2, header without brackets (<=0.6.3)
    (
        "INFO 07-03 23:23:42 metrics.py:341] Avg prompt throughput: 2313.4 tokens/s, Avg generation throughput: 12.6 "
        "tokens/s, Running: 32 reqs, Swapped: 1 reqs, Pending: 14 reqs, GPU KV cache usage: 41.2%, CPU KV cache usage: 0.5%.",
        dict(running=32, queued=14, swapped=1, kv_usage=0.412, cpu_kv_usage=0.005, input_throughput=2313.4, gen_throughput=12.6),
    ),
    # V0 0.2.0-0.4.2: no trailing period
    (
        "INFO 03-01 10:00:00 metrics.py:161] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 88.0 tokens/s, "
        "Running: 4 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 3.0%, CPU KV cache usage: 0.0%",
        dict(running=4, queued=0, swapped=0, kv_usage=0.03, cpu_kv_usage=0.0),
    ),
    # V1 0.7.0: only Running / Waiting, trailing space
    ("INFO 01-28 14:05:11 loggers.py:72] Running: 11 reqs, Waiting: 4 reqs ", dict(running=11, queued=4, kv_usage=None)),
    # V1 0.7.1-0.7.2: no comma before GPU
    (
        "INFO 02-08 10:32:22 loggers.py:78] Avg prompt throughput: 311.5 tokens/s, Avg generation throughput: 144.2 tokens/s, "
        "Running: 9 reqs, Waiting: 1 reqs GPU KV cache usage: 7.9%.",
        dict(running=9, queued=1, kv_usage=0.079, prefix_hit_ratio=None, input_throughput=311.5),
    ),
    # V1 0.7.3-0.8.2: bracketed header, no Engine prefix
    (
        "INFO 03-21 16:42:50 [loggers.py:80] Avg prompt throughput: 845.0 tokens/s, Avg generation throughput: 73.9 tokens/s, "
        "Running: 7 reqs, Waiting: 0 reqs, GPU KV cache usage: 6.3%, Prefix cache hit rate: 18.4%",
        dict(running=7, queued=0, kv_usage=0.063, prefix_hit_ratio=0.184, engine_index=None),
    ),
    # 0.8.3-0.11.0 real example
    (
        "INFO 07-28 06:42:09 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
        "240.8 tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 93.9%, Prefix cache hit rate: 0.0%",
        dict(running=8, queued=0, kv_usage=0.939, prefix_hit_ratio=0.0, engine_index=0, gen_throughput=240.8),
    ),
    # 0.20+ fully populated (reference example)
    (
        "(APIServer pid=1) INFO 05-01 17:10:51 [loggers.py:271] Engine 000: Avg prompt throughput: 1872.3 tokens/s, Avg "
        "generation throughput: 5.4 tokens/s, Running: 12 reqs, Waiting: 3 reqs, Deferred: 1 reqs, Preemptions: 2, GPU KV "
        "cache usage: 87.5%, Prefix cache hit rate: 45.0%, External prefix cache hit rate: 10.0%, MM cache hit rate: 0.0%",
        dict(running=12, queued=3, deferred=1, preemptions=2, kv_usage=0.875, prefix_hit_ratio=0.45, input_throughput=1872.3),
    ),
    # 0.11.1+ aggregated DP logger, Corrupted field
    (
        "(APIServer pid=1) INFO 11-20 13:03:02 [loggers.py:215] 2 Engines Aggregated: Avg prompt throughput: 10.0 tokens/s, "
        "Avg generation throughput: 20.0 tokens/s, Running: 5 reqs, Waiting: 0 reqs, GPU KV cache usage: 12.5%, Prefix cache "
        "hit rate: 1.0%, Corrupted: 1 reqs",
        dict(running=5, engines_aggregated=2, engine_index=None, kv_usage=0.125),
    ),
    # 0.30 device word
    (
        "(APIServer pid=1) INFO 09-24 10:23:09 [loggers.py:292] Engine 000: Avg prompt throughput: 301.7 tokens/s, Avg "
        "generation throughput: 48.0 tokens/s, Running: 2 reqs, Waiting: 0 reqs, XPU KV cache usage: 3.3%, Prefix cache hit rate: 0.0%",
        dict(kv_usage=0.033, cpu_kv_usage=None),
    ),
    # 0.31+ formatter prefix, prefix hit rate omitted
    (
        "[node-7] (APIServer pid=1) INFO 10-05 07:33:05 [loggers.py:298] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
        "generation throughput: 1211.7 tokens/s, Running: 22 reqs, Waiting: 1 reqs, Preemptions: 3, GPU KV cache usage: 97.3%",
        dict(running=22, queued=1, preemptions=3, kv_usage=0.973, prefix_hit_ratio=None),
    ),
    # 0.33 KV fetch + 'GPU + host'
    (
        "(APIServer pid=1) INFO 11-01 10:03:00 [loggers.py:310] Engine 000: Avg prompt throughput: 1872.3 tokens/s, Avg "
        "generation throughput: 5.4 tokens/s, Running: 12 reqs, Waiting: 3 reqs, Deferred: 1 reqs, KV fetch: 2 waiting to "
        "start, 1 in progress, 0 completed waiting, Preemptions: 2, GPU + host KV cache usage: 87.5%, Prefix cache hit rate: 45.0%",
        dict(running=12, queued=3, deferred=1, preemptions=2, kv_usage=0.875, prefix_hit_ratio=0.45),
    ),
    # V0 prefix-cache line (0.5.5-0.10.2): its own kind, the hit ratio only (not a stats line)
    ("INFO 11-20 09:15:25 metrics.py:465] Prefix cache hit rate: GPU: 45.12%, CPU: 0.00%", dict(prefix_hit_ratio=0.4512, running=None)),
]
PREFIX_CACHE_KIND = "prefix_cache"


@pytest.mark.parametrize("line,want", STATS)
def test_stats_line(line: str, want: dict[str, object]) -> None:
    e = event(line)
    assert isinstance(e, ev.BatchStats) and e.kind == (PREFIX_CACHE_KIND if "GPU: " in line else "stats")
    for k, v in want.items():
        assert getattr(e, k) == (approx(v) if isinstance(v, float) else v), k


def test_stats_dp_rank_from_engine_index_and_process_name() -> None:
    line = (
        "(APIServer pid=1) INFO 10-06 14:02:55 [loggers.py:127] Engine 001: Avg prompt throughput: 880.0 tokens/s, Avg "
        "generation throughput: 298.7 tokens/s, Running: 8 reqs, Waiting: 1 reqs, GPU KV cache usage: 3.8%, Prefix cache hit rate: 49.5%"
    )
    r = one(line, engine=None)
    assert r.engine == V and r.dp_rank == "1" and r.event.engine_index == 1
    r = one("(EngineCore_DP1 pid=311) INFO 10-06 14:01:20 [kv_cache_utils.py:1087] GPU KV cache size: 427,136 tokens", engine=None)
    assert r.dp_rank == "1" and r.event.tokens == 427136
    r = one(
        "(APIServer pid=1) INFO 10-06 14:01:45 [loggers.py:147] Engine 001: vllm cache_config_info with initialization after num_gpu_blocks is: 26696"
    )
    assert r.dp_rank == "1" and r.event.gpu_blocks == 26696 and r.event.engine_index == 1


@pytest.mark.parametrize(
    "line",
    [
        # a field that was never printed ('Swapped' after Waiting) -> format drift
        "INFO 07-28 06:42:09 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
        "240.8 tokens/s, Running: 8 reqs, Waiting: 0 reqs, Swapped: 2 reqs, GPU KV cache usage: 93.9%, Prefix cache hit rate: 0.0%",
        # truncated / mangled
        "INFO 07-28 06:42:09 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 24",
        "(APIServer pid=1) INFO 11-01 10:00:00 [loggers.py:310] Engine 000: Avg prompt throughput: n/a tokens/s",
        "(APIServer pid=1) INFO 11-01 10:00:00 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 2.1, Accepted: x",
        "(EngineCore pid=1) INFO 11-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: many tokens",
        "(EngineCore pid=1) INFO 11-01 10:00:00 [gpu_worker.py:1] Available KV cache memory: 5.33 GB",
        "(APIServer pid=1) INFO 11-01 10:00:00 [utils.py:1] non-default args: none",
        "WARNING 08-20 10:18:39 scheduler.py:1141] Sequence group 147 is preempted by PreemptionMode.RECOMPUTE mode because of x",
        "(EngineCore pid=1) INFO 11-01 10:00:00 [kv_cache_utils.py:1] Maximum concurrency for 32768 tokens per request: lots",
    ],
)
def test_known_marker_that_does_not_parse_is_unrecognized(line: str) -> None:
    r = one(line)
    assert r.outcome == ev.UNRECOGNIZED and r.reason


# ---------------------------------------------------------------------------------------------
# speculative decoding

SPEC = [
    (
        "INFO 07-03 23:23:42 metrics.py:355] Speculative metrics: Draft acceptance rate: 0.712, System efficiency: 0.534, Number "
        "of speculative tokens: 5, Number of accepted tokens: 12345, Number of draft tokens: 17340, Number of emitted tokens: 13860.",
        ev.SpecDecoding(mean_accept_length=None, accept_rate=0.712, accepted_tokens=12345, drafted_tokens=17340),
    ),
    (
        "INFO 04-09 11:22:20 [metrics.py:82] SpecDecoding metrics: Draft acceptance rate: 65.3%, Accepted: 1234 tokens, Drafted: 1890 tokens",
        ev.SpecDecoding(mean_accept_length=None, accept_rate=0.653, accepted_tokens=1234, drafted_tokens=1890),
    ),
    (
        "INFO 06-12 09:03:31 [metrics.py:86] SpecDecoding metrics: Draft acceptance rate: 38.2%, Mean acceptance length: 2.53, "
        "Accepted: 3342 tokens, Drafted: 8748 tokens, Per-position acceptance rate: 0.612, 0.401, 0.301, 0.214",
        ev.SpecDecoding(mean_accept_length=2.53, accept_rate=0.382, accepted_tokens=3342, drafted_tokens=8748),
    ),
    (
        "(APIServer pid=1) INFO 05-01 17:10:51 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 3.12, Accepted "
        "throughput: 3.73 tokens/s, Drafted throughput: 5.28 tokens/s, Accepted: 37 tokens, Drafted: 53 tokens, Per-position "
        "acceptance rate: 0.889, 0.667, 0.556, Avg Draft acceptance rate: 69.8%",
        ev.SpecDecoding(mean_accept_length=3.12, accept_rate=0.698, accepted_tokens=37, drafted_tokens=53),
    ),
    # nothing drafted in the interval: vLLM prints nan, which is "no data", not 0
    (
        "(APIServer pid=1) INFO 05-01 17:10:51 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: nan, Accepted "
        "throughput: 0.00 tokens/s, Drafted throughput: 0.00 tokens/s, Accepted: 0 tokens, Drafted: 0 tokens, Per-position "
        "acceptance rate: nan, nan, Avg Draft acceptance rate: nan%",
        ev.SpecDecoding(mean_accept_length=None, accept_rate=None, accepted_tokens=0, drafted_tokens=0),
    ),
]


@pytest.mark.parametrize("line,want", SPEC)
def test_spec_decoding(line: str, want: ev.SpecDecoding) -> None:
    e = event(line)
    assert isinstance(e, ev.SpecDecoding)
    assert e.accepted_tokens == want.accepted_tokens and e.drafted_tokens == want.drafted_tokens
    assert e.mean_accept_length == (None if want.mean_accept_length is None else approx(want.mean_accept_length))
    assert e.accept_rate == (None if want.accept_rate is None else approx(want.accept_rate))


# ---------------------------------------------------------------------------------------------
# capacity: KV cache size, concurrency, blocks

CAPACITY = [
    (
        "(EngineCore_DP0 pid=1805889) INFO 10-23 15:14:30 [kv_cache_utils.py:1028] GPU KV cache size: 973,760 tokens",
        dict(tokens=973760, device="GPU"),
    ),
    (
        "(EngineCore_DP0 pid=1805889) INFO 10-23 15:14:30 [kv_cache_utils.py:1032] Maximum concurrency for 262,144 tokens per request: 14.77x",
        dict(tokens=None, max_model_len=262144, max_concurrency=14.77),
    ),
    (
        "INFO 11-20 09:13:10 distributed_gpu_executor.py:61] Maximum concurrency for 32768 tokens per request: 12.34x",
        dict(max_model_len=32768, max_concurrency=12.34),
    ),
    (
        "INFO 02-08 10:30:41 kv_cache_utils.py:410] Maximum concurrency for 2048 tokens per request: 10.79x",
        dict(max_model_len=2048, max_concurrency=10.79),
    ),
    (
        "(EngineCore pid=1) INFO 08-27 12:01:33 [kv_cache_utils.py:1460] GPU KV cache size: 567,978 tokens, Maximum concurrency for 131,072 tokens per request: 4.33x",
        dict(tokens=567978, max_model_len=131072, max_concurrency=4.33, device="GPU"),
    ),
    (
        "(EngineCore pid=77) INFO 09-24 10:21:58 [kv_cache_utils.py:1466] XPU KV cache size: 178,176 tokens, Maximum concurrency for 32,768 tokens per request: 5.44x",
        dict(tokens=178176, device="XPU", max_concurrency=5.44),
    ),
    (
        "(EngineCore pid=1) INFO 11-01 10:01:24 [kv_cache_planning.py:741] CPU KV cache size: 65,536 tokens, Maximum concurrency for 8,192 tokens per request: 8.00x",
        dict(tokens=65536, device="CPU", max_model_len=8192),
    ),
    (
        "(EngineCore pid=142) INFO 11-01 10:01:24 [kv_cache_planning.py:741] GPU + host KV cache size: 2,359,296 tokens, Maximum concurrency for 131,072 tokens per request: 18.00x",
        dict(tokens=2359296, device="GPU + host", max_concurrency=18.0),
    ),
    (
        "INFO 07-03 23:20:47 distributed_gpu_executor.py:56] # GPU blocks: 4385, # CPU blocks: 1638",
        dict(gpu_blocks=4385, cpu_blocks=1638, device="GPU"),
    ),
    (
        "INFO 02-01 10:00:00 executor_base.py:110] # CUDA blocks: 2456, # CPU blocks: 2048",
        dict(gpu_blocks=2456, cpu_blocks=2048, device="CUDA"),
    ),
    ("INFO 02-24 08:01:50 executor_base.py:111] # cuda blocks: 2456, # CPU blocks: 2048", dict(gpu_blocks=2456, device="cuda")),
    ("INFO 05-20 10:00:00 tpu_executor.py:80] # TPU blocks: 9012, # CPU blocks: 512", dict(gpu_blocks=9012, device="TPU")),
    ("INFO 01-30 03:19:14 kv_cache_utils.py:395] # GPU blocks: 1381", dict(gpu_blocks=1381, cpu_blocks=None)),
    (
        "INFO 05-28 10:00:00 [loggers.py:120] vllm cache_config_info with initialization after num_gpu_blocks is: 9001",
        dict(gpu_blocks=9001, engine_index=None),
    ),
    (
        "(APIServer pid=1804347) INFO 10-23 15:14:56 [loggers.py:142] Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 7162",
        dict(gpu_blocks=7162, engine_index=0),
    ),
    (
        "(APIServer pid=1) INFO 10-23 15:14:56 [loggers.py:150] 2 Engines: vllm cache_config_info with initialization after num_gpu_blocks is: 14324",
        dict(gpu_blocks=14324),
    ),
]


@pytest.mark.parametrize("line,want", CAPACITY)
def test_kv_capacity(line: str, want: dict[str, object]) -> None:
    e = event(line)
    assert isinstance(e, ev.KVCapacity)
    for k, v in want.items():
        assert getattr(e, k) == (approx(v) if isinstance(v, float) else v), k


MEMORY = [
    ("(Worker_TP0 pid=89) INFO 07-06 10:54:37 [gpu_worker.py:508] Available KV cache memory: 5.33 GiB", 5.33 * GIB),
    ("(EngineCore pid=1) INFO 07-06 10:54:37 [gpu_worker.py:437] Available KV cache memory: 6.0 GiB", 6.0 * GIB),
    ("(EngineCore pid=1) INFO 07-06 10:54:37 [gpu_worker.py:437] Available KV cache memory: 12 GiB", 12 * GIB),
    ("(EngineCore_DP0 pid=322) INFO 09-30 16:12:40 [gpu_worker.py:298] Available KV cache memory: -1.35 GiB", 0.0),
    (
        "INFO 11-20 09:13:09 worker.py:232] Memory profiling results: total_gpu_memory=79.22GiB initial_memory_usage=31.42GiB "
        "peak_torch_memory=33.90GiB memory_usage_post_profile=32.03Gib non_torch_memory=1.30GiB kv_cache_size=36.09GiB gpu_memory_utilization=0.90",
        36.09 * GIB,
    ),
    (
        "INFO 02-24 08:01:49 worker.py:267] model weights take 96.51GiB; non_torch_memory takes 0.57GiB; PyTorch activation peak "
        "memory takes 4.71GiB; the rest of the memory reserved for KV Cache is 24.04GiB.",
        24.04 * GIB,
    ),
    (
        "(Worker_TP0 pid=1805911) INFO 10-23 15:14:56 [gpu_worker.py:391] Free memory on device (139.2/139.81 GiB) on startup. "
        "Desired GPU memory utilization is (0.9, 125.83 GiB). Actual usage is 74.28 GiB for weight, 5.84 GiB for peak activation, "
        "1.12 GiB for non-torch memory, and 1.02 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
        "`--kv-cache-memory=47780087808` to fit into requested memory, or `--kv-cache-memory=61733707776` to fully utilize gpu "
        "memory. Current kv cache memory in use is 47878721024 bytes.",
        47878721024.0,
    ),
    (
        "(Worker_TP0 pid=244) INFO 08-27 12:01:58 [gpu_worker.py:640] Free memory on device (78.61/79.19 GiB) on startup. Desired "
        "GPU memory utilization is (0.92, 72.85 GiB). Actual usage is 47.33 GiB for consumed memory (weights + non-torch), 2.03 GiB "
        "for peak activation, and 0.92 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
        "`--kv-cache-memory=24241367040` (22.58 GiB) to fit into requested memory, or `--kv-cache-memory=30524536832` (28.43 GiB) "
        "to fully utilize gpu memory. Current kv cache memory in use is 22.57 GiB.",
        22.57 * GIB,
    ),
    (
        "(Worker_TP0 pid=9) INFO 10-23 15:14:29 [gpu_worker.py:280] Initial free memory 139.2 GiB, reserved 40.0 GiB memory for "
        "KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does not respect the "
        "gpu_memory_utilization config.",
        40.0 * GIB,
    ),
]


@pytest.mark.parametrize("line,want", MEMORY)
def test_kv_memory_bytes(line: str, want: float) -> None:
    e = event(line)
    assert isinstance(e, ev.KVMemory) and e.kv_bytes == approx(want)


WEIGHTS = [
    ("INFO 07-03 23:20:41 model_runner.py:146] Loading model weights took 65.7409 GB", 65.7409 * GIB, None),
    ("INFO 03-21 16:41:02 [gpu_model_runner.py:1176] Model loading took 43.9342 GB and 41.729184 seconds", 43.9342 * GIB, 41.729184),
    (
        "(Worker_TP0 pid=1) INFO 10-23 15:13:03 [gpu_model_runner.py:2392] Model loading took 74.2812 GiB and 215.969277 seconds",
        74.2812 * GIB,
        215.969277,
    ),
    (
        "(EngineCore pid=1) INFO 05-01 17:08:54 [gpu_model_runner.py:4389] Model loading took 17.62 GiB memory and 20.695716 seconds",
        17.62 * GIB,
        20.695716,
    ),
]


@pytest.mark.parametrize("line,gib,seconds", WEIGHTS)
def test_weights_loaded(line: str, gib: float, seconds: float | None) -> None:
    e = event(line)
    assert isinstance(e, ev.WeightsLoaded) and e.weight_bytes == approx(gib)
    assert e.seconds == (None if seconds is None else approx(seconds))


# ---------------------------------------------------------------------------------------------
# hybrid layout and mamba limits

HYBRID = [
    (
        "(APIServer pid=1804347) INFO 10-23 15:09:12 [config.py:390] Setting attention block size to 544 tokens to ensure that attention page size is >= mamba page size.",
        dict(block_size=544),
    ),
    (
        "(EngineCore pid=142) INFO 11-01 10:00:20 [interface.py:536] Setting attention block size to 768 tokens so the quantized primary KV page covers the higher-precision padded-spec page.",
        dict(block_size=768),
    ),
    (
        "(Worker_TP0 pid=120) INFO 09-24 10:20:21 [xpu.py:311] [XPU]Setting attention block size to 1024 tokens to ensure multiple of 64, set mamba_page_size_padded to 1048576 bytes accordingly, before was 1032192 bytes.",
        dict(block_size=1024),
    ),
    (
        "(Worker_TP0 pid=120) INFO 11-01 10:20:21 [xpu.py:311] [XPU]Setting attention block size to 2048 tokens to ensure multiple of 64.",
        dict(block_size=2048),
    ),
    (
        "(APIServer pid=1804347) INFO 10-23 15:09:12 [config.py:411] Padding mamba page size by 1.49% to ensure that mamba page size and attention page size are exactly equal.",
        dict(padding_ratio=0.0149, block_size=None),
    ),
    (
        "(EngineCore_DP0 pid=212) WARNING 11-20 13:01:11 [kv_cache_utils.py:982] Add 1 padding layers, may waste at most 4.35% KV cache memory",
        dict(padding_layers=1),
    ),
    (
        "(APIServer pid=1) WARNING 05-01 17:08:18 [config.py:367] Mamba cache mode is set to 'align' for Qwen3_5ForConditionalGeneration by default when prefix caching is enabled",
        dict(mamba_cache_mode="align"),
    ),
    (
        "(APIServer pid=1) WARNING 05-01 17:08:18 [config.py:367] Mamba cache mode is set to 'align' for Qwen3_5ForConditionalGeneration by default when prefix caching and speculative decoding are enabled",
        dict(mamba_cache_mode="align"),
    ),
    (
        "(APIServer pid=1) INFO 08-27 12:00:10 [config.py:378] Mamba cache mode is set to 'all' for KimiLinearForCausalLM by default when prefix caching is enabled",
        dict(mamba_cache_mode="all"),
    ),
    (
        "(APIServer pid=1) WARNING 03-24 09:10:09 [config.py:367] Mamba cache mode is set to 'none' when prefix caching is disabled",
        dict(mamba_cache_mode="none"),
    ),
    (
        "(APIServer pid=1) WARNING 03-24 09:10:09 [config.py:371] Hybrid or mamba-based model detected without support for prefix caching with Mamba cache 'all' mode: falling back to 'align' mode.",
        dict(mamba_cache_mode="align"),
    ),
    (
        "(APIServer pid=1) INFO 07-02 08:15:09 [config.py:395] Warning: Prefix caching in Mamba cache 'align' mode is currently enabled. Its support for Mamba layers is experimental. Please report any issues you may observe.",
        dict(mamba_cache_mode="align"),
    ),
    (
        "[node-7] (APIServer pid=1) INFO 10-05 07:30:10 [config.py:412] Updating mamba_ssm_cache_dtype to 'float32' for NemotronH model",
        dict(mamba_ssm_dtype="float32"),
    ),
    (
        "(APIServer pid=1) WARNING 05-01 17:08:18 [qwen3_5.py:82] Qwen3.5 model specifies mamba_ssm_dtype='float32' in its config, but --mamba-ssm-cache-dtype='float16' was passed. Using the user-specified value.",
        dict(mamba_ssm_dtype="float16"),
    ),
]


@pytest.mark.parametrize("line,want", HYBRID)
def test_hybrid_layout(line: str, want: dict[str, object]) -> None:
    e = event(line)
    assert isinstance(e, ev.HybridLayout)
    for k, v in want.items():
        assert getattr(e, k) == (approx(v) if isinstance(v, float) else v), k


EXCEEDED = [
    (
        "(EngineCore pid=190) ERROR 05-03 09:01:13 [core.py:1099] ValueError: max_num_seqs (512) exceeds available Mamba cache blocks (300). Each decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 300 or increase gpu_memory_utilization.",
        512,
        300,
    ),
    (
        "ValueError: max_num_seqs (512) exceeds available Mamba cache blocks (300). Each decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 300 or increase gpu_memory_utilization.",
        512,
        300,
    ),
    (
        "(APIServer pid=1) WARNING 03-24 09:10:09 [compilation.py:1204] Capping cudagraph capture sizes from max 512 to 280 to fit Mamba cache blocks (283 blocks available). This limits the maximum batch size that can use CUDA graphs. To increase this limit, reduce max_num_seqs or increase available GPU memory.",
        None,
        283,
    ),
    (
        "(EngineCore pid=188) WARNING 03-24 09:11:05 [compilation.py:1219] No valid cudagraph capture sizes remain after capping to Mamba cache blocks (0). The smallest capture size was 1. Disabling cudagraph capture. Consider reducing max_num_seqs or increasing available GPU memory.",
        None,
        0,
    ),
]


@pytest.mark.parametrize("line,seqs,blocks", EXCEEDED)
def test_mamba_blocks_exceeded(line: str, seqs: int | None, blocks: int) -> None:
    e = event(line)
    assert e == ev.MambaBlocksExceeded(max_num_seqs=seqs, blocks=blocks)


@pytest.mark.parametrize(
    "line",
    [
        "(EngineCore_DP0 pid=200) ERROR 09-30 16:03:11 [core.py:708] ValueError: To serve at least one request with the models's max seq len (262144), (5.88 GiB KV cache is needed, which is larger than the available KV cache memory (2.12 GiB). Based on the available memory, the estimated maximum model length is 94208. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
        "ValueError: To serve at least one request with the model's max seq len (131072), (16.0 GiB KV cache is needed, which is larger than the available KV cache memory (9.1 GiB). Based on the available memory, the estimated maximum model length is 74528. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
        "(EngineCore_DP0 pid=322) ERROR 09-30 16:12:41 [core.py:708] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (20544). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
    ],
)
def test_kv_pool_exhausted_errors(line: str) -> None:
    assert event(line) == ev.PoolExhausted(pool="kv", fatal=True)


# ---------------------------------------------------------------------------------------------
# preemption (V0) and the fake quotes that must not match


def test_v0_preemption() -> None:
    line = (
        "WARNING 08-20 10:18:39 scheduler.py:1141] Sequence group 147 is preempted by PreemptionMode.SWAP mode because there is "
        "not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or "
        "tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=51"
    )
    assert event(line) == ev.Preemption(mode="swap", cumulative=51)


@pytest.mark.parametrize(
    "line",
    [
        "WARNING 08-20 10:18:39 scheduler.py:1141] Sequence group 147 is preempted in PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can impact the end-to-end performance.",
        "(APIServer pid=1) INFO 11-01 10:00:00 [scheduler.py:1] Preempted request chatcmpl-1 has been resumed!",
    ],
)
def test_fake_preemption_quotes_are_ignored(line: str) -> None:
    r = one(line)
    assert r.outcome == ev.IGNORED and r.event is None


# ---------------------------------------------------------------------------------------------
# configuration and banners


def test_non_default_args_literal() -> None:
    line = (
        "(APIServer pid=1) INFO 05-01 17:08:10 [utils.py:233] non-default args: {'model_tag': 'Qwen/Qwen3.6-27B', 'max_model_len': "
        "32768, 'max_num_seqs': 2, 'gpu_memory_utilization': 0.8, 'kv_cache_dtype': 'fp8', 'enable_prefix_caching': True, "
        "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}, 'api_key': '***'}"
    )
    e = event(line)
    assert e.kind == "non_default_args"
    assert e.args == {
        "model_tag": "Qwen/Qwen3.6-27B",
        "max_model_len": 32768,
        "max_num_seqs": 2,
        "gpu_memory_utilization": 0.8,
        "kv_cache_dtype": "fp8",
        "enable_prefix_caching": True,
        "speculative_config": {"method": "mtp", "num_speculative_tokens": 3},
        "api_key": "***",
    }


def test_non_default_args_with_object_reprs_falls_back_per_key() -> None:
    line = (
        "(APIServer pid=1) INFO 08-27 12:00:02 [api_utils.py:241] non-default args: {'model': 'moonshotai/Kimi-Linear-48B-A3B-Instruct', "
        "'tensor_parallel_size': 2, 'attention_config': AttentionConfig(backend=<AttentionBackendEnum.FLASHINFER_MLA: "
        "'FLASHINFER_MLA'>, flash_attn_version=None), 'max_num_seqs': 128, 'block_size': 256, 'note': 'a, b'}"
    )
    e = event(line)
    assert e.args["model"] == "moonshotai/Kimi-Linear-48B-A3B-Instruct"
    assert e.args["tensor_parallel_size"] == 2 and e.args["max_num_seqs"] == 128 and e.args["block_size"] == 256
    assert e.args["attention_config"].startswith("AttentionConfig(backend=<AttentionBackendEnum.FLASHINFER_MLA")
    assert e.args["note"] == "a, b"


ENGINE_CONFIGS = [
    (
        "v0.4.3-v0.log",
        "0.4.3",
        dict(
            model="meta-llama/Meta-Llama-3-70B-Instruct",
            max_seq_len=8192,
            tensor_parallel_size=2,
            served_model_name="meta-llama/Meta-Llama-3-70B-Instruct",
        ),
    ),
    ("v0.7.0.log", "0.7.0", dict(max_seq_len=16384, kv_cache_dtype="auto", device_config="cuda", enable_prefix_caching=True)),
    ("v0.7.3-v0.log", "0.7.3", dict(model="ai21labs/AI21-Jamba-1.5-Mini", use_cached_outputs=True, quantization=None)),
    (
        "v0.10.2-qwen3-next.log",
        "0.10.2",
        dict(
            model="Qwen/Qwen3-Next-80B-A3B-Instruct",
            max_seq_len=262144,
            tensor_parallel_size=2,
            pipeline_parallel_size=1,
            data_parallel_size=1,
            kv_cache_dtype="auto",
            dtype="torch.bfloat16",
            quantization=None,
            enable_prefix_caching=False,
            served_model_name="Qwen/Qwen3-Next-80B-A3B-Instruct",
            speculative_config="SpeculativeConfig(method='qwen3_next_mtp', model='Qwen/Qwen3-Next-80B-A3B-Instruct', num_spec_tokens=2)",
        ),
    ),
    ("v0.20.0-qwen3.6.log", "0.20.0", dict(kv_cache_dtype="fp8", max_seq_len=32768, enable_prefix_caching=True, quantization_config=None)),
    ("dp2.log", "0.11.0", dict(data_parallel_size=2, speculative_config=None)),
]


@pytest.mark.parametrize("name,version,want", ENGINE_CONFIGS)
def test_engine_config_dump(name: str, version: str, want: dict[str, object]) -> None:
    lines = [x for x in (FIX / name).read_text(encoding="utf-8").splitlines() if "LLM engine (v" in x]
    e = event(lines[0])
    assert e.kind == "engine_config" and e.version == version
    for k, v in want.items():
        assert e.args[k] == v, k


@pytest.mark.parametrize(
    "line,kind,args",
    [
        (
            "(APIServer pid=1) DEBUG 11-20 13:00:11 [arg_utils.py:1714] Defaulting max_num_seqs to 256 for OPENAI_API_SERVER usage context.",
            "max_num_seqs_default",
            {"max_num_seqs": 256},
        ),
        (
            "DEBUG 06-12 09:00:13 [arg_utils.py:1562] Setting max_num_seqs to 1024 for LLM_CLASS usage context.",
            "max_num_seqs_default",
            {"max_num_seqs": 1024},
        ),
        ("(APIServer pid=1) INFO 10-23 15:09:10 [__init__.py:1815] Using max model len 262144", "max_model_len", {"max_model_len": 262144}),
        (
            "(APIServer pid=1) INFO 11-20 13:00:11 [cache.py:180] Using fp8 data type to store kv cache. It reduces the GPU memory footprint and boosts the performance. Meanwhile, it may cause accuracy drop without a proper scaling factor.",
            "kv_cache_dtype",
            {"kv_cache_dtype": "fp8"},
        ),
    ],
)
def test_small_config_lines(line: str, kind: str, args: dict[str, object]) -> None:
    assert event(line) == ev.ServerConfig(kind=kind, args=args)


@pytest.mark.parametrize(
    "line,want",
    [
        ("INFO 07-03 23:19:02 api_server.py:177] vLLM API server version 0.4.3", ev.ServerStarting(version="0.4.3")),
        (
            "(APIServer pid=1) INFO 03-24 09:10:01 [utils.py:302] vLLM server version 0.18.0, serving model Qwen/Qwen3.5-35B-A3B",
            ev.ServerStarting(version="0.18.0", model="Qwen/Qwen3.5-35B-A3B"),
        ),
        (
            "(APIServer pid=1) INFO 05-01 17:08:10 [utils.py:299]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.20.0",
            ev.ServerStarting(version="0.20.0"),
        ),
        (
            "(APIServer pid=1) INFO 05-01 17:08:10 [utils.py:299]   █▄█▀ █     █     █     █  model   Qwen/Qwen3.6-27B",
            ev.ServerStarting(model="Qwen/Qwen3.6-27B"),
        ),
        ("INFO 03-21 16:41:44 [api_server.py:1024] Starting vLLM API server on http://0.0.0.0:8000", ev.ServerReady()),
        ("(APIServer pid=1) INFO 10-23 15:14:57 [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:8000", ev.ServerReady()),
        ("(APIServer pid=1) INFO 12-03 14:01:49 [entry.py:139] Starting vLLM server on http://0.0.0.0:8000", ev.ServerReady()),
        ("(APIServer pid=1) INFO:     Application startup complete.", ev.ServerReady()),
        ("INFO:     Application startup complete.", ev.ServerReady()),
    ],
)
def test_banners(line: str, want: object) -> None:
    assert event(line) == want


# ---------------------------------------------------------------------------------------------
# irrelevant lines, robustness


@pytest.mark.parametrize(
    "line,engine",
    [
        ('(APIServer pid=1) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK', V),
        ('INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK', V),
        ('(APIServer pid=1) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK', None),
        ("(Worker_TP0 pid=1) INFO 10-23 15:14:55 [gpu_model_runner.py:3118] Graph capturing finished in 24 secs, took 1.02 GiB", V),
        ("(EngineCore pid=1) INFO 10-23 15:14:55 [kv_cache_utils.py:800] Multiplying the GPU KV cache size by the dcp_world_size 2.", V),
        ("(EngineCore pid=1) INFO 10-23 15:14:55 [kv_cache_utils.py:900] Overriding num_gpu_blocks=0 with num_gpu_blocks_override=80", V),
        # user text echoed by V0 must never become a server fact
        (
            "INFO 07-03 23:23:31 async_llm_engine.py:564] Received request cmpl-1: prompt: 'GPU KV cache size: 12 tokens, Avg prompt "
            "throughput: 1 tokens/s', params: SamplingParams(n=1), prompt_token_ids: [1, 2].",
            V,
        ),
        ("Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.63it/s]", V),
        ("", V),
    ],
)
def test_irrelevant_lines_are_ignored(line: str, engine: str | None) -> None:
    r = one(line, engine)
    assert r.outcome == ev.IGNORED and r.event is None


@pytest.mark.parametrize(
    "line",
    [
        "\x00\xff\ufffd" * 1000,
        "(" * 100_000 + "Avg prompt throughput",
        "non-default args: {" + "[" * 5000 + "}",
        "INFO 01-01 00:00:00 [x.py:1] Initializing a V1 LLM engine (v0.1) with config: " + "(" * 50_000,
        "Engine 000: Avg prompt throughput: " + "9" * 100_000,
        "(APIServer pid=1) INFO 99-99 99:99:99 [x.py:1] GPU KV cache size: 1 tokens",
        "A" * (10 * 1024 * 1024),
        "INFO 01-01 00:00:00 [x.py:1] Avg prompt throughput: " + "1.0 tokens/s, " * 800_000,
        bytes(range(256)).decode("latin-1") * 4000,
    ],
)
def test_garbage_never_raises(line: str) -> None:
    for engine in (V, None):
        r = one(line, engine)
        assert r.outcome in (ev.PARSED, ev.IGNORED, ev.UNRECOGNIZED)


# ---------------------------------------------------------------------------------------------
# fixtures: every line of every era, through the full entry point

FIXTURES = {
    "v0.4.3-v0.log": 12,
    "v0.6.4.log": 13,
    "v0.7.0.log": 8,
    "v0.7.2.log": 9,
    "v0.7.3-v0.log": 12,
    "v0.8.1.log": 9,
    "v0.8.3.log": 11,
    "v0.9.1-tp2.log": 18,
    "v0.10.2-qwen3-next.log": 22,
    "v0.11.1.log": 17,
    "v0.18.0.log": 16,
    "v0.20.0-qwen3.6.log": 20,
    "v0.24.0.log": 16,
    "v0.28.0.log": 16,
    "v0.30.0-xpu.log": 13,
    "v0.31.0.log": 16,
    "v0.33.0.log": 16,
    "v0.34.0-h200-capped.log": 50,
    "v0.34.0-32gb-auto-len.log": 40,
    "dp2.log": 19,
    "dp2-spec.log": 25,
    "colored-docker.log": 17,
    "mamba-blocks-exceeded.log": 10,
    "kv-too-small.log": 8,
    "real-excerpts.log": 20,
    "pasted-damaged-headers.log": 7,
}


def _lines(name: str) -> list[str]:
    with open(FIX / name, encoding="utf-8", newline="") as f:
        return [x.rstrip("\n") for x in f]


def test_every_fixture_is_listed() -> None:
    assert sorted(p.name for p in FIX.glob("*.log")) == sorted(FIXTURES)


@pytest.mark.parametrize("name,min_parsed", sorted(FIXTURES.items()))
def test_fixture_lines_all_recognized(name: str, min_parsed: int) -> None:
    parsed = 0
    for raw in _lines(name):
        r = one(raw)
        assert r.outcome != ev.UNRECOGNIZED, (r.reason, raw[:200])
        parsed += r.outcome == ev.PARSED
    assert parsed >= min_parsed


def test_fixture_qwen3_next_numbers() -> None:
    """The real Qwen3-Next 0.10.2 numbers, end to end (docs/formats/vllm.md#what-the-startup-numbers-mean, #state-size-per-sequence)."""
    evs = [(r.dp_rank, r.event) for r in map(one, _lines("v0.10.2-qwen3-next.log")) if r.event is not None]
    caps = [e for _, e in evs if isinstance(e, ev.KVCapacity)]
    assert [c.tokens for c in caps if c.tokens] == [973760, 973760]  # once per TP worker (0.9.1-0.11.0)
    assert [c.max_concurrency for c in caps if c.max_concurrency] == [14.77, 14.77]
    assert [c.gpu_blocks for c in caps if c.gpu_blocks] == [7162]
    layout = [e for _, e in evs if isinstance(e, ev.HybridLayout)]
    assert layout[0].block_size == 544 and layout[1].padding_ratio == approx(0.0149)
    mem = [e.kv_bytes for _, e in evs if isinstance(e, ev.KVMemory)]
    assert mem[-1] == 47878721024.0 and mem[0] == approx(44.59 * GIB)


def test_fixture_colored_docker_prefixes() -> None:
    rs = [one(x) for x in _lines("colored-docker.log")]
    stats = [r for r in rs if isinstance(r.event, ev.BatchStats)]
    assert [s.event.kv_usage for s in stats] == [approx(0.093), approx(0.62)]
    assert all(r.engine == V for r in rs)
    # docker logs -t: the collector's year (2026) and the vLLM header's MM-DD give the timestamp
    assert stats[1].ts is not None
    assert any(isinstance(r.event, ev.KVMemory) and r.event.kv_bytes == approx(54.88 * GIB) for r in rs)


def test_fixture_dp2_ranks() -> None:
    rs = [one(x) for x in _lines("dp2.log")]
    stats = {r.dp_rank: r.event for r in rs if isinstance(r.event, ev.BatchStats)}
    assert stats["0"].running == 9 and stats["1"].running == 8 and stats["1"].queued == 1
    tokens = {r.dp_rank: r.event.tokens for r in rs if isinstance(r.event, ev.KVCapacity) and r.event.tokens}
    assert tokens == {"0": 428880, "1": 427136}
    blocks = {r.dp_rank: r.event.gpu_blocks for r in rs if isinstance(r.event, ev.KVCapacity) and r.event.gpu_blocks}
    assert blocks == {"0": 26805, "1": 26696}


# --------------------------------------------------------------------------------------------
# damaged headers: the message decides, what survives of the header is kept

KV_MEM = "Available KV cache memory: 21.12 GiB"


@pytest.mark.parametrize(
    "head,dp,has_ts",
    [
        pytest.param("[gpu_worker.py:298] ", "0", False, id="file-only"),
        pytest.param("INFO [gpu_worker.py:298] ", "0", False, id="level-and-file"),
        pytest.param("09-30 16:03:12 [gpu_worker.py:298] ", "0", True, id="time-and-file"),
        pytest.param("(EngineCore_DP1 pid=200) [gpu_worker.py:298] ", "1", False, id="process-and-file"),
        pytest.param("(EngineCore_DP1 pid=200) 09-30 16:03:12 [gpu_worker.py:298] ", "1", True, id="process-time-file"),
        pytest.param("INFO 09-30 16:03:12 ", "0", True, id="file-stripped"),
    ],
)
@pytest.mark.parametrize("engine", [None, V])
def test_damaged_vllm_headers_are_read_by_the_message(head: str, dp: str, has_ts: bool, engine: str | None) -> None:
    r = one(head + KV_MEM, engine)
    assert r.outcome == "parsed" and r.engine == V and type(r.event) is ev.KVMemory
    assert r.dp_rank == dp and (r.ts is not None) == has_ts
    stats = (
        "Engine 000: Avg prompt throughput: 1872.3 tokens/s, Avg generation throughput: 5.4 tokens/s, Running: 12 reqs, "
        "Waiting: 3 reqs, GPU KV cache usage: 87.5%, Prefix cache hit rate: 45.0%"
    )
    r = one(head + stats, engine)
    assert type(r.event) is ev.BatchStats and r.event.running == 12


def test_damaged_vllm_header_fixture() -> None:
    lines = (pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "vllm" / "pasted-damaged-headers.log").read_text().splitlines()
    assert all(one(ln, None).outcome == "parsed" for ln in lines)
