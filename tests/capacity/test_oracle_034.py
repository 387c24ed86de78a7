"""vLLM 0.34.0 against its oracle (tests/oracle/vllm_0_34_0.py): the defaults the exporter assumes
(exporter/capacity/defaults.py), what a plan says it cannot know, and the 0.34 fixtures' numbers.

The request cap's default is checked as a property over real GPUs: for every device, what the exporter concludes
from what a log shows of it (its memory, and whether the FlashInfer GDN prefill kernel runs) is vLLM's own default
for that device, or nothing: never a wrong number (issue 29 item 5)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from exporter import capacity as cap
from exporter.capacity import defaults
from tests.oracle import vllm_0_33_0 as vl33
from tests.oracle import vllm_0_34_0 as vl34

ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30

# (name as the driver reports it, total memory as CUDA reports it in GiB, SM90 or later, a GB10)
DEVICES = [
    ("NVIDIA A100-SXM4-40GB", 39.39, False, False),
    ("NVIDIA A100-SXM4-80GB", 79.15, False, False),
    ("NVIDIA A100 80GB PCIe", 79.15, False, False),
    ("NVIDIA H100 80GB HBM3", 79.19, True, False),
    ("NVIDIA H100 NVL", 93.1, True, False),
    ("NVIDIA H20", 95.58, True, False),
    ("NVIDIA H200", 139.81, True, False),
    ("NVIDIA B200", 178.36, True, False),
    ("NVIDIA GB10", 119.7, True, True),
    ("NVIDIA L40S", 44.39, False, False),
    ("NVIDIA GeForce RTX 5090", 31.36, True, False),
    ("AMD Instinct MI300X", 191.98, False, False),
]


@pytest.mark.parametrize(("name", "gib", "sm90", "gb10"), DEVICES, ids=[d[0] for d in DEVICES])
@pytest.mark.parametrize("kernel_shown", [False, True], ids=["no-kernel-line", "flashinfer-gdn-line"])
@pytest.mark.parametrize("throughput", [False, True])
def test_the_default_request_cap_is_vllms_or_none(name, gib, sm90, gb10, kernel_shown, throughput):
    want = vl34.default_max_num_seqs(device_memory=int(gib * GiB), device_name=name, is_gb10=gb10, throughput=throughput)
    # what a log shows: the memory ('Free memory on device (F/T GiB)'), and FlashInfer's GDN kernel where the model is GDN
    got = defaults.vllm_max_num_seqs("0.34.0", device="cuda", device_gib=gib, sm90_or_later=kernel_shown and sm90, throughput=throughput)
    assert got.value in (None, want), (name, got)


@pytest.mark.parametrize(
    ("name", "kernel_shown", "want"),
    [
        ("NVIDIA H200", False, 1024),
        ("NVIDIA B200", False, 1024),
        ("AMD Instinct MI300X", False, 1024),
        ("NVIDIA L40S", False, 256),
        ("NVIDIA GeForce RTX 5090", False, 256),
        ("NVIDIA H100 80GB HBM3", True, 1024),  # FlashInfer's GDN kernel: SM90, so no A100
        ("NVIDIA H100 80GB HBM3", False, None),  # as much memory as an A100 80GB: not known
        ("NVIDIA GB10", True, None),  # a GB10 runs FlashInfer too
    ],
)
def test_the_default_request_cap_is_known_where_the_log_tells(name, kernel_shown, want):
    _, gib, sm90, _ = next(d for d in DEVICES if d[0] == name)
    got = defaults.vllm_max_num_seqs("0.34.0", device="cuda", device_gib=gib, sm90_or_later=kernel_shown and sm90)
    assert got.value == want, got.why


def test_the_cpu_build_and_the_old_releases():
    assert defaults.vllm_max_num_seqs("0.34.0", device="cpu", world=4).value == vl34.default_max_num_seqs(
        device_memory=0, device_name="", cpu=True, world_size=4
    )
    assert defaults.vllm_max_num_seqs("0.8.2", device="cuda").value == 1024  # 1024 on any GPU
    assert defaults.vllm_max_num_seqs("0.6.4", device="cuda").value == 256  # V0
    assert defaults.vllm_max_num_seqs("0.34.0", device="cuda").value is None  # no device memory in the log


@pytest.mark.parametrize("extensible", [True, False])
@pytest.mark.parametrize("flag", [None, 0.9, 0.5])
def test_gpu_memory_utilization_in_force(extensible, flag):
    want = vl34.resolved_gpu_memory_utilization(flag, extensible)
    got = flag if flag is not None else defaults.vllm_gpu_memory_utilization("0.34.0", extensible)
    assert got == want
    assert defaults.vllm_gpu_memory_utilization("0.33.0", extensible) == 0.92  # whatever the sizing
    assert defaults.vllm_gpu_memory_utilization("0.19.1", extensible) == 0.9
    assert defaults.vllm_gpu_memory_utilization("0.34.0", None) is None  # not known whether the cache is extensible


def test_the_default_block_size_by_release():
    assert defaults.vllm_block_size("0.34.0", "hopper") == vl34.DEFAULT_BLOCK_SIZE == 64
    assert defaults.vllm_block_size("0.33.0", "hopper") == 16
    assert defaults.vllm_block_size(None, "blackwell") == 64  # the newest
    assert defaults.vllm_block_size("0.34.0", "cpu") == defaults.vllm_block_size("0.33.0", "cpu") == 128
    # what it changes: a hybrid's attention block in mode none, Qwen3-Next TP2 bf16 on Hopper (544 -> 576)
    cfg = json.loads((ROOT / "fixtures" / "configs" / "qwen3-next-80b-a3b.json").read_text())
    model = cap.model_from_config(cfg, name="qwen3-next")
    for release, oracle in (("0.33.0", vl33), ("0.34.0", vl34)):
        want = oracle.size_pool(cfg, available_memory=40 * GiB, tp=2, enable_prefix_caching=False, max_model_len=262144)
        got = cap.vllm_pool(model, 40 * GiB, tp=2, mode="none", max_model_len=262144, version=release)
        assert got.block_size == want["block_size"] == {"0.33.0": 544, "0.34.0": 576}[release]


def test_a_plan_says_what_it_cannot_know_of_the_extensible_cache():
    cfg = ROOT / "fixtures" / "configs" / "qwen3-next-80b-a3b.json"
    model = cap.load_model(str(cfg))
    gpu = cap.unmodelled_notes(model, cap.PlanInputs(engine="vllm", tp=2, budget_bytes=40 * GiB), gpu_memory=True)
    assert any("measured after CUDA-graph capture and warmup" in n and "Extended KV cache to N blocks" in n for n in gpu)
    assert any(n.startswith("not known to the model: vLLM 0.34.0 measures") for n in gpu)
    old = cap.unmodelled_notes(model, cap.PlanInputs(engine="vllm", tp=2, budget_bytes=40 * GiB, vllm_version="0.33.0"), gpu_memory=True)
    cpu = cap.unmodelled_notes(model, cap.PlanInputs(engine="vllm", tp=2, budget_bytes=40 * GiB, platform="cpu"), gpu_memory=True)
    assert not any("measured after" in n for n in old + cpu)


# --------------------------------------------------------------------------------------------
# the 0.34 fixtures: their lines agree with 0.34.0's arithmetic


def _gib(text: str, pattern: str) -> list[float]:
    return [float(x) for x in re.findall(pattern, text)]


@pytest.mark.parametrize(
    ("fixture", "config", "tp", "gdn", "util"),
    [
        ("v0.34.0-h200-capped.log", "qwen3-next-80b-a3b", 2, "auto", 0.9),
        ("v0.34.0-32gb-auto-len.log", "qwen3.8-27b", 1, "triton", None),
    ],
)
def test_the_fixtures_lines_agree_with_the_034_arithmetic(fixture, config, tp, gdn, util):
    text = (ROOT / "fixtures" / "vllm" / fixture).read_text()
    cfg = json.loads((ROOT / "fixtures" / "configs" / f"{config}.json").read_text())
    [init_free, total] = [float(x) for x in re.search(r"Free memory on device \(([\d.]+)/([\d.]+) GiB\)", text).groups()]
    m = re.search(
        r"Memory after warmup: ([\d.]+) GiB free, ([\d.]+) GiB committed to the KV cache, [\d.]+ GiB kept for transient activations "
        r"\(([\d.]+) GiB allocated at peak, ([\d.]+) GiB of torch reservation growth\); (\d+) KV cache blocks \(([\d.]+) GiB\) fit "
        r"within the requested ([\d.]+) GiB",
        text,
    )
    free, committed, peak, growth, blocks, _, requested = (float(x) for x in m.groups())
    blocks = int(blocks)
    # the budget: total x the utilization in force (1.0 unset, with the extensible cache)
    assert requested == pytest.approx(
        vl34.request_memory(int(total * GiB), vl34.resolved_gpu_memory_utilization(util, True)) / GiB, abs=0.01
    )
    measured = dict(
        init_free_memory=int(init_free * GiB),
        free_memory=int(free * GiB),
        committed_bytes=int(committed * GiB),
        transient_peak_bytes=int(peak * GiB),
        torch_reserve_growth_bytes=int(growth * GiB),
    )
    avail = vl34.measure_kv_cache_bytes(requested_memory=int(requested * GiB), **measured)
    pool = vl34.size_pool(cfg, available_memory=avail, tp=tp, gdn_backend=gdn, max_model_len=262144)
    bpb = pool["page_bytes"] * pool["group_size"]
    assert abs(avail // bpb - blocks) <= 1  # the log's figures are rounded to 0.01 GiB
    if util is not None:
        [withheld] = set(_gib(text, r"keeping ([\d.]+) GiB of free device memory out of the KV cache"))  # one line per TP worker
        assert withheld == pytest.approx(vl34.withheld_bytes(util, total_memory=int(total * GiB), **measured) / GiB, abs=0.05)
    # the KV-size line: 0.34.0's concurrency for the final blocks and length
    tokens, length, conc = re.search(
        r"GPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", text
    ).groups()
    length = int(length.replace(",", ""))
    final = vl34.size_pool(cfg, available_memory=blocks * bpb, tp=tp, gdn_backend=gdn, max_model_len=length)
    assert final["num_blocks"] == blocks
    assert (int(tokens.replace(",", "")), float(conc)) == (final["kv_cache_tokens"], round(final["max_concurrency"], 2))
    assert f"Setting attention block size to {final['block_size']} tokens" in text
