"""Pins for exporter.capacity: numbers from the seed incidents' logs and the engines' arithmetic (docs/formats/)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest

from exporter import capacity as cap
from exporter.advice import flags
from exporter.capacity import GiB, KiB, MiB, ObservedCapacity

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "configs"


def model(name: str) -> cap.ModelSpec:
    return cap.load_model(CONFIGS / f"{name}.json")


@pytest.fixture(scope="module")
def qwen38() -> cap.ModelSpec:
    return model("qwen3.8-27b")


@pytest.fixture(scope="module")
def kimi() -> cap.ModelSpec:
    return model("kimi-k3")


@pytest.fixture(scope="module")
def qnext() -> cap.ModelSpec:
    return model("qwen3-next-80b-a3b")


@pytest.fixture(scope="module")
def nemo() -> cap.ModelSpec:
    return model("nemotron-h-8b")


# ---------------------------------------------------------------- config parsing


def test_layouts(qwen38, kimi, qnext, nemo):
    assert (qwen38.full_layers, qwen38.linear_layers, qwen38.linear_kind, qwen38.attention) == (16, 48, "gdn", "gqa")
    assert (kimi.full_layers, kimi.linear_layers, kimi.linear_kind, kimi.attention) == (24, 69, "kda", "mla")
    assert (qnext.full_layers, qnext.linear_layers, qnext.linear_kind) == (12, 36, "gdn")
    assert (nemo.full_layers, nemo.linear_layers, nemo.linear_kind) == (4, 24, "mamba2")
    assert qwen38.config_ssm_dtype == "float32" and kimi.config_ssm_dtype is None
    assert kimi.kv_elements_per_token_per_layer == 576  # 512 + 64


def test_text_config_and_interval_variants():
    base = {"num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "hidden_size": 512}
    lin = {"linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 64, "linear_value_head_dim": 64}
    a = cap.model_from_config({**base, **lin, "full_attention_interval": 4})
    b = cap.model_from_config({"text_config": {**base, **lin, "layer_types": ["linear_attention"] * 6 + ["full_attention"] * 2}})
    c = cap.model_from_config({**base, **lin, "layer_types": "6 × linear_attention + 2 × full_attention"})
    assert (a.full_layers, a.linear_layers) == (b.full_layers, b.linear_layers) == (c.full_layers, c.linear_layers) == (2, 6)
    plain = cap.model_from_config(base)
    assert not plain.is_hybrid and plain.full_layers == 8
    assert cap.linear_state(plain).per_request == 0


def test_kimi_layers_one_based_lists_only_one_given():
    cfg = {
        "num_hidden_layers": 8,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "linear_attn_config": {"full_attn_layers": [4, 8], "num_heads": 8, "head_dim": 64},
    }
    m = cap.model_from_config(cfg)
    assert (m.full_layers, m.linear_layers) == (2, 6)


@pytest.mark.parametrize(
    "cfg",
    [
        {},
        {"num_hidden_layers": 4, "full_attention_interval": 2, "num_key_value_heads": 2, "head_dim": 64},  # linear, unknown kind
        {"num_hidden_layers": "x"},
    ],
)
def test_bad_configs_raise_config_error(cfg):
    with pytest.raises(cap.ConfigError):
        cap.model_from_config(cfg)


def test_load_config_errors(tmp_path):
    with pytest.raises(cap.ConfigError, match="not found"):
        cap.load_config(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(cap.ConfigError, match="not valid JSON"):
        cap.load_config(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(cap.ConfigError, match="JSON object"):
        cap.load_config(tmp_path / "list.json")


def test_dtypes():
    assert cap.dtype_bytes("bfloat16") == cap.dtype_bytes("auto") == 2
    assert cap.dtype_bytes("fp8_e4m3") == cap.dtype_bytes("torch.float8_e4m3fn") == 1
    assert cap.dtype_bytes("float32") == 4
    with pytest.raises(ValueError):
        cap.normalize_dtype("int3")


# ---------------------------------------------------------------- seed 001: Qwen3.8-27B


def test_qwen38_kv_per_token(qwen38):
    assert cap.kv_bytes_per_token(qwen38) == 65_536 == 64 * KiB  # bf16
    assert cap.kv_bytes_per_token(qwen38, "fp8") == 32_768 == 32 * KiB
    # "如果 64 层全是全注意力，每 token 是 256 KiB"
    assert cap.kv_bytes_per_token_per_layer(qwen38) * 64 == 256 * KiB


def test_qwen38_ssm_state_144_mib(qwen38):
    st = cap.linear_state(qwen38)  # ssm dtype from config: float32
    assert st.ssm_dtype == "float32"
    assert st.ssm_bytes == 48 * 48 * 128 * 128 * 4 == 144 * MiB
    # conv: (2*16*128 + 48*128) * 3 * 2 B * 48 layers = 2,949,120 B (seed says "约 4.7 MB", see test below)
    assert st.conv_bytes == 2_949_120
    assert cap.linear_state(qwen38, ssm_dtype="bfloat16").ssm_bytes == 72 * MiB


def test_qwen38_conv_seed_discrepancy(qwen38):
    """The seed's "conv 状态约 4.7 MB" matches 16,384 channels (v counted twice), not the GDN conv_dim 10,240.
    vLLM's logged mamba page (3,207,168 B = 61,440 conv + 3,145,728 ssm) confirms 10,240 channels."""
    assert 16_384 * 3 * 2 * 48 == 4_718_592  # the seed's ~4.7 MB
    assert cap.linear_state(qwen38).conv_bytes / 1e6 == pytest.approx(2.95, abs=0.01)


