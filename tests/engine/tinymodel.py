"""Build a tiny, randomly initialised hybrid model on disk: config, weights and tokenizer.

Nothing comes from a model hub. Run with the engine's interpreter (it needs torch, transformers,
tokenizers and safetensors, which vLLM brings):

    $ENGINE_PY tests/engine/tinymodel.py --family qwen3_next OUT_DIR

The weights are drawn from a fixed seed, so a model dir is the same on every machine; the engine
tests never depend on what the random model writes, only on what the engine logs about its pools.

Families: ``qwen3_next`` (3 Gated DeltaNet layers + 1 full-attention layer, the suite's main model),
``qwen3_next_hd32`` (the same with 32-dim linear heads: the CPU GDN kernel rejects it at the first
request, the engine-death scenario), and the other hybrid families tried on the CPU backend
(``nemotron_h``, ``granitemoehybrid``, ``lfm2``, ``falcon_h1``, ``mamba2``; docs/engine-suite.md
says which run); ``nemotron_h_sglang`` is ``nemotron_h`` with its config.json as SGLang reads it (HUB_SHAPED below).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

VOCAB = 512  # byte-level BPE: 256 bytes + merges + specials; the config's vocab_size
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog. ",
    "Hybrid models mix full attention layers with linear attention layers. ",
    "A sidecar exporter tails the log of the inference server and serves metrics. ",
    "Requests queue when the pool of mamba state slots runs out before the KV cache. ",
    "0123456789 + - * / = ( ) [ ] { } , . ; : ! ? ",
]


def _common() -> dict:
    return {
        "vocab_size": VOCAB,
        "hidden_size": 256,
        "intermediate_size": 512,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "pad_token_id": 0,
        "torch_dtype": "bfloat16",
        "initializer_range": 0.02,
    }


def qwen3_next(linear_head_dim: int = 128) -> dict:
    cfg = _common()
    cfg.update(
        architectures=["Qwen3NextForCausalLM"],
        model_type="qwen3_next",
        num_hidden_layers=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=linear_head_dim,
        linear_value_head_dim=linear_head_dim,
        linear_num_key_heads=1,
        linear_num_value_heads=2,
        # a small MoE in every layer (vLLM's Qwen3-Next needs at least one MoE layer)
        mlp_only_layers=[],
        decoder_sparse_step=1,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        shared_expert_intermediate_size=128,
        norm_topk_prob=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        full_attention_interval=4,
        hidden_act="silu",
        attention_bias=False,
    )
    return cfg


def nemotron_h() -> dict:
    cfg = _common()
    cfg.update(
        architectures=["NemotronHForCausalLM"],
        model_type="nemotron_h",
        num_hidden_layers=4,
        hybrid_override_pattern="M-M*",
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        mamba_num_heads=4,
        mamba_head_dim=64,
        ssm_state_size=64,
        n_groups=1,
        conv_kernel=4,
        chunk_size=128,
        mamba_hidden_act="silu",
        mlp_hidden_act="relu2",
        expand=1,
        use_conv_bias=True,
        use_bias=False,
        mamba_proj_bias=False,
        residual_in_fp32=False,
        layer_norm_epsilon=1e-5,
    )
    return cfg


# the Mamba2 mixer keys Granite hybrid and Falcon-H1 share (4 heads of 64, state 64, one group)
MAMBA2_KEYS = dict(
    mamba_n_heads=4,
    mamba_d_head=64,
    mamba_d_state=64,
    mamba_n_groups=1,
    mamba_d_conv=4,
    mamba_expand=1,
    mamba_chunk_size=128,
    mamba_conv_bias=True,
    mamba_proj_bias=False,
)


def granitemoehybrid() -> dict:
    cfg = _common()
    cfg.update(
        architectures=["GraniteMoeHybridForCausalLM"],
        model_type="granitemoehybrid",
        num_hidden_layers=4,
        layer_types=["mamba", "mamba", "mamba", "attention"],
        num_attention_heads=2,
        num_key_value_heads=1,
        num_local_experts=0,
        num_experts_per_tok=0,
        shared_intermediate_size=512,
        **MAMBA2_KEYS,
        position_embedding_type="rope",
        rope_theta=10000.0,
    )
    return cfg


def lfm2() -> dict:
    cfg = _common()
    cfg.update(
        architectures=["Lfm2ForCausalLM"],
        model_type="lfm2",
        num_hidden_layers=4,
        layer_types=["conv", "conv", "conv", "full_attention"],
        full_attn_idxs=[3],
        num_attention_heads=2,
        num_key_value_heads=1,
        conv_L_cache=3,
        conv_dim=256,  # vLLM's Lfm2 reads it (published LFM2 configs carry it; transformers' Lfm2Config does not)
        conv_bias=False,
        block_dim=256,
        block_ff_dim=512,
        block_auto_adjust_ff_dim=False,
        norm_eps=1e-5,
        rope_theta=10000.0,
    )
    return cfg


def falcon_h1() -> dict:
    cfg = _common()
    cfg.update(
        architectures=["FalconH1ForCausalLM"],
        model_type="falcon_h1",
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        **MAMBA2_KEYS,
        mamba_d_ssm=256,
        rope_theta=10000.0,
    )
    return cfg


def mamba2() -> dict:
    cfg = _common()
    cfg.update(
        architectures=["Mamba2ForCausalLM"],
        model_type="mamba2",
        num_hidden_layers=2,
        num_heads=4,
        head_dim=64,
        state_size=64,
        n_groups=1,
        conv_kernel=4,
        expand=1,
        chunk_size=128,
        use_conv_bias=True,
        use_bias=False,
        layer_norm_epsilon=1e-5,
    )
    return cfg


FAMILIES = {
    "qwen3_next": qwen3_next,
    "qwen3_next_hd32": lambda: qwen3_next(linear_head_dim=32),
    "nemotron_h": nemotron_h,
    "nemotron_h_sglang": lambda: {**nemotron_h(), "mamba_n_groups": 1},
    "granitemoehybrid": granitemoehybrid,
    "lfm2": lfm2,
    "falcon_h1": falcon_h1,
    "mamba2": mamba2,
}


def write_tokenizer(out: str) -> None:
    """A byte-level BPE trained in code on a few sentences (so any text encodes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": SPECIALS[0],
                "eos_token": SPECIALS[0],
                "pad_token": SPECIALS[0],
                "unk_token": None,
                "model_max_length": 4096,
                "chat_template": (
                    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n"
                ),
            },
            f,
            indent=1,
        )
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": SPECIALS[0], "eos_token": SPECIALS[0], "pad_token": SPECIALS[0]}, f)


