"""The capacity model against the oracle for every family of the catalogue (issue 36): the new families' configs
sized twice, with ``exporter.capacity`` and with the oracle's transcription of each engine class
(tests/oracle/vllm_families.py, sglang_families.py, reached through the oracle's pool steps). The existing grids of
test_oracle.py are untouched; vLLM's own functions check the same figures in tests/engine/test_family_shapes.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter import capacity as cap
from exporter.capacity import families
from tests.capacity.oracle_pairs import GiB, same_pools, sglang_pair, vllm_pair
from tests.oracle import sglang_0_5_23 as sg
from tests.oracle import sglang_families as sgf
from tests.oracle import vllm_0_33_0 as vl
from tests.oracle import vllm_families as vlf

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "configs"
NEW = sorted({f.fixture for f in families.CATALOGUE if f.fixture} - {"qwen3.8-27b", "qwen3-next-80b-a3b", "nemotron-h-8b", "kimi-k3"})


def raw(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def model(name: str) -> cap.ModelSpec:
    return cap.model_from_config(raw(name), name=name)


def _served(name: str, engine: str) -> bool:
    return model(name).refusal(engine) is None


def _tps(name: str, engine: str) -> list[int]:
    """The TPs the engine's divisibility checks accept for this config (its oracle raises on the others)."""
    out = []
    for tp in (1, 2, 4, 8):
        try:
            vl.mamba_page_size(raw(name), tp) if engine == "vllm" else sg.mamba_cache_per_req(raw(name), tp, None)
        except AssertionError:
            continue
        out.append(tp)
    return out


STATE = [(n, e, tp) for n in NEW for e in ("vllm", "sglang") if _served(n, e) for tp in _tps(n, e)]


@pytest.mark.parametrize("case", STATE, ids=["-".join(map(str, c)) for c in STATE])
def test_state_per_request_matches_oracle(case):
    name, engine, tp = case
    cfg, m = raw(name), model(name)
    if engine == "vllm":
        n_attn, n_state = vlf.layer_counts(cfg) if vlf.family(cfg) else vl.layer_counts(cfg)
        for ssm in ("auto", "bfloat16", "float32"):
            st = cap.linear_state(m, tp, None if ssm == "auto" else ssm, engine="vllm")
            assert st.page_bytes == vl.mamba_page_size(cfg, tp, ssm), ssm
        assert (m.full_layers, m.linear_layers) == (n_attn, n_state)
    else:
        full, lin = sgf.layers(cfg) if sgf.family(cfg) else (None, None)
        for ssm in (None, "bfloat16"):
            assert cap.linear_state(m, tp, ssm, engine="sglang").per_request == sg.mamba_cache_per_req(cfg, tp, ssm), ssm
        if full is not None:
            v = m.for_engine("sglang")
            assert (v.full_layers, v.linear_layers) == (len(full), len(lin))


def _pooled(engine: str) -> list[str]:
    return [n for n in NEW if _served(n, engine) and not model(n).attention_free]


# (model, tp index into the accepted TPs, rest/available GiB, kv dtype, ssm dtype, strategy / prefix caching, context)
SGLANG_GRID = [
    (n, i, rest, kv, ssm, strat, ctx)
    for n in _pooled("sglang")
    for i, rest, kv, ssm, strat, ctx in (
        (0, 40.0, "bfloat16", None, "extra_buffer", None),
        (1, 30.0, "fp8", "bfloat16", "no_buffer", 32768),
        (-1, 60.0, "bfloat16", None, "disable", 8192),
    )
]


@pytest.mark.parametrize("case", SGLANG_GRID, ids=[f"sglang-{c[0]}-{c[5]}" for c in SGLANG_GRID])
def test_sglang_pools_match_oracle(case):
    name, i, rest_gib, kv, ssm, strategy, ctx = case
    tps = _tps(name, "sglang")
    kw = dict(tp=tps[i if i < len(tps) else -1], rest=int(rest_gib * GiB), kv=kv, ssm=ssm, strategy=strategy, ctx=ctx)
    same_pools(*sglang_pair(model(name), raw(name), sg, **kw))


VLLM_GRID = [
    (n, i, avail, kv, ssm, pc, mml, platform)
    for n in _pooled("vllm")
    for i, avail, kv, ssm, pc, mml, platform in (
        (0, 20.0, "bfloat16", "auto", True, 32768, "hopper"),
        (1, 30.0, "fp8", "bfloat16", False, 65536, "hopper"),
        (-1, 40.0, "bfloat16", "float32", True, 131072, "blackwell"),
        (0, 1.0, "bfloat16", "auto", True, 2048, "cpu"),
    )
]


@pytest.mark.parametrize("case", VLLM_GRID, ids=[f"vllm-{c[0]}-{c[7]}-{'align' if c[5] else 'none'}" for c in VLLM_GRID])
def test_vllm_pools_match_oracle(case):
    name, i, avail_gib, kv, ssm, pc, mml, platform = case
    tps = _tps(name, "vllm")
    kw = dict(tp=tps[i if i < len(tps) else -1], avail=int(avail_gib * GiB), kv=kv, ssm=ssm, pc=pc, mml=mml, platform=platform)
    got, want = vllm_pair(model(name), raw(name), vl, "0.33.0", **kw)  # the release of the oracle module
    assert got == want


def test_grids_cover_every_family():
    served = {e: {n for n in NEW if _served(n, e)} for e in ("vllm", "sglang")}
    assert {c[0] for c in STATE if c[1] == "vllm"} == served["vllm"]
    assert {c[0] for c in STATE if c[1] == "sglang"} == served["sglang"]
    assert {c[0] for c in VLLM_GRID} | {n for n in NEW if model(n).attention_free} == served["vllm"]
    assert {c[0] for c in SGLANG_GRID} | {n for n in NEW if model(n).attention_free} >= served["sglang"]
