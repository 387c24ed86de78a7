"""The family catalogue (exporter/capacity/families.py): every hybrid family read as its engine classes read it, or
refused with its name; never a hybrid planned as dense (issue 36).

The per-family figures are proven against vLLM's own functions by tests/engine/test_family_shapes.py and against the
oracle's transcription of both engines by tests/capacity/test_oracle.py; these tests hold the rules that need no
engine: what each reader counts from the config itself, the refusals and their words, the engine views.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter import capacity as cap
from exporter.advice.plan import PlanRequest, UsageError, build
from exporter.capacity import families

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "configs"


def raw(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def model(name: str) -> cap.ModelSpec:
    return cap.model_from_config(raw(name), name=name)


def _types(cfg: dict, key: str, kinds: tuple[str, ...]) -> int:
    return sum(1 for t in cfg[key] if t in kinds)


def test_layouts_follow_each_classs_rule():
    """The layer counts each reader gives, counted here from the fixture by the class's own rule."""
    g = raw("granite-4.0-h-small")
    m = model("granite-4.0-h-small")
    assert (m.full_layers, m.linear_layers, m.linear_kind) == (
        _types(g, "layer_types", ("attention",)),
        _types(g, "layer_types", ("mamba",)),
        "mamba2",
    )
    f = raw("falcon-h1-7b")
    m = model("falcon-h1-7b")  # attention and a Mamba2 mixer in every layer
    assert (m.num_layers, m.full_layers, m.linear_layers) == (f["num_hidden_layers"],) * 3
    j = raw("jamba-1.5-mini")
    m = model("jamba-1.5-mini")
    attn = sum(1 for i in range(j["num_hidden_layers"]) if i % j["attn_layer_period"] == j["attn_layer_offset"])
    assert (m.full_layers, m.linear_layers, m.linear_kind) == (attn, j["num_hidden_layers"] - attn, "mamba1")
    z = raw("zamba2-2.7b")
    m = model("zamba2-2.7b")  # Mamba2 in every layer, attention in the hybrid ones
    assert (m.full_layers, m.linear_layers) == (_types(z, "layers_block_type", ("hybrid",)), z["num_hidden_layers"])
    assert (m.num_kv_heads, m.head_dim) == (z["num_attention_heads"], z["attention_head_dim"])
    lf = raw("lfm2-1.2b")
    m = model("lfm2-1.2b")
    assert (m.full_layers, m.linear_layers, m.linear_kind) == (
        _types(lf, "layer_types", ("full_attention",)),
        _types(lf, "layer_types", ("conv",)),
        "short_conv",
    )
    b = raw("ling-2.5-linear")
    m = model("ling-2.5-linear")
    full = b["num_hidden_layers"] // b["layer_group_size"]
    assert (m.full_layers, m.linear_layers, m.linear_kind, m.attention) == (full, b["num_hidden_layers"] - full, "lightning", "mla")
    for name in ("mamba-2.8b", "mamba-codestral-7b"):
        m = model(name)
        assert m.attention_free and m.linear_layers == raw(name)["num_hidden_layers"]


def test_transformers_5_layer_type_spellings():
    """transformers 5 rewrites Granite's and Zamba2's legacy layer types (mamba -> linear_attention, attention ->
    full_attention); vLLM reads either, so does the reader."""
    g = raw("granite-4.0-h-small")
    new = dict(g, layer_types=["full_attention" if t == "attention" else "linear_attention" for t in g["layer_types"]])
    a, b = cap.model_from_config(g), cap.model_from_config(new)
    assert (a.full_layers, a.linear_layers) == (b.full_layers, b.linear_layers)
    z = raw("zamba2-2.7b")
    z2 = dict(z, layers_block_type=["hybrid" if t == "hybrid" else "linear_attention" for t in z["layers_block_type"]])
    assert cap.model_from_config(z2).full_layers == cap.model_from_config(z).full_layers


def test_falcon_h1_takes_mamba_d_ssm_before_expand():
    """vLLM's FalconH1 class: ``mamba_d_ssm`` when set, else ``int(mamba_expand * hidden_size)``; the issue's 7B
    holds about 67 MiB of state per request (44 layers x (conv 3 x 3584 + SSM 24 x 128 x 256) x 2 B)."""
    f = raw("falcon-h1-7b")
    st = cap.linear_state(model("falcon-h1-7b"), engine="vllm")
    conv = (f["mamba_d_ssm"] + 2 * f["mamba_n_groups"] * f["mamba_d_state"]) * (f["mamba_d_conv"] - 1)
    ssm = f["mamba_n_heads"] * f["mamba_d_head"] * f["mamba_d_state"]
    assert st.per_request == f["num_hidden_layers"] * (conv + ssm) * 2
    assert 66 * cap.MiB < st.per_request < 68 * cap.MiB
    wide = cap.linear_state(cap.model_from_config(dict(f, mamba_d_ssm=None)), engine="vllm")
    assert wide.conv_elements_per_layer == (f["mamba_expand"] * f["hidden_size"] + 2 * f["mamba_d_state"]) * (f["mamba_d_conv"] - 1)