# seed table: context -> (bf16 KV, fp8 KV, total bf16 GiB, total fp8 GiB) with the seed's rounding
SEED_TABLE = [
    (10_000, 625 * MiB, 313 * MiB, "0.75", "0.45"),  # 10K is decimal 10,000 (10,240 would give 640 MiB)
    (32 * 1024, 2 * GiB, 1 * GiB, "2.14", "1.14"),
    (128 * 1024, 8 * GiB, 4 * GiB, "8.14", "4.14"),
    (256 * 1024, 16 * GiB, 8 * GiB, "16.1", "8.1"),
    (512 * 1024, 32 * GiB, 16 * GiB, "32.1", "16.1"),
    (1024 * 1024, 64 * GiB, 32 * GiB, "64.1", "32.1"),
]


@pytest.mark.parametrize("ctx,kv_bf16,kv_fp8,tot_bf16,tot_fp8", SEED_TABLE)
def test_qwen38_context_table(qwen38, ctx, kv_bf16, kv_fp8, tot_bf16, tot_fp8):
    assert ctx * cap.kv_bytes_per_token(qwen38) == kv_bf16
    assert ctx * cap.kv_bytes_per_token(qwen38, "fp8") == pytest.approx(kv_fp8, abs=0.5 * MiB)  # 312.5 -> 313
    ssm = cap.linear_state(qwen38).ssm_bytes  # the seed adds SSM only (144 MiB)
    nd = len(tot_bf16.split(".")[1])
    assert f"{(ctx * cap.kv_bytes_per_token(qwen38) + ssm) / GiB:.{nd}f}" == tot_bf16
    assert f"{(ctx * cap.kv_bytes_per_token(qwen38, 'fp8') + ssm) / GiB:.{nd}f}" == tot_fp8
    # per_sequence_bytes also counts conv (2.8 MiB): within the seed's rounding except for 10K/32K 2-decimal rows
    tot = cap.per_sequence_bytes(qwen38, ctx, "fp8")
    assert tot == ctx * 32 * KiB + 144 * MiB + 2_949_120


def test_qwen38_anchors(qwen38):
    fp8 = cap.kv_bytes_per_token(qwen38, "fp8")
    assert 131_072 * fp8 == 4 * GiB
    assert round(6_600_000 * fp8 / GiB) == 201  # 6.6M tokens x 32 KiB ~ 201 GiB, fits a 288 GB GB300
    assert round(6_600_000 * cap.kv_bytes_per_token(qwen38) / GiB) == 403  # bf16 would not fit
    assert cap.tokens_for_bytes(qwen38, 4.5 * GiB, "fp8") == 147_456  # "+14.7 万 tokens"
    # 1M fp8 sequence: state share 0.4%; 256 x 10K: 78 GiB KV
    ssm = cap.linear_state(qwen38).ssm_bytes
    assert f"{ssm / (1024 * 1024 * fp8 + ssm):.1%}" == "0.4%"
    assert 256 * 10_000 * fp8 / GiB == pytest.approx(78.125)
    # seed's 36.9 GiB for 256 states is 256 x 0.144 ("144 MiB" read as 0.144 GiB); exact is 36.0 GiB
    assert 256 * ssm == 36 * GiB
    assert round(256 * ssm / (256 * 10_000 * fp8 + 256 * ssm), 2) == pytest.approx(0.32, abs=0.005)


def test_qwen38_vllm_bf16_kv_halves_tokens(qwen38):
    """Seed: 1x RTX 5090, fp8 152,917 tokens vs bf16 76,458: same pool, half the tokens."""
    budget = 152_917 * cap.kv_bytes_per_token(qwen38, "fp8")
    assert cap.tokens_for_bytes(qwen38, budget, "bfloat16") == 76_458


# ---------------------------------------------------------------- seed 000: kimi-k3


def test_kimi_mla_kv(kimi):
    assert cap.kv_bytes_per_token(kimi) == 576 * 24 * 2 == 27 * KiB
    assert cap.kv_bytes_per_token(kimi, "fp8") == 13_824  # 13.5 KB
    assert cap.kv_bytes_per_token(kimi, tp=8) == 27 * KiB  # MLA latent is not split by TP


