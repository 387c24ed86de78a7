"""vLLM 0.34's lines (issue 35): the extensible KV cache sized after warmup, ``--max-model-len auto`` fitted twice,
the ``gpu_memory_utilization`` cap warning. Each line is rendered from the 0.34.0 wheel's format string (its file
named per case; tests/release/pinned.json holds the strings verbatim), and read into the event the state revises
(exporter/state/revisions.py)."""

from __future__ import annotations

import pytest

from parsers import events as ev
from parsers import parse_line
from parsers import vllm as V
from parsers.numbers import GIB

approx = pytest.approx
HEAD = "(Worker_TP0 pid=201) INFO 12-03 09:03:14 [x.py:1] "


def event(msg: str) -> object:
    r = parse_line(HEAD + msg, engine="vllm")
    assert r.outcome == ev.PARSED, (r.outcome, r.reason, msg)
    return r.event


# v1/worker/extensible_kv_cache.py::measure_kv_cache_blocks ("Memory after warmup: %s GiB free, ..."), format_gib
WARMUP = (
    "Memory after warmup: 11.87 GiB free, 0.01 GiB committed to the KV cache, 2.4 GiB kept for transient activations "
    "(2.4 GiB allocated at peak, 1.9 GiB of torch reservation growth); 7031 KV cache blocks (46.35 GiB) fit within the "
    "requested 125.83 GiB. Torch may reserve up to 20.52 GiB."
)
CAP = (
    "gpu_memory_utilization=0.9 caps this instance at 125.83 GiB, keeping 11.67 GiB of free device memory out of the KV "
    "cache. The extensible KV cache is sized from the memory measured after warmup and CUDA graph capture, so vLLM's own "
    "use needs no headroom below 1.0. Leave gpu_memory_utilization unset unless it leaves room for memory vLLM does not "
    "measure: other processes sharing the GPU (including ones that allocate on it later), the CPU on a unified-memory "
    "device, weight transfer buffers for weight updates, or a KV connector's own device buffers."
)


def test_memory_after_warmup_is_one_ranks_measurement():
    e = event(WARMUP)
    assert isinstance(e, ev.KVMemory) and e.stage == ev.MEASURED
    assert (e.blocks, e.kv_bytes, e.requested_bytes) == (7031, approx(46.35 * GIB), approx(125.83 * GIB))


def test_extended_and_remapping_give_the_final_blocks():
    e = event("Extended KV cache to 7031 blocks (46.35 GiB).")  # '%.2f GiB' (not format_gib)
    assert (e.stage, e.blocks, e.kv_bytes) == (ev.FINAL, 7031, approx(46.35 * GIB))
    e = event("Remapping the KV cache from 7100 to 7031 blocks to fit the measured budget.")
    assert (e.stage, e.blocks, e.kv_bytes) == (ev.FINAL, 7031, None)


def test_the_cap_warning_names_what_the_cap_withholds():
    e = event(CAP)
    assert (e.stage, e.kv_bytes) == (ev.MEASURED, None)
    assert (e.memory_utilization, e.requested_bytes, e.withheld_bytes) == (0.9, approx(125.83 * GIB), approx(11.67 * GIB))
    assert e.text.startswith("gpu_memory_utilization=0.9 caps this instance")
    # its first word is its value: a header the exporter does not know still finds it (parsers/preamble.py)
    assert V.starts_message(CAP)
    assert parse_line("[2026-12-03 09:03:14.000][Worker_TP0 pid=201][extensible_kv_cache.py:662][WARNING]: " + CAP).outcome == ev.PARSED