def test_lfm2_conv_width_by_engine_and_no_ssm_state():
    """vLLM's Lfm2 takes ``conv_dim``, SGLang's ``hidden_size``; neither has an SSM state (no dtype, no lever)."""
    cfg = dict(raw("lfm2-1.2b"), conv_dim=1024)
    m = cap.model_from_config(cfg)
    v, s = cap.linear_state(m, engine="vllm"), cap.linear_state(m, engine="sglang")
    k1 = cfg["conv_L_cache"] - 1
    assert (v.conv_elements_per_layer, s.conv_elements_per_layer) == (1024 * k1, cfg["hidden_size"] * k1)
    assert v.ssm_bytes == s.ssm_bytes == 0 and v.ssm_dtype is None is s.ssm_dtype
    fam = families.BY_KEY["lfm2"]
    assert not fam.has_ssm_lever("vllm") and not fam.has_ssm_lever("sglang")


def test_bailing_v3_layer_counts_differ_by_engine_at_the_tail():
    """vLLM counts the layers past the last whole group as attention; SGLang by ``(i + 1) % group`` alone."""
    cfg = raw("ling-v3-kda")
    n, g = cfg["num_hidden_layers"], cfg["layer_group_size"]
    assert n % g  # the fixture has a tail
    m = model("ling-v3-kda")
    sg = m.for_engine("sglang")
    assert m.linear_layers == n // g * (g - 1)
    assert sg.linear_layers == sum(1 for i in range(n) if (i + 1) % g)
    assert sg.full_layers + sg.linear_layers == m.full_layers + m.linear_layers == n


@pytest.mark.parametrize(
    "family, engine, asked, want",
    [
        ("ling-v3-kda", "vllm", "bfloat16", "float32"),  # the class passes no SSM dtype: KDA float32 whatever the flag
        ("ling-v3-kda", "sglang", "bfloat16", "bfloat16"),
        ("ling-2.5-linear", "vllm", "float32", "bfloat16"),  # linear attention in the model dtype
        ("ling-2.5-linear", "sglang", None, "float32"),
        ("granite-4.0-h-small", "vllm", None, "bfloat16"),  # conv dtype on auto
        ("granite-4.0-h-small", "sglang", None, "float32"),
        ("minicpm-v-4.6", "vllm", None, "bfloat16"),  # no Qwen3.5 hook for its architecture: the text config is not read
        ("minicpm-v-4.6", "sglang", None, "float32"),  # SGLang's Qwen3-Next config reads it
        ("falcon-h1-7b", "sglang", None, "float32"),
    ],
)
def test_ssm_dtype_by_family_and_engine(family, engine, asked, want):
    assert cap.resolve_ssm_dtype(model(family), engine, asked) == want


def test_engines_that_do_not_serve_a_family_refuse_it():
    for name in ("jamba-1.5-mini", "zamba2-2.7b", "olmo-hybrid"):
        with pytest.raises(cap.ConfigError, match="SGLang 0.5.23 does not serve"):
            build(PlanRequest(config=str(CONFIGS / f"{name}.json"), engine="sglang", kv_budget=10))
    with pytest.raises(cap.ConfigError, match="intermediate_size"):
        build(PlanRequest(config=str(CONFIGS / "mamba-codestral-7b.json"), engine="sglang"))


def test_attention_free_models_get_their_state_and_no_pool():
    plan, effects, notes = build(PlanRequest(config=str(CONFIGS / "mamba-2.8b.json"), engine="vllm", kv_budget=10))
    assert plan.vllm is None and plan.state.per_request > 0 and not effects
    assert any("attention-free" in n for n in notes)


def test_unknown_recurrent_family_is_refused_naming_it():
    """The issue's case: an architecture nobody knows with recurrent-state fields is no dense model."""
    cfg = {
        "architectures": ["FooSSMForCausalLM"],
        "model_type": "foo_ssm",
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "hidden_size": 2048,
        "ssm_layer_indices": [0, 1, 2, 4, 5, 6],
        "ssm_state_size": 64,
    }
    with pytest.raises(cap.ConfigError) as e:
        cap.model_from_config(cfg)
    assert "FooSSMForCausalLM" in str(e.value) and "ssm_layer_indices" in str(e.value) and "ssm_state_size" in str(e.value)
    # a linear layer kind without GDN keys (Granite's config read without its architecture) names the kind
    g = {k: v for k, v in raw("granite-4.0-h-small").items() if k not in ("architectures", "model_type")}
    with pytest.raises(cap.ConfigError, match="mamba.*linear_num_value_heads"):
        cap.model_from_config(g)


