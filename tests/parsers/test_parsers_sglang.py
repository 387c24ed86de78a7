"""SGLang message parser: real-format lines through the full ``parsers.parse_line`` entry point.

Lines are real ones (verbatim from the SGLang log-format reference, see the last test) or rendered
from the format strings of each release (docs/formats/sglang.md), so a failure here means format drift or a parser bug.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from parsers import events as ev
from parsers import parse_line
from parsers.events import IGNORED, PARSED, UNRECOGNIZED
from parsers.sglang import parse_message

GIB = 1024**3
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sglang"


def parsed(line: str, engine: str | None = None) -> ev.Line:
    r = parse_line(line, engine=engine)
    assert r.outcome == PARSED, (r.outcome, r.reason, line)
    return r


# --------------------------------------------------------------------------------------------
# batch lines, every release variant (docs/formats/sglang.md#fields, #older-shapes)

BATCH_CASES = [
    pytest.param(
        "[2025-05-31 18:31:21 DP6 TP6] Decode batch. #running-req: 64, #token: 38912, token usage: 0.04, "
        "cuda graph: True, gen throughput (token/s): 1893.41, #queue-req: 0",
        dict(kind="decode", running=64, kv_used_tokens=38912, kv_usage=0.04, cuda_graph=True, gen_throughput=1893.41, queued=0),
        id="0.4.6-decode-dot",
    ),
    pytest.param(
        "[2025-05-31 18:31:20 TP0] Prefill batch. #new-seq: 16, #new-token: 8192, #cached-token: 1024, token usage: 0.01, "
        "#running-req: 0, #queue-req: 48",
        dict(kind="prefill", new_seqs=16, new_tokens=8192, cached_tokens=1024, kv_usage=0.01, running=0, queued=48),
        id="0.4.6-prefill-dot",
    ),
    pytest.param(
        "[2025-08-12 09:20:05 TP0 EP0] Decode batch. #running-req: 16, #token: 21873, token usage: 0.01, cuda graph: True, "
        "gen throughput (token/s): 1604.22, #queue-req: 0, ",
        dict(kind="decode", running=16, kv_used_tokens=21873, queued=0, gen_throughput=1604.22),
        id="0.4.10-trailing-comma",
    ),
    pytest.param(
        "[2025-10-09 14:52:12 TP0] Decode batch. #running-req: 24, #token: 28412, token usage: 0.03, accept len: 2.71, "
        "cpu graph: False, gen throughput (token/s): 1903.55, #queue-req: 0, ",
        dict(accept_length=2.71, accept_rate=None, cuda_graph=False),
        id="0.5.3-spec-cpu-graph",
    ),
    pytest.param(
        "[2025-10-18 09:12:33 TP0] Decode batch. #running-req: 46, #full token: 43380, full token usage: 0.05, mamba num: 141, "
        "mamba usage: 0.82, accept len: 2.93, accept rate: 0.73, cuda graph: True, gen throughput (token/s): 2712.04, #queue-req: 11, ",
        dict(running=46, kv_used_tokens=43380, kv_usage=0.05, mamba_used=141, mamba_usage=0.82, accept_rate=0.73, queued=11),
        id="0.5.3.post3-mamba",
    ),
    pytest.param(
        "[2025-10-27 16:40:02 TP0 EP0] Prefill batch [18211], #new-seq: 1, #new-token: 4096, #cached-token: 0, "
        "full token usage: 0.04, mamba usage: 0.26, #running-req: 36, #queue-req: 2, ",
        dict(kind="prefill", forward_iter=18211, mamba_usage=0.26, mamba_used=None, running=36, queued=2),
        id="0.5.4-forward-iter-prefill",
    ),
    pytest.param(
        "[2025-10-27 16:40:05 TP0 EP0] Decode batch [18240], #running-req: 39, #full token: 40112, full token usage: 0.05, "
        "mamba num: 117, mamba usage: 0.28, cuda graph: True, gen throughput (token/s): 2054.88, #queue-req: 0, ",
        dict(kind="decode", forward_iter=18240, mamba_used=117),
        id="0.5.4-forward-iter-decode",
    ),
    pytest.param(
        "[2026-02-26 08:02:47 TP0 EP0] Prefill batch, #new-seq: 5, #new-token: 8192, #cached-token: 3072, full token usage: 0.10, "
        "mamba usage: 0.71, #running-req: 190, #queue-req: 4, input throughput (token/s): 21734.90, npu graph: False",
        dict(input_throughput=21734.90, cuda_graph=False, queued=4),
        id="0.5.9-prefill-graph-last",
    ),
    pytest.param(
        "[2026-04-14 16:21:42 TP0] Decode batch, #running-req: 62, #full token: 70123, full token usage: 0.21, mamba num: 186, "
        "mamba usage: 1.00, cuda graph: True, gen throughput (token/s): 1402.55, #queue-req: 14, est. decode TFLOPS/s (per GPU): 37.80, "
        "est. read BW (GB/s per GPU): 1611.02, est. write BW (GB/s per GPU): 3.95",
        dict(mamba_usage=1.0, mamba_used=186, queued=14, gen_throughput=1402.55),
        id="0.5.10-mfu-suffix",
    ),
    pytest.param(
        "[2026-05-06 13:10:08 TP0 EP0] Prefill batch, #new-seq: 2, #new-token: 8192, #cached-token: 4096, full token usage: 0.06, "
        "mamba usage: 0.91, #running-req: 61, #queue-req: 9, #pending-token: 30544, musa graph: False, "
        "input throughput (token/s): 15342.80, fwd occupancy: 97.31%",
        dict(pending_tokens=30544, input_throughput=15342.80, cuda_graph=False),
        id="0.5.11-pending-occupancy",
    ),
    pytest.param(
        "[2026-08-14 08:17:30] Prefill batch, #new-seq: 3, #new-token: 256, #cached-token: 576, full token usage: 0.20, "
        "mamba usage: 0.20, #running-req: 1, #queue-req: 2, #pending-token: 64, cuda graph: False, input throughput (token/s): 107534.31",
        dict(
            kind="prefill",
            new_seqs=3,
            new_tokens=256,
            cached_tokens=576,
            kv_usage=0.20,
            mamba_usage=0.20,
            running=1,
            queued=2,
            pending_tokens=64,
            cuda_graph=False,
            input_throughput=107534.31,
        ),
        id="0.5.23-prefill-rendered",
    ),  # fmt: skip
    pytest.param(
        "[2026-08-14 08:17:30] Decode batch, #running-req: 4, #full token: 1051, full token usage: 0.20, mamba num: 16, "
        "mamba usage: 0.20, cuda graph: True, gen throughput (token/s): 453.12, #queue-req: 0",
        dict(
            kind="decode",
            running=4,
            kv_used_tokens=1051,
            kv_usage=0.20,
            mamba_used=16,
            mamba_usage=0.20,
            cuda_graph=True,
            gen_throughput=453.12,
            queued=0,
        ),
        id="0.5.23-decode-rendered",
    ),  # fmt: skip
    pytest.param(
        "[2026-10-10 12:30:16] Decode batch, #running-req: 23, #full token: 39017, full token usage: 0.03, mamba num: 115, "
        "mamba usage: 0.98, cuda graph: True, gen throughput (token/s): 1530.27, #queue-req: 7, fwd occupancy: 84.55%, "
        "fwd+idle occupancy: 91.02%",
        dict(mamba_used=115, queued=7),
        id="0.5.23-fwd-idle-occupancy",
    ),
    pytest.param(
        "[2026-06-01 10:00:00 TP0] Decode batch, #running-req: 5, #full token: 900, full token usage: 0.10, #swa token: 400, "
        "swa token usage: 0.05, mamba num: 15, mamba usage: 0.30, accept len: 3.10, accept rate: 0.70, cap len: 4.00, "
        "block accept len: 3.05, cuda graph: True, gen throughput (token/s): 210.00, #queue-req: 0",
        dict(swa_used_tokens=400, swa_usage=0.05, mamba_used=15, accept_length=3.10),
        id="0.5.16-swa-ssm-spec-cap-len",
    ),
    pytest.param(
        "[2026-05-20 03:40:20 TP0 EP0] Decode batch, #running-req: 212, #full token: 301120, full token usage: 0.39, mamba num: 212, "
        "mamba usage: 0.41, pre-allocated usage: 0.04, #prealloc-req: 6, #transfer-req: 3, #retracted-req: 0, cuda graph: True, "
        "gen throughput (token/s): 8810.36, #queue-req: 0",
        dict(running=212, mamba_used=212, kv_usage=0.39),
        id="pd-decode",
    ),
    pytest.param(
        "[2026-06-01 10:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 100, #cached-token: 0, token usage: 0.01, "
        "#running-req: 2, #queue-req: 3, #pending-token: 0, #bootstrap-req: 1, #inflight-req: 2, #optimistic-req: 0, "
        "cuda graph: False, input throughput (token/s): 900.00",
        dict(running=2, queued=3, kv_usage=0.01),
        id="pd-prefill",
    ),
    pytest.param(
        "[2026-06-01 10:00:00 TP0] Decode batch, #running-req: 8, #gpu token: 5000, gpu token usage: 0.40, #cpu token: 90000, "
        "cpu token usage: 0.10, cuda graph: True, gen throughput (token/s): 300.00, #queue-req: 0",
        dict(kv_used_tokens=5000, kv_usage=0.40),
        id="hisparse",
    ),
    pytest.param(
        "[2026-06-01 10:00:00 TP0] Decode batch, #running-req: 8, #full token: 700, full token usage: 0.07, #gpu token: 5000, "
        "gpu token usage: 0.40, cuda graph: True, gen throughput (token/s): 300.00, #queue-req: 0",
        dict(kv_used_tokens=700, kv_usage=0.07),
        id="hisparse-not-over-full",
    ),
    pytest.param(
        "[2026-06-01 10:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 30, #cached-token: 0, token usage: 0.01, "
        "#mamba-slot: 3/48, mamba usage: 0.06, #running-req: 1, #queue-req: 0, cuda graph: False, input throughput (token/s): 12.00",
        dict(mamba_used=3, mamba_usage=0.06),
        id="freetoken-lookalike",
    ),
]


@pytest.mark.parametrize(("line", "expect"), BATCH_CASES)
def test_batch_lines(line: str, expect: dict) -> None:
    e = parsed(line).event
    assert isinstance(e, ev.BatchStats)
    for k, v in expect.items():
        assert getattr(e, k) == pytest.approx(v) if isinstance(v, float) else getattr(e, k) == v, k


def test_real_mtp_decode_line_all_fields() -> None:
    r = parsed(
        "[2026-07-30 13:35:13 TP0] Decode batch, #running-req: 1, #full token: 257, full token usage: 0.00, mamba num: 3, "
        "mamba usage: 0.03, accept len: 2.83, accept rate: 0.61, cuda graph: True, gen throughput (token/s): 93.65, #queue-req: 0"
    )
    assert r.event == ev.BatchStats(
        kind="decode",
        running=1,
        queued=0,
        kv_usage=0.0,
        kv_used_tokens=257,
        mamba_usage=0.03,
        mamba_used=3,
        gen_throughput=93.65,
        accept_length=2.83,
        accept_rate=0.61,
        cuda_graph=True,
    )
    assert (r.engine, r.dp_rank, r.tp_rank) == ("sglang", "0", 0)
    assert r.ts == time.mktime((2026, 7, 30, 13, 35, 13, 0, 0, -1))


@pytest.mark.parametrize(
    "line",
    [
        "[2026-08-14 08:17:30] Decode batch #running-req 3, #queue-req 0",  # header drift
        "[2026-08-14 08:17:30] Decode batch, #running-req: many, #queue-req: 0",  # value drift
        "[2026-08-14 08:17:30] Decode batch, running requests = 4; queued = 0",  # no known key left
        "[2026-08-14 08:17:30] Prefill batch, ",
        "[2026-08-14 08:17:30] Mamba Cache is allocated. conv_state: 0.10GB",
        "[2026-08-14 08:17:30] KV Cache is allocated. tokens=100",
        "[2026-08-14 08:17:30] max_running_requests is capped to nine by the mamba state cache",
        "[2026-08-14 08:17:30] max_total_num_tokens=N/A, max_running_requests=62",
        "[2026-08-14 08:17:30] KV cache pool is full. Retract requests. retracted=2",
        "[2026-08-14 08:17:30] GDN ReplaySSM ring buffers allocated (record_len=x): d=1",
        "[2026-08-14 08:17:30] server_args=Namespace(model_path='x')",
        "[2026-08-14 08:17:30] Load weight end. oops",
        "[2026-08-14 08:17:30] SWAKVPool mem usage: lots",
        "[2026-08-14 08:17:30] Decode batch, " + "#running-req: 1, " * 10000,  # absurdly long
    ],
)
def test_marked_but_mangled_lines_are_unrecognized(line: str) -> None:
    r = parse_line(line)
    assert r.outcome == UNRECOGNIZED, r
    assert r.reason


# --------------------------------------------------------------------------------------------
# prefix handling via parse_line: tag orders of every era, ms, junk / Ray / collector prefixes

DECODE = "Decode batch, #running-req: 7, #full token: 100, full token usage: 0.01, mamba num: 21, mamba usage: 0.11, cuda graph: True, gen throughput (token/s): 99.00, #queue-req: 2"


@pytest.mark.parametrize(
    ("prefix", "dp", "tp", "pp"),
    [
        ("[2026-03-14 04:59:11] ", "0", None, None),  # tp1, no DP: no tag at all
        ("[2025-05-31 18:31:21 DP6 TP6] ", "6", 6, None),  # <=0.4.6 DP TP PP
        ("[2025-05-31 18:31:21 DP1 TP3 PP1] ", "1", 3, 1),
        ("[2025-12-26 23:02:39 DP1 TP1 EP1] ", "1", 1, None),  # 0.4.10-0.5.4: DP TP EP PP
        ("[2025-10-01 10:00:00 DP1 TP4 EP4 PP1] ", "1", 4, 1),
        ("[2026-01-05 10:00:00 DP1 PP1 TP4 EP4] ", "1", 4, 1),  # 0.5.5-0.5.8: DP PP TP EP
        ("[2026-08-23 09:05:37 TP0 EP0] ", "0", 0, None),
        ("[2026-08-23 09:05:37 DP3 PP0 ATTN_CP1 MOE_DP2 TP5 EP5] ", "3", 5, 0),  # >=0.5.9
        ("[2026-04-14 16:08:49.123 TP0] ", "0", 0, None),  # SGLANG_LOG_MS
        ("(SchedulerActor pid=123, ip=1.2.3.4) [2026-04-14 16:08:49 DP1 TP2] ", "1", 2, None),  # Ray
        ("/var/log/sglang/server.log:1234:[2026-04-14 16:08:49 TP0] ", "0", 0, None),  # grep -n paste
        ("sglang-1  | [2026-04-14 16:08:49 DP2 TP2] ", "2", 2, None),  # docker compose
        ("2026-04-14T16:08:49.123456789Z stdout F [2026-04-14 16:08:49 TP1] ", "0", 1, None),  # CRI
    ],
)
def test_tags_and_prefixes(prefix: str, dp: str, tp: int | None, pp: int | None) -> None:
    r = parsed(prefix + DECODE)
    assert (r.dp_rank, r.tp_rank, r.pp_rank) == (dp, tp, pp)
    assert r.event.running == 7 and r.event.mamba_used == 21 and r.event.queued == 2


def test_ms_timestamp() -> None:
    r = parsed("[2026-01-28 10:12:25.207 TP0] " + DECODE)
    assert r.ts == pytest.approx(time.mktime((2026, 1, 28, 10, 12, 25, 0, 0, -1)) + 0.207)


# --------------------------------------------------------------------------------------------
# retraction / exhaustion (docs/formats/sglang.md#retraction-and-mamba-exhaustion)

RETRACT_CASES = [
    pytest.param(
        "[2025-05-31 18:42:10 TP0] Decode out of memory happened. #retracted_reqs: 3, #new_token_ratio: 0.4102 -> 0.6153",
        ev.Retraction(3, new_token_ratio_before=0.4102, new_token_ratio_after=0.6153),
        id="0.4.6",
    ),
    pytest.param(
        "[2025-08-12 10:02:44 TP0 EP0] KV cache pool is full. Retract requests. #retracted_reqs: 7, #new_token_ratio: 0.3391 -> 0.5672",
        ev.Retraction(7, new_token_ratio_before=0.3391, new_token_ratio_after=0.5672),
        id="0.4.10",
    ),
    pytest.param(
        "[2025-10-18 09:12:38 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #aborted_retracted_reqs: 0, "
        "#new_token_ratio: 0.1827 -> 0.4411",
        ev.Retraction(1, aborted=0, new_token_ratio_before=0.1827, new_token_ratio_after=0.4411),
        id="0.5.3.post3-aborted",
    ),
    pytest.param(
        "[2026-09-13 16:06:07] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 646, "
        "#new_token_ratio: 0.0980 -> 0.3487",
        ev.Retraction(1, new_tokens_gained=646, new_token_ratio_before=0.098, new_token_ratio_after=0.3487),
        id="0.5.18-real",
    ),
    pytest.param(
        "[2026-05-06 13:10:13 TP0 EP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 8192, "
        "#mamba_num_gained: 6, #new_token_ratio: 0.1043 -> 0.4312",
        ev.Retraction(2, new_tokens_gained=8192, mamba_num_gained=6, new_token_ratio_before=0.1043, new_token_ratio_after=0.4312),
        id="0.5.11-mamba",
    ),
    pytest.param(
        "[2026-02-26 08:02:53 TP0 EP0] Testing retraction. #retracted_reqs: 1, #new_tokens_gained: 780",
        ev.Retraction(1, new_tokens_gained=780, test=True),
        id="test-retract",
    ),
    pytest.param(
        "[2026-02-26 08:02:53] Testing retraction. #retracted_reqs: 1, #new_tokens_gained: 780, #mamba_num_gained: 3",
        ev.Retraction(1, new_tokens_gained=780, mamba_num_gained=3, test=True),
        id="test-retract-mamba",
    ),
]


@pytest.mark.parametrize(("line", "expect"), RETRACT_CASES)
def test_retraction(line: str, expect: ev.Retraction) -> None:
    assert parsed(line).event == expect


@pytest.mark.parametrize(
    ("line", "pool", "fatal"),
    [
        ("[2025-10-01 10:00:00 TP0] Not enough space for mamba cache, try to increase --max-mamba-cache-size.", "mamba", True),
        (
            "AssertionError: Not enough space for mamba cache, try to increase --mamba-full-memory-ratio or --max-mamba-cache-size."
            " mid=3, self.mamba_pool.size=186, self.mamba_allocator.available_size()=0, len(reqs)=4",
            "mamba",
            True,
        ),
        ("AssertionError: Not enough space for mamba ping pong idx, try to increase --mamba-full-memory-ratio.", "mamba", True),
        ("[2026-01-28 11:52:31 TP0] Out of memory even after retracting all other requests in the decode batch.", "kv", False),
        ("ValueError: Failed to retract any request. No space left for only one request.", "kv", True),
        ("[2026-10-10 12:00:00] Retraction host KV pool exhausted. Aborting the request.", "kv", False),
        (
            "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed max_mamba_cache_size=0 "
            "(total_rest_memory=0.50 GB, mamba_cache_per_req=19.30 MB). Try: ...",
            "mamba",
            True,
        ),
    ],
)
def test_pool_exhausted(line: str, pool: str, fatal: bool) -> None:
    assert parsed(line, engine="sglang").event == ev.PoolExhausted(pool, fatal)


def test_assert_source_line_of_traceback_is_not_double_counted() -> None:
    line = '    assert ping_pong is not None, "Not enough space for mamba ping pong idx, try to increase --mamba-full-memory-ratio."'
    assert parse_line(line, engine="sglang").outcome == IGNORED


# --------------------------------------------------------------------------------------------
# startup capacity lines (docs/formats/sglang.md#startup-lines)


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (
            "[2026-04-14 16:08:49 TP0] Mamba Cache is allocated. max_mamba_cache_size: 186, conv_state size: 0.10GB, ssm_state size: 4.38GB ",
            ev.MambaCacheAllocated(186, 0.10 * GIB, 4.38 * GIB),
        ),
        (
            "[2025-12-29 18:33:03 TP0] Mamba Cache is allocated. max_mamba_cache_size: 85292, conv_state size: 4.88GB, ssm_state size: 0.00GB ",
            ev.MambaCacheAllocated(85292, 4.88 * GIB, 0.0),
        ),
        (  # 0.5.2: no slot count
            "[2025-09-14 11:03:17 TP0] Mamba Cache is allocated. conv_state size: 0.22GB, ssm_state size: 9.44GB ",
            ev.MambaCacheAllocated(None, 0.22 * GIB, 9.44 * GIB),
        ),
        (  # 0.5.3 speculative: no comma after ssm_state, no slot count
            "[2025-10-09 14:41:08 TP0] Mamba Cache is allocated. conv_state size: 0.03GB, ssm_state size: 1.18GB "
            "intermediate_ssm_state_cache size: 4.72GB intermediate_conv_window_cache size: 0.11GB ",
            ev.MambaCacheAllocated(None, 0.03 * GIB, 1.18 * GIB, 4.72 * GIB, 0.11 * GIB),
        ),
        (  # >=0.5.3.post3 speculative, hand-edited ' GB' with a space, no trailing space
            "[2026-07-30 13:20:40 TP0] Mamba Cache is allocated. max_mamba_cache_size: 96, conv_state size: 0.05 GB, ssm_state size: 2.26 GB "
            "intermediate_ssm_state_cache size: 0.00 GB intermediate_conv_window_cache size: 0.02 GB",
            ev.MambaCacheAllocated(96, 0.05 * GIB, 2.26 * GIB, 0.0, 0.02 * GIB),
        ),
    ],
)
def test_mamba_cache(line: str, expect: ev.MambaCacheAllocated) -> None:
    e = parsed(line).event
    assert e.slots == expect.slots
    for f in ("conv_bytes", "ssm_bytes", "intermediate_ssm_bytes", "intermediate_conv_bytes"):
        assert getattr(e, f) == pytest.approx(getattr(expect, f)), f


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (
            "[2025-12-26 23:02:03 DP0 TP0 EP0] KV Cache is allocated. #tokens: 2786325, K size: 31.89 GB, V size: 31.89 GB",
            dict(tokens=2786325, k_bytes=31.89 * GIB, v_bytes=31.89 * GIB, kv_bytes=None, dtype=None, label=None),
        ),
        (
            "[2026-10-10 11:59:41] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1226984, KV size: 9.21 GB",
            dict(tokens=1226984, kv_bytes=9.21 * GIB, k_bytes=None, dtype="torch.bfloat16", upper_bound=False),
        ),
        (
            "[2025-06-01 10:00:00 TP0] KV Cache is allocated. #tokens: 500000, KV size: 17.16 GB",  # <=0.5.1 MLA
            dict(tokens=500000, kv_bytes=17.16 * GIB, dtype=None),
        ),
        (
            "[2026-08-01 10:00:00 TP0] MiniMax MSA-v1 main NVFP4 KV Cache is allocated. dtype: torch.uint8, #tokens: 400000, KV size: 3.10 GB",
            dict(label="MiniMax MSA-v1 main NVFP4", tokens=400000, kv_bytes=3.10 * GIB, upper_bound=False),
        ),
        (
            "[2026-09-13 15:51:41] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 151221, K size: 1.15 GB, V size: 1.15 GB",
            dict(upper_bound=True, tokens=151221, k_bytes=1.15 * GIB, label=None),
        ),
        (
            "[2026-09-13 15:51:47] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 98304, KV size: 1.50 GB, avail mem=0.05 GB",
            dict(upper_bound=False, draft=False, tokens=98304, kv_bytes=1.5 * GIB),
        ),
        (
            "[2026-09-13 15:51:47] Post-capture KV sizing: draft KV cache allocated. dtype: torch.bfloat16, #tokens: 98304, KV size: 0.10 GB",
            dict(draft=True, tokens=98304, kv_bytes=0.1 * GIB, swa=False),
        ),
    ],
)
def test_kv_cache(line: str, expect: dict) -> None:
    e = parsed(line).event
    assert isinstance(e, ev.KVCacheAllocated)
    for k, v in expect.items():
        assert getattr(e, k) == (pytest.approx(v) if isinstance(v, float) else v), k


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ("[2025-11-20 13:05:51 TP0] Use Sliding window memory pool. full_layer_tokens=2374508, swa_layer_tokens=1899606", ev.SWAPool(1899606, 2374508)),
        ("[2026-03-01 10:00:00 TP0] Use sliding window memory pool. full_layer_tokens=100, swa_layer_tokens=400", ev.SWAPool(400, 100)),
        ("[2026-03-01 10:00:00 TP0] Use sliding window memory pool (all SWA). swa_layer_tokens=400", ev.SWAPool(400, None)),
        ("[2026-09-01 10:00:00] Post-capture KV sizing: full_layer_tokens=100, swa_layer_tokens=400", ev.SWAPool(400, 100)),
    ],
)  # fmt: skip
def test_swa_sizes(line: str, expect: ev.SWAPool) -> None:
    assert parsed(line).event == expect


@pytest.mark.parametrize(
    ("line", "gb"),
    [
        ("[2025-11-20 13:05:51 TP0] SWAKVPool mem usage: 58.68164175748825 GB, swa size: 1899606, full size: 2374508", 58.68164175748825),
        ("[2026-03-01 10:00:00 TP0] SWAKVPool mem usage: 58.68 GB, swa size: 1899606, full size: 2374508", 58.68),
        ("[2026-09-01 10:00:00] SWAKVPool VA upper bound: 58.68 GB, swa size: 1899606, full size: 2374508", 58.68),
    ],
)
def test_swakv_pool(line: str, gb: float) -> None:
    e = parsed(line).event
    assert (e.swa_tokens, e.full_tokens) == (1899606, 2374508)
    assert e.total_bytes == pytest.approx(gb * GIB)


def test_scheduler_summary() -> None:
    e = parsed(
        "[2026-04-14 16:09:03 TP0] max_total_num_tokens=327310, chunked_prefill_size=2048, max_prefill_tokens=16384, "
        "max_running_requests=62, context_len=262144, available_gpu_mem=3.79 GB"
    ).event
    assert e.values == {
        "max_total_num_tokens": 327310,
        "chunked_prefill_size": 2048,
        "max_prefill_tokens": 16384,
        "max_running_requests": 62,
        "context_len": 262144,
        "available_gpu_mem": pytest.approx(3.79 * GIB),
    }


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (
            "[2025-05-31 18:30:59 TP0] max_total_num_tokens=917561, chunked_prefill_size=-1, max_prefill_tokens=16384, "
            "max_running_requests=4097, context_len=32768",
            {"max_total_num_tokens": 917561, "chunked_prefill_size": -1, "max_prefill_tokens": 16384, "max_running_requests": 4097, "context_len": 32768},
        ),
        (
            "[2026-01-01 10:00:00] max_total_num_tokens=5000, max_running_requests=8, available_cpu_mem=100.00 GB",
            {"max_total_num_tokens": 5000, "max_running_requests": 8, "available_cpu_mem": 100.0 * GIB},
        ),
    ],
)  # fmt: skip
def test_scheduler_summary_variants(line: str, expect: dict) -> None:
    assert parsed(line).event.values == pytest.approx(expect)


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (
            "max_running_requests is capped to 9 by the mamba state cache (max_mamba_cache_size=47, 5 state slots per request). "
            "To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype bfloat16.",
            ev.MambaCap(9, 47, 5),
        ),
        (
            "max_running_requests reduced from the requested 74 to 26 (per dp worker), bound by mamba_state_pool "
            "(max_mamba_cache_size=131 / 5 slots per request); other limits: kv_tokens=40. To raise it: increase --mamba-full-memory-ratio",
            ev.MambaCap(26, 131, 5, requested=74),
        ),
        (
            "max_running_requests was reduced from the requested 256 to 120 (per dp worker) due to the available KV cache capacity.",
            ev.RequestCapReduced(256, 120, "kv"),
        ),
        ("Post-capture KV sizing: max_running_requests 13 -> 12", ev.RequestCapReduced(13, 12, "kv")),
    ],
)
def test_caps(line: str, expect: object) -> None:
    assert parsed("[2026-08-02 19:22:45 TP0] " + line).event == expect
    assert parse_line(line, engine="sglang").event == expect  # unprefixed paste (the #38846 issue text)


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (
            "[2026-06-30 09:40:43 TP0] GDN ReplaySSM ring buffers allocated (L=16): d=0.188GB, k=0.094GB, g=0.003GB ",
            ev.ReplaySSMBuffers(16, {"d": 0.188 * GIB, "k": 0.094 * GIB, "g": 0.003 * GIB}, None),
        ),
        (
            "[2026-06-30 09:40:43 TP0] GDN ReplaySSM ring buffers allocated (L=16): d=0.188GB, k=0.094GB, g=0.003GB "
            "rawv=0.250GB, rawk=0.125GB, beta=0.002GB ",
            ev.ReplaySSMBuffers(
                16, {"d": 0.188 * GIB, "k": 0.094 * GIB, "g": 0.003 * GIB, "rawv": 0.25 * GIB, "rawk": 0.125 * GIB, "beta": 0.002 * GIB}
            ),
        ),
        (
            "[2026-07-30 13:20:40] GDN ReplaySSM ring buffers allocated (record_len=16, fold=False): d=0.125GB, k=0.125GB, g=0.004GB ",
            ev.ReplaySSMBuffers(16, {"d": 0.125 * GIB, "k": 0.125 * GIB, "g": 0.004 * GIB}, False),
        ),
        (
            "[2026-07-30 13:20:40] GDN ReplaySSM ring buffers allocated (record_len=32, fold=True): d=0.125GB, k=0.125GB, g=0.004GB "
            "rawv=0.250GB, rawk=0.125GB, ",
            ev.ReplaySSMBuffers(32, {"d": 0.125 * GIB, "k": 0.125 * GIB, "g": 0.004 * GIB, "rawv": 0.25 * GIB, "rawk": 0.125 * GIB}, True),
        ),
    ],
)
def test_replayssm(line: str, expect: ev.ReplaySSMBuffers) -> None:
    e = parsed(line).event
    assert (e.record_length, e.fold) == (expect.record_length, expect.fold)
    assert e.buffers == pytest.approx(expect.buffers)


@pytest.mark.parametrize(
    ("msg", "expect"),
    [
        ("[unified-memory-pool] UNIFIED MEMORY POOL ENABLED -- path=Mamba hybrid (MLA full side)", ev.UnifiedMemory({}, True)),
        ("[unified-memory-pool] UNIFIED MEMORY POOL ENABLED -- path=SWA hybrid", ev.UnifiedMemory({}, True)),
        (
            "[unified-memory-pool]   total_bytes=2576980377, max_total_num_tokens=125824, max_mamba_cache_size=62, max_num_reqs=20, "
            "speculative_num_draft_tokens=None",
            ev.UnifiedMemory({"total_bytes": 2576980377, "max_total_num_tokens": 125824, "max_mamba_cache_size": 62, "max_num_reqs": 20}),
        ),
        (
            "[unified-memory-pool] UnifiedKVPool reserved VA upper bound: total_bytes=2.40 GB (=2576980377 B), 2 sub-pool(s)",
            ev.UnifiedMemory({"total_bytes": 2576980377}),
        ),
        (
            "[unified-memory-pool] UnifiedMambaTokenToKVPoolAllocator ready: full max_slots=125824 (min_slot_index=64, page_size=64, "
            "num_pages=1966), mamba max_slots=62 (min_slot_index=1), full_available=125760, mamba_available=61",
            ev.UnifiedMemory(
                {
                    "full_max_slots": 125824,
                    "full_min_slot_index": 64,
                    "full_page_size": 64,
                    "full_num_pages": 1966,
                    "mamba_max_slots": 62,
                    "mamba_min_slot_index": 1,
                    "full_available": 125760,
                    "mamba_available": 61,
                }
            ),
        ),
        (
            "[unified-memory-pool] UnifiedMambaSWATokenToKVPoolAllocator ready: chain=[mamba(up) | swa(float) | full(down)], "
            "mamba max_slots=40 (entry_bytes=1024), joint available=9000",
            ev.UnifiedMemory({"mamba_max_slots": 40, "mamba_entry_bytes": 1024, "joint_available": 9000}),
        ),
        ("[unified-memory-pool]   mamba_full_memory_ratio=0.9 governs the total budget only, not the runtime split.", ev.UnifiedMemory({"mamba_full_memory_ratio": 0.9})),
    ],
)  # fmt: skip
def test_unified_memory(msg: str, expect: ev.UnifiedMemory) -> None:
    assert parsed("[2026-07-08 18:21:33] " + msg).event == expect


def test_unified_memory_separator_is_ignored() -> None:
    r = parse_line("[2026-07-08 18:21:33] [unified-memory-pool] ============================================================")
    assert r.outcome == IGNORED


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (
            "[2026-04-14 16:08:49 TP0] Load weight end. elapsed=5.54 s, type=Qwen3_5ForConditionalGeneration, avail mem=14.08 GB, mem usage=8.85 GB.",
            ev.WeightsLoaded(8.85 * GIB, 14.08 * GIB, 5.54, "Qwen3_5ForConditionalGeneration", None),
        ),
        (
            "[2026-10-10 11:59:36] Load weight end. elapsed=329.53 s, type=BailingMoeV3ForCausalLM, quant=fp8, fmt=e4m3, avail mem=29.67 GB, mem usage=80.31 GB.",
            ev.WeightsLoaded(80.31 * GIB, 29.67 * GIB, 329.53, "BailingMoeV3ForCausalLM", "fp8"),
        ),
        (
            "[2025-12-29 18:33:03 TP0] Load weight end. type=Lfm2ForCausalLM, dtype=torch.bfloat16, avail mem=13.81 GB, mem usage=1.52 GB.",
            ev.WeightsLoaded(1.52 * GIB, 13.81 * GIB, None, "Lfm2ForCausalLM", "torch.bfloat16"),
        ),
        (
            "[2026-02-26 07:31:05 TP0 EP0] Load weight end. elapsed=43.18 s, type=Qwen3NextForCausalLM, dtype=torch.bfloat16, avail mem=40.30 GB, mem usage=37.32 GB.",
            ev.WeightsLoaded(37.32 * GIB, 40.30 * GIB, 43.18, "Qwen3NextForCausalLM", "torch.bfloat16"),
        ),
        (
            "[2026-10-10 11:59:53] Load weight end. Committed real weights after CUDA graph capture in 1.84 s (capture overlap window 9.02 s, startup overlap total 11.37 s)",
            ev.WeightsLoaded(seconds=1.84),
        ),
    ],
)  # fmt: skip
def test_weights(line: str, expect: ev.WeightsLoaded) -> None:
    e = parsed(line).event
    assert (e.model_type, e.dtype) == (expect.model_type, expect.dtype)
    for f in ("weight_bytes", "available_bytes", "seconds"):
        assert getattr(e, f) == (None if getattr(expect, f) is None else pytest.approx(getattr(expect, f))), f


def test_boot_markers() -> None:
    assert parsed("[2026-04-14 16:08:43 TP0] Load weight begin. avail mem=22.93 GB").event == ev.ServerStarting()
    assert parsed("[2026-04-14 16:09:06] The server is fired up and ready to roll!").event == ev.ServerReady()
    assert parsed("[2026-04-14 16:08:49 TP0] Using KV cache dtype: torch.float8_e4m3fn").event == ev.ServerConfig(
        "kv_cache_dtype", {"kv_cache_dtype": "torch.float8_e4m3fn"}
    )


# --------------------------------------------------------------------------------------------
# server_args, both reprs (docs/formats/sglang.md#server_args)

SERVER_ARGS_FIELDS_SAMPLE = {
    "model_path": "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "served_model_name": "qwen3-next",
    "tp_size": 4,
    "dp_size": 1,
    "pp_size": 1,
    "ep_size": 1,
    "enable_dp_attention": False,
    "mem_fraction_static": 0.85,
    "max_running_requests": None,
    "max_total_tokens": None,
    "chunked_prefill_size": -1,
    "max_prefill_tokens": 16384,
    "context_length": None,
    "page_size": 1,
    "kv_cache_dtype": "auto",
    "disable_radix_cache": False,
    "disable_overlap_schedule": False,
    "max_mamba_cache_size": None,
    "mamba_full_memory_ratio": 0.9,
    "mamba_ssm_dtype": "float32",
    "mamba_scheduler_strategy": "extra_buffer",
    "mamba_track_interval": 256,
    "mamba_backend": "triton",
    "speculative_algorithm": None,
    "speculative_num_draft_tokens": None,
    "decode_log_interval": 40,
    "enable_metrics": True,
    "log_level": "info",
    "disaggregation_mode": "null",
}
NOISE = {
    "cuda_graph_bs": [1, 2, 4, 8],
    "json_model_override_args": '{"max_running_requests": 999, "a": [1, 2]}',
    "hicache_storage_backend_extra_config": {"max_running_requests": 7, "k": (1, 2)},
    "api_key": "it's, (secret)",
    "watchdog_timeout": 300.0,
    "random_seed": 1e-05,
}


def _dataclass_repr(d: dict) -> str:
    return "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in d.items()) + ")"


@pytest.mark.parametrize("style", ["dataclass", "dict"])
def test_server_args(style: str) -> None:
    d = dict(list(SERVER_ARGS_FIELDS_SAMPLE.items())[:5]) | NOISE | SERVER_ARGS_FIELDS_SAMPLE
    body = _dataclass_repr(d) if style == "dataclass" else repr(d)
    r = parsed("[2026-08-02 19:22:10] server_args=" + body)
    e = r.event
    assert e.kind == "server_args" and r.tp_rank is None
    for k, v in SERVER_ARGS_FIELDS_SAMPLE.items():
        assert e.args[k] == v and type(e.args[k]) is type(v), k
    assert e.args["api_key"] == "it's, (secret)"
    assert e.args["random_seed"] == 1e-05
    assert e.args["cuda_graph_bs"] == "[1, 2, 4, 8]"  # containers stay text: nothing is eval'd


def test_server_args_fixture_lines_have_reference_fields() -> None:
    for name, key in (("v0.5.8.log", "mamba_scheduler_strategy"), ("v0.5.19.log", "mamba_radix_cache_strategy")):
        line = (FIXTURES / name).read_text().splitlines()[0]
        e = parsed(line).event
        assert e.args[key] in ("extra_buffer", "no_buffer", "auto"), name
        assert isinstance(e.args["tp_size"], int) and isinstance(e.args["mem_fraction_static"], float)


def test_server_args_truncated_paste_falls_back_to_per_key_regex() -> None:
    line = "[2026-08-02 19:22:10] server_args=ServerArgs(model_path='Qwen/Qwen3.5-27B', tp_size=2, weird=<<<, max_running_requests=32, mamba_full_memory_ratio=0.9"
    e = parsed(line).event
    assert e.args["model_path"] == "Qwen/Qwen3.5-27B"
    assert e.args["max_running_requests"] == 32
    assert e.args["mamba_full_memory_ratio"] == 0.9


def test_server_args_long_line_is_fast() -> None:
    d = SERVER_ARGS_FIELDS_SAMPLE | {f"extra_field_{i}": f"value-{i}" for i in range(3000)}
    line = "[2026-08-02 19:22:10] server_args=" + repr(d)
    t = time.perf_counter()
    e = parsed(line).event
    assert time.perf_counter() - t < 2.0
    assert e.args["tp_size"] == 4 and e.args["extra_field_2999"] == "value-2999"


# --------------------------------------------------------------------------------------------
# irrelevant lines and hostile input


@pytest.mark.parametrize(
    "line",
    [
        '[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "[2026-04-05 20:02:51] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        "[2026-04-14 16:08:49 TP0] Memory pool end. avail mem=4.41 GB",
        "[2026-04-14 16:08:51 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=4.39 GB",
        # (the death lines "Scheduler hit an exception", "SIGQUIT received" are parsed now: test_sglang_lifecycle.py)
        "[2026-04-14 16:08:51 TP0] max_total_tokens=2000000 is larger than the profiled value 327310. Use the profiled value instead.",
        "Capturing batches (bs=24 avail_mem=4.00 GB):  14%|█▍        | 5/36 [00:01<00:07,  4.01it/s]",
        "",
    ],
)
def test_irrelevant_lines_are_ignored(line: str) -> None:
    assert parse_line(line).outcome == IGNORED
    assert parse_line(line, engine="sglang").outcome == IGNORED


@pytest.mark.parametrize(
    "msg",
    [
        "\x00\xff\xfe garbage \x1b[31m",
        "Decode batch, \x00: \x00, : , ::::, , , ",
        "Decode batch, #running-req: \udcff",
        "server_args=ServerArgs(" + "(" * 5000,
        "server_args={'a': '" + "x" * 100000,
        "[unified-memory-pool] " + "a=1 (" * 5000,
        "Mamba Cache is allocated. " + "\x00" * 1000,
        "max_running_requests reduced from the requested 1 to 2 bound by x (" + "y" * 1000,
        "x" * 10_000_000,
        "Decode batch, " + "x" * 10_000_000,
        "server_args=ServerArgs(" + "a=1, " * 2_000_000 + ")",
    ],
    ids=lambda m: repr(m[:30]),
)
def test_hostile_input_never_raises(msg: str) -> None:
    t = time.perf_counter()
    res = parse_message(msg)
    assert res is None or type(res).__module__ == "parsers.events"
    parse_line("[2026-01-01 00:00:00 TP0] " + msg)
    parse_line(msg, engine="sglang")
    assert time.perf_counter() - t < 10.0


@pytest.mark.parametrize("bad", [None, b"Decode batch, #running-req: 1", 123, object()])
def test_non_string_input_never_raises(bad: object) -> None:
    assert parse_message(bad) is None  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# fixtures: every line of every file parses, none is unrecognized

MIN_PARSED = {
    "real-excerpts.log": 10,
    "dp-attention.log": 14,
    "pd-decode.log": 15,
    "swa.log": 18,
    "unified-memory.log": 16,
    "replayssm.log": 15,
}
# a terminal-wrapped paste: its first pieces are unrecognized on their own by design
WRAPPED = "pasted-damaged-headers.log"
FIXTURE_FILES = sorted(p.name for p in FIXTURES.glob("*.log") if p.name != WRAPPED)


def test_fixture_set_covers_every_era() -> None:
    want = {"v0.4.6.log", "v0.4.10.log", "v0.5.2.log", "v0.5.3.log", "v0.5.3.post3.log", "v0.5.4.log", "v0.5.6.log", "v0.5.8.log"}
    want |= {"v0.5.9.log", "v0.5.10.log", "v0.5.11.log", "v0.5.13.log", "v0.5.16.log", "v0.5.18.log", "v0.5.19.log", "v0.5.23.log"}
    want |= set(MIN_PARSED)
    assert want <= set(FIXTURE_FILES)


@pytest.mark.parametrize("name", FIXTURE_FILES)
@pytest.mark.parametrize("engine", [None, "sglang"])
def test_fixture_file_parses_cleanly(name: str, engine: str | None) -> None:
    n_parsed = 0
    kinds: set[str] = set()
    for i, line in enumerate((FIXTURES / name).read_text(encoding="utf-8").splitlines(), 1):
        r = parse_line(line, engine=engine)
        assert r.outcome != UNRECOGNIZED, f"{name}:{i}: {r.reason}: {line[:120]}"
        if r.outcome == PARSED:
            n_parsed += 1
            kinds.add(type(r.event).__name__)
            if line.startswith("[") and "INFO:" not in line:
                assert r.engine == "sglang" and r.ts is not None
    assert n_parsed >= MIN_PARSED.get(name, 15), (name, n_parsed)
    if name.startswith("v"):
        # a boot + runtime excerpt: capacity facts, the effective summary and runtime batch lines
        assert {"KVCacheAllocated", "SchedulerSummary", "BatchStats", "WeightsLoaded", "ServerConfig"} <= kinds, kinds


def test_real_excerpts_are_verbatim_reference_lines() -> None:
    """The team's reference (shared/reference/, not part of the repository) sits beside the
    checkout in CI, or beside the directory of a worktree (/work/wt/NAME next to /work/shared): the
    nearest one up the tree. A user's clone has none: the check is skipped there, with its reason.
    ``.ci/run`` sets HCE_REQUIRE_REFERENCE=1, and there a missing reference fails."""
    here = Path(__file__).resolve()
    refs = [d / "shared" / "reference" / "sglang-log-formats.md" for d in here.parents[2:]]
    ref = next((r for r in refs if r.exists()), None)
    if ref is None:
        why = "shared/reference/sglang-log-formats.md not found beside the checkout or above it"
        if os.environ.get("HCE_REQUIRE_REFERENCE") == "1":
            pytest.fail(why + " (required: HCE_REQUIRE_REFERENCE=1, as .ci/run sets)")
        pytest.skip(why + " (the team's reference; .ci/run requires it)")
    text = ref.read_text(encoding="utf-8")
    for line in (FIXTURES / "real-excerpts.log").read_text(encoding="utf-8").splitlines():
        assert line in text, line


# --------------------------------------------------------------------------------------------
# damaged headers (pasted into issues, cut by terminals or collectors): the message decides

DECODE_MSG = (
    "Decode batch, #running-req: 9, #full token: 20902, full token usage: 0.10, mamba num: 45, mamba usage: 0.96, "
    "cuda graph: True, gen throughput (token/s): 466.71, #queue-req: 13"
)
KV_MSG = "KV Cache is allocated. #tokens: 211360, K size: 3.22 GB, V size: 3.22 GB"
TS_0905 = time.mktime((2026, 8, 23, 9, 5, 37, 0, 0, -1))


@pytest.mark.parametrize(
    "head,dp,tp,ts",
    [
        pytest.param("[09:05:37 TP0] ", "0", 0, None, id="time-only"),
        pytest.param("[09:05:37.125 DP1 TP3] ", "1", 3, None, id="time-ms-tags"),
        pytest.param("[09:05:37] ", "0", None, None, id="time-only-no-tags"),
        pytest.param("2026-08-23 09:05:37 TP0] ", "0", 0, TS_0905, id="lost-leading-bracket"),
        pytest.param("09:05:37 TP1] ", "0", 1, None, id="lost-bracket-and-date"),
        pytest.param("[2026-08-23 09:05:37 TP0]", "0", 0, TS_0905, id="lost-space"),
        pytest.param("[2026-08-23 09:05:37 TP0]  ", "0", 0, TS_0905, id="two-spaces"),
        pytest.param("[2026-08-23 09:05:37 TP0]\t", "0", 0, TS_0905, id="tab"),
        pytest.param("[2026-08-23T09:05:37,000 TP0] ", "0", 0, TS_0905, id="iso-t-comma-ms"),
        pytest.param("2026-08-23 09:05:37 TP0 ", "0", 0, TS_0905, id="lost-both-brackets"),
        pytest.param("[TP0] ", "0", 0, None, id="tags-only"),
        pytest.param("[DP1 TP1 EP1] ", "1", 1, None, id="dp-tags-only"),
        pytest.param("", "0", None, None, id="no-header"),
    ],
)
@pytest.mark.parametrize("engine", [None, "sglang"])
def test_damaged_sglang_headers_are_read_by_the_message(head: str, dp: str, tp: int | None, ts: float | None, engine: str | None) -> None:
    for msg, kind in ((DECODE_MSG, ev.BatchStats), (KV_MSG, ev.KVCacheAllocated)):
        r = parsed(head + msg, engine)
        assert r.engine == "sglang" and type(r.event) is kind
        assert (r.dp_rank, r.tp_rank, r.ts) == (dp, tp, ts)
    assert parsed(head + DECODE_MSG, engine).event.mamba_used == 45


@pytest.mark.parametrize(
    "line",
    [
        "2024-01-01 12:00:00 status installed libc6:amd64 2.36-9",  # dpkg.log
        "12:00:01 up 3 days,  2:01,  1 user,  load average: 0.00",  # uptime
        "[12:00:01] some other program's line",
        "[TP0] nothing SGLang would print",
    ],
)
def test_lines_that_only_look_like_damaged_headers_stay_ignored(line: str) -> None:
    assert parse_line(line, None).outcome == IGNORED
    assert parse_line(line, "sglang").outcome == IGNORED


def test_damaged_header_fixture_is_read_whole() -> None:
    """fixtures/sglang/pasted-damaged-headers.log: every damaged form in one paste, and the cap
    warning wrapped by a terminal at 76 columns (joined by the pipeline, tests/pipeline/test_wrapped.py)."""
    lines = (FIXTURES / "pasted-damaged-headers.log").read_text().splitlines()
    outcomes = [parse_line(ln, "sglang").outcome for ln in lines]
    assert UNRECOGNIZED in outcomes  # the first piece of each wrapped warning, on its own
    kinds = {type(parse_line(ln, "sglang").event).__name__ for ln in lines}
    assert {
        "WeightsLoaded",
        "MambaCacheAllocated",
        "KVCacheAllocated",
        "SchedulerSummary",
        "BatchStats",
        "Retraction",
        "PoolExhausted",
    } <= kinds


@pytest.mark.parametrize(
    "msg",
    [
        "Not enough space for mamba cache, try to increase --mamba-full-memory-ratio or --max-mamba-cache-size.",
        "Not enough space for mamba ping pong idx, try to increase --mamba-full-memory-ratio.",
        "AssertionError: Not enough space for mamba ping pong idx, try to increase --mamba-full-memory-ratio.",
    ],
)
def test_mamba_exhausted_fires_on_either_message(msg: str) -> None:
    """docs/rules.md names both: the pool is out of slots, or of the extra_buffer ping-pong slots."""
    from exporter.app import exposition, new_pipeline

    pipe = new_pipeline("sglang")
    pipe.feed(
        "s",
        "[2026-08-23 09:06:30 TP0] Decode batch, #running-req: 9, #full token: 20902, full token usage: 0.10, mamba num: 45, mamba usage: 0.96, cuda graph: True, gen throughput (token/s): 466.71, #queue-req: 13",
    )
    pipe.feed("s", "[2026-08-23 09:06:31 TP0] " + msg)
    pipe.finish()
    assert b'rule="mamba_exhausted",source="s"} 1.0' in exposition(pipe)


def test_time_only_header_takes_the_date_the_log_is_at() -> None:
    """'[HH:MM:SS TP0] ' keeps the time of day (Line.tod); the pipeline dates it with the source's
    last dated line, the next day once midnight passed, and leaves it undated before any date."""
    from exporter.app import new_pipeline

    r = parse_line("[23:59:58.500 TP0] " + DECODE_MSG, "sglang")
    assert r.ts is None and r.tod == 23 * 3600 + 59 * 60 + 58.5
    pipe = new_pipeline("sglang")
    pipe.feed("s", "[00:00:01 TP0] " + KV_MSG)  # no date yet: undated
    assert pipe.sources["s"].last_ts is None
    pipe.feed("s", "[2026-08-23 23:59:50 TP0] " + KV_MSG)
    pipe.feed("s", "[23:59:58 TP0] " + DECODE_MSG)
    assert pipe.sources["s"].last_ts == time.mktime((2026, 8, 23, 23, 59, 58, 0, 0, -1))
    pipe.feed("s", "[00:00:03 TP0] " + DECODE_MSG)  # past midnight
    assert pipe.sources["s"].last_ts == time.mktime((2026, 8, 24, 0, 0, 3, 0, 0, -1))