def test_kimi_tp8_state(kimi):
    st = cap.linear_state(kimi, tp=8, ssm_dtype="bfloat16")
    assert st.ssm_elements_per_layer == 12 * 128 * 128
    assert st.conv_elements_per_layer == 3 * 12 * 3 * 128
    assert st.ssm_bytes == 69 * 12 * 128 * 128 * 2 == 27_131_904
    assert st.conv_bytes == 69 * 3 * 12 * 3 * 128 * 2 == 1_907_712
    assert f"{st.ssm_bytes / MiB:.1f}" == "25.9"
    assert f"{st.conv_bytes / MiB:.2f}" == "1.82"
    # exact total over 8 GPUs is 221.55 MiB; the seed's 221.8 comes from rounding 25.875 up to 25.9 first
    assert st.all_gpus == 232_316_928
    assert f"{st.all_gpus / MiB:.1f}" == "221.6"
    assert round((25.9 + 1.82) * 8, 2) == 221.76  # the seed rounds 25.875 to 25.9 before summing
    # "100 路并发，光 linear state 就要 22 GB 左右"
    assert 100 * st.all_gpus / GiB == pytest.approx(21.6, abs=0.1)
    # KDA default ssm dtype is fp32 (both engines)
    assert cap.linear_state(kimi, tp=8).ssm_bytes == 2 * 27_131_904
    assert cap.linear_state(kimi, tp=8, engine="vllm").ssm_dtype == "float32"


def test_kimi_seed_logs_consistent_with_per_slot_bytes(kimi):
    """Seed incident logs: the pool holds max_mamba_cache_size + 1 slots (padding)."""
    fp32 = cap.linear_state(kimi, tp=8)
    bf16 = cap.linear_state(kimi, tp=8, ssm_dtype="bfloat16")
    assert f"{52 * fp32.ssm_bytes / GiB:.2f}" == "2.63" and f"{52 * fp32.conv_bytes / GiB:.2f}" == "0.09"
    assert f"{81 * bf16.ssm_bytes / GiB:.2f}" == "2.05" and f"{81 * bf16.conv_bytes / GiB:.2f}" == "0.14"
    assert f"{974_656 * cap.kv_bytes_per_token(kimi) / GiB:.2f}" == "25.10"
    assert f"{1_947_648 * cap.kv_bytes_per_token(kimi, 'fp8') / GiB:.2f}" == "25.08"


def test_kimi_80_slots_5_per_request():
    assert cap.sglang_mamba_cap(80, 5) == 16
    assert cap.sglang_slots_per_request("extra_buffer") == 5


# ---------------------------------------------------------------- vLLM worked checks (docs/formats/vllm.md#state-size-per-sequence)


def test_qwen3_next_tp2_vllm(qnext):
    st = cap.linear_state(qnext, tp=2, engine="vllm")
    assert st.ssm_dtype == "bfloat16"  # auto -> model dtype
    assert st.conv_bytes_per_layer == 24_576
    assert st.ssm_bytes_per_layer == 524_288
    assert st.page_bytes == 548_864
    assert cap.kv_bytes_per_token_per_layer(qnext, tp=2) == 1_024
    vp = cap.vllm_pool(qnext, 47_878_721_024, tp=2, max_model_len=262_144, version="0.10.2")  # the worked log's release
    assert vp.block_size == 544
    assert vp.page_bytes == 557_056
    assert f"{vp.padding_pct:.2f}" == "1.49"
    assert (vp.group_size, vp.n_attn_groups, vp.n_mamba_groups) == (12, 1, 3)
    assert vp.num_blocks == 7162
    assert vp.kv_cache_tokens_old == 973_760
    assert f"{vp.max_concurrency:.2f}" == "14.77"
    assert vp.mamba_bound_concurrency == 2387
    assert vp.state_bytes_per_request == 36 * 557_056
    assert vp.binding_pool == "kv"


def test_qwen36_27b_vllm_page(qwen38):
    """Qwen3.6-27B (= the seed's Qwen3.8-27B architecture), TP1 fp8 KV."""
    st = cap.linear_state(qwen38, engine="vllm")
    assert st.conv_bytes_per_layer == 61_440 and st.ssm_bytes_per_layer == 3_145_728
    assert st.page_bytes == 3_207_168
    vp = cap.vllm_pool(qwen38, 10 * GiB, kv_dtype="fp8", mode="align", max_model_len=32_768, version="0.20.0")
    assert vp.block_size == 1568
    assert f"{vp.padding_pct:.2f}" == "0.13"
    assert vp.blocks_per_request == 2
    # ref: concurrency 139 / (cdiv(32768,1568)=21 + 3x2) = 5.15
    vp139 = cap.vllm_pool(qwen38, 139 * vp.page_bytes * vp.group_size, kv_dtype="fp8", mode="align", max_model_len=32_768, version="0.20.0")
    assert vp139.num_blocks == 139 and f"{vp139.max_concurrency:.2f}" == "5.15"


def test_vllm_blocks_per_request():
    assert cap.vllm_blocks_per_request("none") == 1
    assert cap.vllm_blocks_per_request("none", 3) == 4
    assert cap.vllm_blocks_per_request("none", 3, version="0.14.0") == 1
    assert cap.vllm_blocks_per_request("align", 2) == 4
    with pytest.raises(ValueError):
        cap.vllm_blocks_per_request("all")


def test_nemotron_mamba2(nemo):
    st = cap.linear_state(nemo)
    assert st.conv_elements_per_layer == (8192 + 2 * 8 * 128) * 3
    assert st.ssm_elements_per_layer == 128 * 64 * 128
    assert st.ssm_dtype == "float32"
    # n_groups=8 at TP16 is padded up to 16 groups
    st16 = cap.linear_state(nemo, tp=16)
    assert st16.conv_elements_per_layer == (8192 + 2 * 16 * 128) // 16 * 3
    assert cap.kv_bytes_per_token(nemo) == 2 * 8 * 128 * 2 * 4