def write_weights(out: str, cfg: dict) -> int:
    """Random weights from a fixed seed via transformers' own model class; returns the count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(1234)
    config = AutoConfig.for_model(**cfg)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # save_pretrained rewrites config.json from the class: keep our exact dict on top of it
    with open(os.path.join(out, "config.json")) as f:
        saved = json.load(f)
    saved.update(cfg)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(saved, f, indent=1, sort_keys=True)
    return sum(p.numel() for p in model.parameters())


# ``nemotron_h_sglang``: the same model, its config.json as SGLang 0.5.23 reads it. SGLang's Mamba2 mixer takes its group
# count from ``mamba_n_groups`` (default 8) while its state shape takes ``n_groups``: with only transformers' key the
# in_proj is built for 8 groups and the first prefill fails (split sizes 1540 vs 644), so both keys say 1.
# keys transformers 5 writes into config.json that a checkpoint of the hub does not have, removed for the engines that
# refuse them: SGLang 0.5.23's NemotronHConfig validates ``layers_block_type`` against its own names (mamba, attention,
# mlp, moe) and rejects transformers' (linear_attention, full_attention); without it, it reads the hub's
# ``hybrid_override_pattern`` as a real Nemotron-H checkpoint has it
HUB_SHAPED = {"nemotron_h_sglang": ("layers_block_type",)}


def build(family: str, out: str) -> int:
    os.makedirs(out, exist_ok=True)
    cfg = FAMILIES[family]()
    n = write_weights(out, cfg)
    if family in HUB_SHAPED:
        path = os.path.join(out, "config.json")
        with open(path) as f:
            saved = json.load(f)
        for key in HUB_SHAPED[family]:
            saved.pop(key, None)
        with open(path, "w") as f:
            json.dump(saved, f, indent=1, sort_keys=True)
    write_tokenizer(out)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}, f)
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=sorted(FAMILIES), default="qwen3_next")
    ap.add_argument("out")
    a = ap.parse_args(argv)
    n = build(a.family, a.out)
    print(f"{a.family}: {n} parameters in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