@pytest.mark.parametrize("fam", [f for f in families.CATALOGUE if f.refused], ids=lambda f: f.key)
def test_families_the_engines_serve_and_the_model_does_not_are_refused_by_name(fam):
    cfg = {"architectures": [fam.architectures[0]], "num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 256}
    with pytest.raises(cap.ConfigError) as e:
        cap.model_from_config(cfg)
    assert fam.architectures[0] in str(e.value) and fam.title in str(e.value)


@pytest.mark.parametrize(
    "name, drop",
    [
        ("granite-4.0-h-small", "layer_types"),
        ("granite-4.0-h-small", "mamba_d_state"),
        ("lfm2-1.2b", "conv_dim"),
        ("zamba2-2.7b", "layers_block_type"),
        ("ling-v3-kda", "short_conv_kernel_size"),
    ],
)
def test_a_missing_field_is_named(name, drop):
    cfg = {k: v for k, v in raw(name).items() if k != drop}
    with pytest.raises(cap.ConfigError) as e:
        cap.model_from_config(cfg)
    assert drop in str(e.value) and raw(name)["architectures"][0] in str(e.value)


@pytest.mark.parametrize(
    "cfg",
    [
        {
            "architectures": ["LlamaForCausalLM"],
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "hidden_size": 4096,
        },
        {
            "architectures": ["Gemma3ForCausalLM"],
            "num_hidden_layers": 6,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
        },
    ],
)
def test_dense_only_without_recurrent_fields(cfg):
    m = cap.model_from_config(cfg)
    assert not m.is_hybrid and m.full_layers == cfg["num_hidden_layers"] and not families.recurrent_fields(cfg)


def test_family_read_from_nested_text_config_and_model_type():
    """``--config`` takes the family from ``architectures``, else the ``model_type`` (the text config's too)."""
    f = raw("falcon-h1-7b")
    no_arch = {k: v for k, v in f.items() if k != "architectures"}
    nested = {"model_type": "some_vl", "architectures": ["SomeVLForConditionalGeneration"], "text_config": no_arch}
    for cfg in (no_arch, nested):
        m = cap.model_from_config(cfg)
        assert (m.family, m.linear_layers) == ("falcon_h1", f["num_hidden_layers"])
    assert model("minicpm-v-4.6").family == "minicpmv4_6"  # the architecture, not the text config's qwen3_5_text


def test_catalogue_is_consistent():
    archs = [a for f in families.CATALOGUE for a in f.architectures]
    assert len(archs) == len(set(archs))
    for f in families.CATALOGUE:
        assert f.engines, f.key
        assert bool(f.refused) != bool(f.fixture), f.key  # a modelled family names its proving fixture
        if f.fixture:
            assert (CONFIGS / f"{f.fixture}.json").exists(), f.fixture
            assert model(f.fixture).family == f.key


def test_replayssm_rings_where_the_class_appends_them():
    """``--use-replayssm``: Nemotron-H's state gains x / dt / B rings of the buffer length (vLLM's own functions check
    the bytes: tests/engine/test_family_shapes.py); the other families are refused, and so is speculative decoding
    with it (FlashInfer's longer ring)."""
    nemo = CONFIGS / "nemotron-h-8b.json"
    base, _, _ = build(PlanRequest(config=str(nemo), engine="vllm", kv_budget=20, context_len=8192))
    ring, _, _ = build(PlanRequest(config=str(nemo), engine="vllm", kv_budget=20, context_len=8192, use_replayssm=True))
    assert ring.state.conv_bytes == base.state.conv_bytes and ring.state.ssm_bytes == base.state.ssm_bytes
    assert ring.state.ring_bytes > 0 and ring.vllm.mamba_page == base.vllm.mamba_page + ring.state.ring_bytes_per_layer
    longer, _, _ = build(PlanRequest(config=str(nemo), engine="vllm", use_replayssm=True, replayssm_buffer_len=32))
    assert longer.state.ring_bytes == 2 * ring.state.ring_bytes
    for name in ("granite-4.0-h-small", "lfm2-1.2b"):
        with pytest.raises(UsageError, match="replayssm"):
            build(PlanRequest(config=str(CONFIGS / f"{name}.json"), engine="vllm", use_replayssm=True))
    with pytest.raises(UsageError, match="speculative"):
        build(PlanRequest(config=str(nemo), engine="vllm", use_replayssm=True, spec_draft_tokens=2))
    with pytest.raises(UsageError):
        build(PlanRequest(config=str(nemo), engine="sglang", use_replayssm=True))