# ---------------------------------------------------------------- SGLang slots table and pool sizing (docs/formats/sglang.md#slots-per-running-request, #pool-size)


@pytest.mark.parametrize(
    "strategy,version,kw,expected",
    [
        ("disable", None, {}, 1),
        ("disable", "0.5.7", {}, 1),
        ("no_buffer", "0.5.2", {}, 1),  # radix forced off
        ("no_buffer", "0.5.3.post3", {}, 3),
        ("no_buffer", "0.5.7", {}, 5),  # 0.5.7 quirk
        ("no_buffer", "0.5.8", {}, 3),
        ("no_buffer", "0.5.19", {"skip_decode_lock": True}, 3),
        ("extra_buffer", "0.5.7", {}, 5),
        ("extra_buffer", "0.5.9", {"spec": True}, 4),
        ("extra_buffer", "0.5.12", {"overlap": False}, 4),
        ("extra_buffer", "0.5.12", {"overlap": True, "skip_decode_lock": True}, 5),  # env ignored before 0.5.17
        ("extra_buffer", "0.5.19", {}, 5),
        ("extra_buffer", "0.5.19", {"skip_decode_lock": True}, 4),
        ("extra_buffer", "0.5.19", {"overlap": False, "skip_decode_lock": True}, 3),
        ("extra_buffer", None, {"spec": True}, 5),
        ("extra_buffer_lazy", "0.5.13", {}, 4),
        ("extra_buffer_lazy", None, {"skip_decode_lock": True}, 3),
        ("auto", None, {}, 5),
        ("auto", None, {"overlap": False}, 3),
    ],
)
def test_sglang_slots_table(strategy, version, kw, expected):
    assert cap.sglang_slots_per_request(strategy, version, **kw) == expected


def test_sglang_slots_unsupported():
    with pytest.raises(ValueError):
        cap.sglang_slots_per_request("extra_buffer_lazy", "0.5.12")
    with pytest.raises(ValueError):
        cap.sglang_slots_per_request("extra_buffer", "0.5.6")
    with pytest.raises(ValueError):
        cap.sglang_slots_per_request("bogus")


def test_sglang_caps_from_reference():
    assert cap.sglang_mamba_cap(186, 3) == 62
    assert cap.sglang_mamba_cap(47, 5) == 9
    assert cap.sglang_mamba_cap(60, 3) == 20


def test_parse_version():
    """One parser (exporter/capacity/version.py) for the whole exporter: None on garbage, require_version raises."""
    from exporter.capacity import version

    parse_version = version.parse_version
    assert parse_version("0.5.3.post3") == (0, 5, 3, 3)
    assert parse_version("v0.5.19rc1") == (0, 5, 19, 0)
    assert parse_version("0.5.3") < parse_version("0.5.3.post3") < parse_version("0.5.4")
    assert parse_version("garbage") is None and parse_version(None) is None
    assert version.require_version(None, (0, 5, 23, 0)) == (0, 5, 23, 0)
    with pytest.raises(ValueError):
        version.require_version("garbage", (0, 5, 23, 0))
    with pytest.raises(ValueError):
        cap.sglang_slots_per_request("extra_buffer", "garbage")


