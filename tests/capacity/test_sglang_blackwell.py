"""SGLang's page size on Blackwell (issue 21.7), as the released code of 0.5.15-0.5.23 picks it when none is given:
``arg_groups/model_overrides/qwen3_5.py`` (before 0.5.19 ``arg_groups/overrides.py``) keeps Triton and page 1 for
Qwen GDN models with the radix cache on, no extra buffer and no speculative decoding; the TRT-LLM backends it picks
otherwise take 64 (``_mla_backend_page_constraints``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from exporter import capacity as cap

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "configs"


@pytest.fixture(scope="module")
def qwen():
    return cap.load_model(str(CONFIGS / "qwen3.8-27b.json"))


def test_qwen_keeps_page_1_with_no_buffer_radix_and_no_speculation(qwen):
    assert cap.sglang_page_size(qwen, "blackwell", "no_buffer", spec=False) == 1
    assert cap.sglang_page_size(qwen, "blackwell", "extra_buffer", spec=False) == 64
    assert cap.sglang_page_size(qwen, "blackwell", "extra_buffer_lazy", spec=False) == 64
    assert cap.sglang_page_size(qwen, "blackwell", "no_buffer", spec=True) == 64
    assert cap.sglang_page_size(qwen, "blackwell", "disable", spec=False) == 64  # radix off: trtllm_mha
    assert cap.sglang_page_size(qwen, "hopper", "extra_buffer", spec=True) == 1


def test_nemotron_h_by_release_and_kimi_k3(qwen):
    nem = replace(qwen, architecture="NemotronHForCausalLM", model_type="nemotron_h")
    assert cap.sglang_page_size(nem, "blackwell", "extra_buffer", spec=False, version="0.5.18") == 1  # flashinfer
    assert cap.sglang_page_size(nem, "blackwell", "extra_buffer", spec=False, version="0.5.19") == 64  # trtllm_mha
    k3 = cap.load_model(str(CONFIGS / "kimi-k3.json"))
    assert cap.sglang_page_size(k3, "blackwell", "extra_buffer", spec=False) == 64


def test_the_plan_uses_it(qwen):
    base = cap.PlanInputs(engine="sglang", budget_bytes=40 * cap.GiB, platform="blackwell")
    for strategy, page in (("no_buffer", 1), ("extra_buffer", 64)):
        blackwell = cap.make_plan(qwen, replace(base, radix_strategy=strategy)).sglang.kv_tokens
        hopper = cap.make_plan(qwen, replace(base, radix_strategy=strategy, platform="hopper")).sglang.kv_tokens
        assert blackwell == hopper // page * page, strategy
    assert hopper % 64  # the floor to 64 is visible