def test_free_memory_on_device_gives_the_device_and_the_utilization_in_force():
    e = event(
        "Free memory on device (139.3/139.81 GiB) on startup. Desired GPU memory utilization is (0.9, 125.83 GiB). Actual "
        "usage is 75.79 GiB for consumed memory (weights + non-torch), 2.91 GiB for peak activation, and 1.21 GiB for "
        "CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=49205... ` (45.92 GiB) to fit into "
        "requested memory, or `--kv-cache-memory=1` (57.4 GiB) to fully utilize gpu memory. Current kv cache memory in use is 47.13 GiB."
    )
    assert (e.stage, e.kv_bytes) == (ev.PROFILE, approx(47.13 * GIB))
    assert (e.device_total_bytes, e.memory_utilization, e.requested_bytes) == (approx(139.81 * GIB), 0.9, approx(125.83 * GIB))


@pytest.mark.parametrize(
    ("msg", "stage", "length", "original"),
    [
        # 0.33's forms (no suffix): the length, sized before warmup
        (
            "Auto-fit max_model_len: reduced from 262144 to 211328 to fit in available KV cache memory (13.23 GiB GPU)",
            ev.PROFILE,
            211328,
            262144,
        ),
        (
            "Auto-fit max_model_len: full model context length 131072 fits in available KV cache memory (20.0 GiB GPU)",
            ev.PROFILE,
            131072,
            131072,
        ),
        # 0.34 with the extensible KV cache: the line says it is an estimate
        (
            "Auto-fit max_model_len: reduced from 262144 to 211328 to fit in available KV cache memory (13.23 GiB GPU + 4.0 GiB "
            "host); the final length is set after CUDA graph capture and warmup",
            ev.ESTIMATE,
            211328,
            262144,
        ),
        (
            "Auto-fit max_model_len: full model context length 131072 fits in available KV cache memory (20.0 GiB GPU); the "
            "final length is set after CUDA graph capture and warmup",
            ev.ESTIMATE,
            131072,
            131072,
        ),
        # after warmup
        (
            "--max-model-len auto reduced max_model_len from 211328 to 163904 (10.31 GiB GPU left for the KV cache after CUDA "
            "graph capture and warmup).",
            ev.FINAL,
            163904,
            211328,
        ),
        (
            "--max-model-len auto reduced max_model_len from 211328 to 4096 (0.52 GiB GPU left for the KV cache after CUDA graph "
            "capture and warmup). Requests longer than 4096 tokens will be rejected. Use more GPUs or set --max-model-len explicitly.",
            ev.FINAL,
            4096,
            211328,
        ),
        (
            "Auto-fit max_model_len: using max_model_len=131072, which fits in the KV cache memory left after CUDA graph capture "
            "and warmup (19.0 GiB GPU).",
            ev.FINAL,
            131072,
            131072,
        ),
        # 0.34 without the extensible KV cache: fitted once, before warmup
        (
            "--max-model-len auto reduced max_model_len from 262144 to 98304 (9.5 GiB GPU available for the KV cache).",
            ev.PROFILE,
            98304,
            262144,
        ),
        ("Auto-fit max_model_len: attention-free model, using derived max_model_len=4096", ev.PROFILE, 4096, 4096),
    ],
)
def test_every_form_of_the_auto_fit_lines(msg, stage, length, original):
    e = event(msg)
    assert isinstance(e, ev.ContextFit)
    assert (e.stage, e.max_model_len, e.original) == (stage, length, original)


def test_the_extensible_cache_switched_off_is_configuration():
    e = event(
        "Disabling the extensible KV cache: the CUDA driver does not support virtual memory management. The KV cache will be "
        "sized from profiling estimates instead of measured memory."
    )
    assert e == ev.ServerConfig(kind="extensible_kv_cache", args={"enable_extensible_kv_cache": False})


@pytest.mark.parametrize(
    "msg",
    [
        "Memory after warmup: lots of GiB free",
        "Extended KV cache to many blocks.",
        "gpu_memory_utilization=0.9 caps this instance at some GiB",
        "Auto-fit max_model_len: reduced from a lot",
        "--max-model-len auto reduced max_model_len from 5 to",
    ],
)
def test_a_damaged_034_line_is_drift_not_silence(msg):
    assert parse_line(HEAD + msg, engine="vllm").outcome == ev.UNRECOGNIZED