def test_sglang_pool_formula():
    per_req = 29_039_616
    rest = 27 * GiB
    R = 0.15
    p = cap.sglang_pool(rest, per_req, 13_824, ratio=R, slots_per_request=5)
    budget = rest * R / (1 + R)
    assert p.mamba_slots == int((budget - per_req) // per_req)  # ≥0.5.17: one padding slot
    assert p.kv_bytes == rest - (p.mamba_slots + 1) * per_req
    assert p.kv_tokens == p.kv_bytes // 13_824
    assert p.mamba_cap == p.mamba_slots // 5
    old = cap.sglang_pool(rest, per_req, 13_824, ratio=R, slots_per_request=5, version="0.5.10")
    assert old.mamba_slots == int(budget // per_req) == p.mamba_slots + 1
    # the brief's S = floor(budget*R/(1+R)/per_req)
    assert old.mamba_slots == int(rest * R / (1 + R) / per_req)


def test_sglang_pool_cap_and_binding():
    p = cap.sglang_pool(10 * GiB, 100 * MiB, 16 * KiB, ratio=0.9, slots_per_request=5, max_running_requests=64, context_len=8192)
    assert p.bound_by == "mamba" and p.max_running_requests == p.mamba_cap < 64
    assert p.binding_pool == "mamba"
    # explicit slot count and radix-off sizing
    q = cap.sglang_pool(10 * GiB, 100 * MiB, 16 * KiB, max_mamba_cache_size=10, slots_per_request=5)
    assert q.mamba_slots == 10 and q.kv_bytes == 10 * GiB - 11 * 100 * MiB
    r = cap.sglang_pool(10 * GiB, 100 * MiB, 16 * KiB, radix=False, max_running_requests=7, slots_per_request=1)
    assert r.mamba_slots == 7 and r.max_running_requests == 7
    # does not fit
    z = cap.sglang_pool(1 * GiB, 600 * MiB, 16 * KiB, max_mamba_cache_size=4)
    assert not z.fits and z.kv_tokens == 0


def test_sglang_pool_spec():
    per_req, D, spr = 50 * MiB, 3, 5
    rest = 20 * GiB
    p = cap.sglang_pool(rest, per_req, 16 * KiB, ratio=1.0, slots_per_request=spr, spec_draft_tokens=D)
    budget = rest / 2
    assert p.mamba_slots == int((budget - per_req * (1 + D)) // (per_req * (1 + D / spr)))
    assert p.spec_intermediate_bytes == per_req * (p.mamba_slots // spr + 1) * D


def test_balanced_ratio_for_context():
    # kimi-k3 TP8 bf16 state, fp8 MLA KV, 16384+3072-token requests, extra_buffer
    r = cap.balanced_ratio_for_context(29_039_616, 5, 13_824, 19_456)
    assert r == pytest.approx(5 * 29_039_616 / (19_456 * 13_824))
    # at that ratio the two pools run out together (padding slot aside)
    p = cap.sglang_pool(27 * GiB, 29_039_616, 13_824, ratio=r, slots_per_request=5, context_len=19_456, version="0.5.10")
    assert abs(p.mamba_cap - p.requests_at_context) <= 1


# ---------------------------------------------------------------- log-driven projections


def seed_fp8_bf16() -> ObservedCapacity:
    """Seed incident 000: kimi-k3 TP8, fp8 KV + bf16 SSM, extra_buffer, usage 0.80 vs 0.11."""
    return ObservedCapacity(
        mamba_slots=80,
        slots_per_request=5,
        conv_bytes=0.14 * GiB,
        ssm_bytes=2.05 * GiB,
        kv_tokens=1_947_648,
        kv_bytes=25.08 * GiB,
        max_running_requests=16,
        mamba_full_memory_ratio=0.15,
        ssm_dtype="bfloat16",
        mamba_usage=0.80,
        kv_usage=0.11,
        kv_dtype="fp8_e4m3",
        requested_max_running_requests=64,
    )


def seed_bf16_fp32() -> ObservedCapacity:
    return ObservedCapacity(
        mamba_slots=51,
        slots_per_request=5,
        conv_bytes=0.09 * GiB,
        ssm_bytes=2.63 * GiB,
        kv_tokens=974_656,
        kv_bytes=25.10 * GiB,
        ssm_dtype="float32",
        kv_dtype="bfloat16",
        requested_max_running_requests=64,
    )


def test_project_ssm_bf16():
    o = seed_bf16_fp32()
    e = flags.effect_from_log(o, "--mamba-ssm-dtype", "bfloat16")
    assert e is not None
    # slots scale by (conv+ssm)/(conv+ssm/2) at the same mamba budget (52 allocated incl. padding)
    expect = int(52 * (0.09 + 2.63) / (0.09 + 2.63 / 2)) - 1
    assert e.mamba_slots_after == expect == 99
    assert (e.cap_before, e.cap_after) == (10, 19)
    assert e.summary.startswith("ssm bf16: mamba slots 51 → 99, cap 10 → 19")
    assert flags.effect_from_log(seed_fp8_bf16(), "--mamba-ssm-dtype", "bfloat16") is None  # already bf16


def test_ssm_dtype_under_an_explicit_slot_count_keeps_the_slots():
    """--max-mamba-cache-size fixes the slot count: SGLang keeps it when the SSM dtype halves the state (the real
    SGLang's Nemotron-H, tests/engine/test_sglang_nemotron_h.py: 3,000 slots and cap 1,000 at both boots, SSM
    0.37 -> 0.18 GB). Before: slots 51 -> 99 and cap 10 -> 19 promised, which the engine never gives."""
    o = dataclasses.replace(seed_bf16_fp32(), explicit_mamba_size=True)
    e = flags.effect_from_log(o, "--mamba-ssm-dtype", "bfloat16")
    assert (e.mamba_slots_before, e.mamba_slots_after) == (51, 51)
    assert (e.cap_before, e.cap_after) == (10, 10)
    assert "--max-mamba-cache-size fixes the slot count" in e.summary


def test_project_ssm_halving_example():
    """The brief's example: ssm-only state (conv negligible) doubles the slots."""
    o = ObservedCapacity(mamba_slots=80, slots_per_request=5, conv_bytes=0.0, ssm_bytes=81 * 100 * MiB, ssm_dtype="float32")
    e = flags.effect_from_log(o, "--mamba-ssm-dtype", "bfloat16")
    assert e.mamba_slots_after == 161  # 81 slots' worth of bytes -> 162 allocated, 1 padding
    assert e.summary == "ssm bf16: mamba slots 80 → 161, cap 16 → 32 (ssm fp32 → bf16: state 100.00 MiB → 50.00 MiB per slot)"


def test_balanced_ratio_from_usage():
    o = seed_fp8_bf16()
    # the seed's pools are not the model's for its ratio (80 slots logged at 0.15, the arithmetic gives 130): the
    # ratio scales like the pools (issue 21.3) ...
    assert cap.ratio_model_check(o)["model_slots"] == 130 and not cap.ratio_model_check(o)["agrees"]
    assert cap.balanced_mamba_full_memory_ratio(o) == pytest.approx(0.15 * 0.80 / 0.11)
    # ... where they are, the bytes give the split
    total = o.state_bytes + o.kv_bytes
    agreeing = dataclasses.replace(o, mamba_full_memory_ratio=o.state_bytes / o.kv_bytes)
    assert cap.ratio_model_check(agreeing)["agrees"] and total
    assert cap.balanced_mamba_full_memory_ratio(agreeing) == pytest.approx(0.80 * 2.19 / (0.11 * 25.08))
    # fallback without pool bytes: scale the current ratio
    o2 = ObservedCapacity(mamba_full_memory_ratio=0.15, mamba_usage=0.8, kv_usage=0.1)
    assert cap.balanced_mamba_full_memory_ratio(o2) == pytest.approx(1.2)
    assert cap.balanced_mamba_full_memory_ratio(ObservedCapacity(mamba_usage=0.8, kv_usage=0.0)) is None
    assert cap.balanced_mamba_full_memory_ratio(ObservedCapacity()) is None


def test_project_ratio_balances_usages():
    o = seed_fp8_bf16()
    r = cap.balanced_mamba_full_memory_ratio(o)
    e = flags.effect_from_log(o, "--mamba-full-memory-ratio", r)
    assert e is not None and e.mamba_slots_after > 80 and e.kv_tokens_after < o.kv_tokens
    used_slots = 0.80 * 80
    used_tokens = 0.11 * o.kv_tokens
    assert used_slots / e.mamba_slots_after == pytest.approx(used_tokens / e.kv_tokens_after, rel=0.02)
    assert e.cap_after == min(e.mamba_slots_after // 5, 64)
    # value omitted -> balanced ratio
    assert flags.effect_from_log(o, "mamba_full_memory_ratio").mamba_slots_after == e.mamba_slots_after


def test_prediction_scaled_from_the_logged_pools_when_model_and_log_disagree():
    """Issue 21.3: seed 000 logs ratio 0.15 with 80 mamba slots where the ratio arithmetic gives 130; a prediction for
    another ratio starts from the logged 80 (scaled by the model's ratio of the new to the old split) and says so."""
    o = seed_fp8_bf16()
    e = flags.effect_from_log(o, "--mamba-full-memory-ratio", "0.5")
    unscaled = int(27.27 * GiB * 0.5 / 1.5 // (2.19 * GiB / 81)) - 1  # what the arithmetic alone would say: 335
    assert e.scaled and e.model_gap == pytest.approx(-50 / 130, abs=0.01)
    assert e.mamba_slots_after == round(80 * unscaled / 130) and e.mamba_slots_after < unscaled
    assert e.kv_tokens_after == int(o.kv_tokens * 1.15 / 1.5)
    assert "model and log disagree by -38 % (the model gives 130 mamba slots for ratio 0.15, the log 80)" in e.summary
    # 50 % or more apart: withheld
    far = dataclasses.replace(o, mamba_full_memory_ratio=0.05)  # the arithmetic: 47 slots, the log 80
    assert flags.effect_from_log(far, "--mamba-full-memory-ratio", "0.5") is None
    # --max-mamba-cache-size sizes the pool: the ratio moves nothing, no prediction
    assert flags.effect_from_log(dataclasses.replace(o, explicit_mamba_size=True), "--mamba-full-memory-ratio", "0.5") is None


def test_project_ratio_total_preserved():
    o = seed_fp8_bf16()
    o = dataclasses.replace(o, mamba_full_memory_ratio=o.state_bytes / o.kv_bytes)  # a log the ratio arithmetic agrees with
    e = flags.effect_from_log(o, "--mamba-full-memory-ratio", 0.5)
    assert not e.scaled
    slot = (2.19 * GiB) / 81
    total = 2.19 * GiB + 25.08 * GiB
    assert e.mamba_slots_after == int(total * 0.5 / 1.5 // slot) - 1
    assert e.kv_tokens_after == int((total - (e.mamba_slots_after + 1) * slot) // (25.08 * GiB / o.kv_tokens))


def test_project_max_mamba_cache_size():
    o = seed_fp8_bf16()
    e = flags.effect_from_log(o, "--max-mamba-cache-size", 320)
    assert (e.mamba_slots_after, e.cap_after) == (320, 64)
    assert e.kv_tokens_after < o.kv_tokens
    huge = flags.effect_from_log(o, "--max-mamba-cache-size", 5000)
    assert huge.kv_tokens_after == 0 and "does not fit" in huge.summary and not huge.unproven


def test_project_max_mamba_cache_size_behind_max_total_tokens():
    """A KV pool at an explicit --max-total-tokens was cut there: the memory behind the cut is not in the log, so for a
    larger mamba pool the effect neither says "does not fit" nor predicts the KV pool: what it needs is unproven (a
    caveat that holds the advice). A smaller mamba pool leaves the KV pool at the limit (it cannot grow past the flag).
    The real SGLang: fixtures/engine/sglang-cpu-0.5.23/sglang-nemotron-h.log, docs/engine-suite.md."""
    o = dataclasses.replace(seed_fp8_bf16(), kv_token_limit=1_947_648)
    huge = flags.effect_from_log(o, "--max-mamba-cache-size", 5000)
    assert huge.kv_tokens_after is None and (huge.mamba_slots_after, huge.cap_after) == (5000, 64)
    assert "does not fit" not in huge.summary and not huge.notes
    grow = (5001 - 81) * (2.19 * GiB / 81) / GiB
    (unproven,) = huge.unproven
    assert unproven == (
        f"the KV pool is cut at --max-total-tokens 1,947,648: whether {grow:.2f} GiB more is free behind the cut is not "
        "in the log (SGLang refuses to start when it is not)"
    )
    small = flags.effect_from_log(o, "--max-mamba-cache-size", 40)
    assert small.kv_tokens_after == o.kv_tokens and not small.unproven and "stays at --max-total-tokens" in small.summary
    # a pool under the limit was not cut by it: the logged pools are the split memory, as without the flag
    under = dataclasses.replace(o, kv_token_limit=2_000_000)
    assert (
        flags.effect_from_log(under, "--max-mamba-cache-size", 5000).summary
        == flags.effect_from_log(seed_fp8_bf16(), "--max-mamba-cache-size", 5000).summary
    )


def test_project_skip_lock_lazy_disable():
    o = seed_fp8_bf16()
    e = flags.effect_from_log(o, "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", "1")
    assert (e.slots_per_request_after, e.cap_after) == (4, 20)
    assert "slots/request 5 → 4" in e.summary and "cap 16 → 20" in e.summary
    assert flags.effect_from_log(o, "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1").cap_after == 20
    lazy = flags.effect_from_log(o, "--mamba-radix-cache-strategy", "extra_buffer_lazy")
    assert (lazy.slots_per_request_after, lazy.cap_after) == (4, 20)
    off = flags.effect_from_log(o, "--disable-radix-cache")
    assert (off.slots_per_request_after, off.cap_after) == (1, 64)
    # no_buffer: skip lock does not help (2 + 1)
    nb = ObservedCapacity(mamba_slots=186, slots_per_request=3, radix_strategy="no_buffer")
    assert flags.effect_from_log(nb, "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", "1") is None
    assert flags.effect_from_log(nb, "--mamba-radix-cache-strategy", "extra_buffer_lazy") is None


def test_project_kv_fp8_and_vllm_flags():
    o = seed_bf16_fp32()
    e = flags.effect_from_log(o, "--kv-cache-dtype", "fp8")
    assert e.kv_tokens_after == 2 * 974_656
    assert flags.effect_from_log(seed_fp8_bf16(), "--kv-cache-dtype", "fp8_e4m3") is None
    v = ObservedCapacity(engine="vllm", mamba_slots=7162, slots_per_request=3, padding_slots=0, max_running_requests=256)
    m = flags.effect_from_log(v, "--max-num-seqs", 8)
    assert (m.cap_before, m.cap_after) == (256, 8)
    assert flags.effect_from_log(v, "--language-model-only") is None
    assert flags.effect_from_log(v, "--no-such-flag", 1) is None
    assert flags.effect_from_log(ObservedCapacity(), "--mamba-ssm-dtype", "bfloat16") is None


# ---------------------------------------------------------------- config-driven plan and effects


def test_make_plan_kimi_sglang(kimi):
    inp = cap.PlanInputs(
        engine="sglang",
        tp=8,
        budget_bytes=int(27.3 * GiB),
        kv_dtype="fp8",
        ssm_dtype="bfloat16",
        ratio=0.15,
        radix_strategy="extra_buffer",
        context_len=19_456,
        max_running_requests=64,
    )
    p = cap.make_plan(kimi, inp)
    assert p.slots_per_request == 5
    assert p.state.per_request == 29_039_616
    assert p.sglang.mamba_cap == p.sglang.mamba_slots // 5
    assert p.binding_pool == "mamba"
    effects = {e.flag: e for e in flags.plan_effects(kimi, inp)}
    assert "--mamba-ssm-dtype" not in effects and "--kv-cache-dtype" not in effects  # already set
    assert effects["SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK"].slots_per_request_after == 4
    assert effects["--mamba-full-memory-ratio"].cap_after > p.cap
    assert effects["--max-mamba-cache-size"].value == str(64 * 5)


def test_flag_effect_ssm_bf16_from_config(qwen38):
    inp = cap.PlanInputs(engine="sglang", budget_bytes=20 * GiB, kv_dtype="fp8", context_len=32_768)
    e = flags.effect_from_plan(qwen38, inp, "--mamba-ssm-dtype", "bfloat16")
    assert e is not None and e.mamba_slots_after >= 2 * e.mamba_slots_before - 2
    assert e.summary.startswith("ssm bf16: mamba slots")
    assert flags.effect_from_plan(qwen38, inp, "--max-num-seqs", 8) is None  # vLLM flag on SGLang


def test_flag_effect_vllm(qwen38):
    inp = cap.PlanInputs(engine="vllm", budget_bytes=10 * GiB, context_len=32_768, max_running_requests=256)
    effects = {e.flag: e for e in flags.plan_effects(qwen38, inp)}
    # --max-num-seqs down to what the pool runs changes nothing: the cap is the pool's already (issue 21.6)
    assert set(effects) == {"--kv-cache-dtype", "--mamba-ssm-cache-dtype", "--language-model-only"}
    assert effects["--kv-cache-dtype"].kv_tokens_after > effects["--kv-cache-dtype"].kv_tokens_before
    nothing = flags.effect_from_plan(qwen38, inp, "--max-num-seqs")
    assert nothing is not None and nothing.changes_nothing and int(nothing.value) < 256
    assert not any(e.changes_nothing for e in flags.plan_effects(qwen38, inp))


# ---------------------------------------------------------------- engine disagreements (issue 15)


def test_sglang_ignores_kimi_config_ssm_dtype(kimi):
    cfg = cap.load_config(CONFIGS / "kimi-k3.json")
    cfg["text_config"]["mamba_ssm_dtype"] = "bfloat16"
    m = cap.model_from_config(cfg)
    assert m.family == "kimi" and m.config_ssm_dtype == "bfloat16"
    assert cap.linear_state(m, 8, engine="sglang").ssm_dtype == "float32"
    assert cap.linear_state(m, 8, "bfloat16", engine="sglang").ssm_dtype == "bfloat16"
    # a Qwen3.5 config's dtype is read by both engines; Qwen3-Next's only by SGLang
    q = cap.load_config(CONFIGS / "qwen3-next-80b-a3b.json")
    q["mamba_ssm_dtype"] = "float32"
    qn = cap.model_from_config(q)
    assert cap.resolve_ssm_dtype(qn, "sglang") == "float32" and cap.resolve_ssm_dtype(qn, "vllm") == "bfloat16"


def test_kimi_fixture_is_nested_like_the_engines_read_it(kimi):
    cfg = cap.load_config(CONFIGS / "kimi-k3.json")
    assert cfg["architectures"] == ["KimiK3ForConditionalGeneration"] and "linear_attn_config" in cfg["text_config"]
    assert "synthetic" in cfg["_fixture"]
    assert (kimi.full_layers, kimi.linear_layers, kimi.context_length) == (24, 69, 262_144)


def test_sglang_context_fallback_and_4096_ceiling(qwen38):
    inp = cap.PlanInputs(engine="sglang", tp=8, budget_bytes=70 * GiB, kv_dtype="fp8", ssm_dtype="bfloat16", radix_strategy="disable")
    p = cap.make_plan(qwen38, inp)
    assert p.sglang.context_len == 262_144  # max_position_embeddings
    short = cap.make_plan(qwen38, replace(inp, context_len=1024, ratio=1.5))
    assert short.sglang.mamba_cap > 4096 and short.sglang.kv_tokens // 2 > 4096
    assert short.sglang.max_running_requests == 4096 and short.sglang.bound_by == "estimate"
    asked = cap.make_plan(qwen38, replace(inp, context_len=1024, ratio=1.5, max_running_requests=5000))
    assert asked.sglang.max_running_requests == 5000


def test_vllm_defaults_align_with_checkpoint_blocks(qwen38, nemo, kimi):
    assert cap.vllm_default_mode() == "align" and cap.vllm_default_mode("0.25.0") == "none"
    assert cap.vllm_default_mode(prefix_caching=False) == "none"
    assert cap.vllm_pool(nemo, 40 * GiB, max_model_len=8192).blocks_per_request == 3
    # Mamba2's prefill checkpoint block is in 0.32.0 already (a real Nemotron-H log of the CPU build); GDN's from 0.33
    assert cap.vllm_pool(nemo, 40 * GiB, max_model_len=8192, version="0.32.0").blocks_per_request == 3
    assert cap.vllm_pool(nemo, 40 * GiB, max_model_len=8192, version="0.31.0").blocks_per_request == 2
    assert cap.vllm_pool(kimi, 27 * GiB, tp=8, kv_dtype="fp8").blocks_per_request == 2  # triton KDA prefill
    assert cap.vllm_pool(kimi, 27 * GiB, tp=8, kv_dtype="fp8").block_size % 128 == 0
    assert cap.vllm_pool(kimi, 27 * GiB, tp=8, kv_dtype="fp8", version="0.19.0").block_size % 64 == 0
    # Blackwell's GQA backend (FlashInfer) keeps 16-token kernel blocks: the Hopper block in mode none
    bw = cap.vllm_pool(qwen38, 10 * GiB, kv_dtype="fp8", platform="blackwell", mode="none")
    assert bw.block_size == cap.vllm_pool(qwen38, 10 * GiB, kv_dtype="fp8", mode="none").block_size
    assert cap.vllm_pool(qwen38, 10 * GiB, kv_dtype="fp8", platform="blackwell", mode="align").block_size % 64 == 0


def test_vllm_group_size_rule():
    assert cap.vllm_group_size(16, 48) == 16
    assert cap.vllm_group_size(20, 28) == 28  # within 1.5x: the larger count, the attention group padded
    assert cap.vllm_group_size(24, 24) == 24
