"""The family catalogue: one entry per hybrid (or recurrent) model family the engines serve.

An entry says which architectures and ``model_type`` values the family is read from, which engine classes serve it
(vLLM's model classes with ``get_mamba_state_shape_from_config``, SGLang's config classes with
``mamba2_cache_params``), which reader of :mod:`.readers` reads its config the way those classes do, where each engine
takes the SSM state dtype from, what vLLM's CPU build and prefill checkpoints do with it, and the fixture that proves
it. ``model.model_from_config`` asks the catalogue first; a family the engines mark hybrid that has no reader here is
refused with its name, never planned as dense, and so is a config with recurrent-state fields no family reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .readers import (
    Reading,
    read_bailing_linear,
    read_bailing_v3,
    read_falcon_h1,
    read_granite,
    read_jamba,
    read_lfm2,
    read_lfm2_moe,
    read_mamba,
    read_mamba2,
    read_zamba2,
)

# --------------------------------------------------------------------------------------------------------------
# the catalogue


@dataclass(frozen=True)
class Family:
    """One family: what identifies it, who serves it, how its config is read, what its state honours."""

    key: str
    title: str
    architectures: tuple[str, ...]
    model_types: tuple[str, ...] = ()
    read: Callable[[dict[str, Any]], Reading] | None = None  # None: the GDN/KDA/Nemotron-H readers of model.py
    vllm: tuple[str, ...] = ()  # vLLM classes (model_executor/models/<module>.py::<Class>) that serve it
    sglang: tuple[str, ...] = ()  # SGLang config classes (srt/configs/<module>.py::<Class>); () = not served
    # where each engine takes the SSM state dtype from, first that applies: "flag" (the engine's SSM dtype flag),
    # "config:<key>" (the text config), "conv" (the conv dtype: the model's), "fp32", "model" (the model dtype);
    # a rule without "flag" is one the flag does not change. None: the state has no SSM part.
    ssm_dtype: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    spec_widens_conv: bool = True  # vLLM widens the conv window by num_speculative_tokens
    prefill_checkpoints: bool = True  # vLLM's layer exports prefill checkpoints where its kind does (align mode)
    # vLLM's CPU build takes its accelerated GDN backend for a 16-bit SSM dtype (platforms/cpu.py::_cpu_mamba_backend:
    # the text config's layer_types, as transformers builds them, hold linear_attention and the class's dtype follows
    # the flag), so it keeps that dtype on an AVX512-BF16 CPU instead of resetting it to float32
    cpu_gdn_backend: bool = False
    fixture: str = ""  # fixtures/configs/<name>.json, proven by tests/engine/test_family_shapes.py
    refused: str = ""  # a family the engines serve that the model does not: why (then read is unused)

    def dtype_rule(self, engine: str) -> tuple[str, ...] | None:
        return self.ssm_dtype.get(engine, DEFAULT_SSM_DTYPE[engine])

    def has_ssm_lever(self, engine: str) -> bool:
        """Whether the engine's SSM dtype flag changes this family's state (``--mamba-ssm-dtype`` /
        ``--mamba-ssm-cache-dtype``): the state has an SSM part and the dtype rule reads the flag."""
        rule = self.dtype_rule(engine)
        return rule is not None and "flag" in rule

    @property
    def engines(self) -> tuple[str, ...]:
        return tuple(e for e, classes in (("sglang", self.sglang), ("vllm", self.vllm)) if classes)


# SGLang configs/mamba_utils.py::mamba2_state_dtype(config); vLLM MambaStateDtypeCalculator._mamba_state_dtype
DEFAULT_SSM_DTYPE: dict[str, tuple[str, ...] | None] = {
    "sglang": ("flag", "config:mamba_ssm_dtype", "fp32"),
    "vllm": ("flag", "conv"),
}
# SGLang's cache params built without the config (``dtype`` left to ``mamba2_state_dtype(None)``)
_SG_NO_CONFIG = ("flag", "fp32")
_M = "vllm/model_executor/models/"
_S = "sglang/srt/configs/"

CATALOGUE: tuple[Family, ...] = (
    Family(
        "qwen3_next",
        "Qwen3-Next",
        ("Qwen3NextForCausalLM",),
        ("qwen3_next",),
        vllm=(_M + "qwen3_next.py::Qwen3NextForCausalLM",),
        sglang=(_S + "qwen3_next.py::Qwen3NextConfig",),
        fixture="qwen3-next-80b-a3b",
        cpu_gdn_backend=True,
    ),
    Family(
        "qwen3_5",
        "Qwen3.5+ (GDN)",
        ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"),
        ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"),
        vllm=(_M + "qwen3_5.py::Qwen3_5ForConditionalGeneration",),
        sglang=(_S + "qwen3_5.py::Qwen3_5Config",),
        ssm_dtype={"vllm": ("flag", "config:mamba_ssm_dtype", "conv")},
        fixture="qwen3.8-27b",
        cpu_gdn_backend=True,
    ),
    Family(
        "minicpmv4_6",
        "MiniCPM-V 4.6 (GDN)",
        ("MiniCPMV4_6ForConditionalGeneration",),
        ("minicpmv4_6",),
        vllm=(_M + "minicpmv4_6.py::MiniCPMV4_6ForConditionalGeneration",),
        fixture="minicpm-v-4.6",
        cpu_gdn_backend=True,
    ),
    Family(
        "olmo_hybrid",
        "OLMo-hybrid (GDN)",
        ("OlmoHybridForCausalLM",),
        ("olmo_hybrid",),
        vllm=(_M + "olmo_hybrid.py::OlmoHybridForCausalLM",),
        prefill_checkpoints=False,  # its GDN layer (gdn/olmo_gdn_linear_attn.py) keeps the base MambaSpec
        fixture="olmo-hybrid",
        cpu_gdn_backend=True,
    ),
    Family(
        "nemotron_h",
        "Nemotron-H (Mamba2)",
        (
            "NemotronHForCausalLM",
            "NemotronHPuzzleForCausalLM",
            # the VL / Omni wrappers: NemotronH's state functions on the text config (nano_nemotron_vl.py)
            "NemotronH_Nano_VL_V2",
            "NemotronH_Nano_Omni_Reasoning_V3",
            "NemotronH_Omni_Reasoning_V3",
            "NemotronH_Super_Omni_Reasoning_V3",
        ),
        ("nemotron_h",),
        vllm=(_M + "nemotron_h.py::NemotronHForCausalLM", _M + "nano_nemotron_vl.py::NemotronH_Nano_VL_V2"),
        sglang=(_S + "nemotron_h.py::NemotronHConfig",),
        ssm_dtype={"vllm": ("flag", "config:mamba_ssm_cache_dtype", "fp32")},
        fixture="nemotron-h-8b",
        cpu_gdn_backend=True,
    ),
    Family(
        "kimi",
        "Kimi Linear / kimi-k3 (KDA)",
        ("KimiLinearForCausalLM", "KimiK3ForConditionalGeneration", "KimiK31ForConditionalGeneration"),
        ("kimi_linear", "kimi_k3"),
        vllm=("vllm/models/kimi_k3/nvidia/model.py::KimiK3ForConditionalGeneration",),
        sglang=(_S + "kimi_linear.py::KimiLinearConfig",),
        ssm_dtype={"vllm": ("flag", "fp32"), "sglang": _SG_NO_CONFIG},
        fixture="kimi-k3",
    ),
    Family(
        "granite_h",
        "Granite-4.0-H (Mamba2)",
        ("GraniteMoeHybridForCausalLM",),
        ("granitemoehybrid",),
        read_granite,
        vllm=(_M + "granitemoehybrid.py::GraniteMoeHybridForCausalLM",),
        sglang=(_S + "granitemoehybrid.py::GraniteMoeHybridConfig",),
        ssm_dtype={"sglang": _SG_NO_CONFIG},
        fixture="granite-4.0-h-small",
        cpu_gdn_backend=True,
    ),
    Family(
        "falcon_h1",
        "Falcon-H1 (attention + Mamba2 in every layer)",
        ("FalconH1ForCausalLM",),
        ("falcon_h1",),
        read_falcon_h1,
        vllm=(_M + "falcon_h1.py::FalconH1ForCausalLM",),
        sglang=(_S + "falcon_h1.py::FalconH1Config",),
        fixture="falcon-h1-7b",
    ),
    Family(
        "jamba",
        "Jamba (Mamba1)",
        ("JambaForCausalLM",),
        ("jamba",),
        read_jamba,
        vllm=(_M + "jamba.py::JambaForCausalLM",),
        spec_widens_conv=False,
        fixture="jamba-1.5-mini",
        cpu_gdn_backend=True,
    ),
    Family(
        "mamba",
        "Mamba (Mamba1, attention-free)",
        ("MambaForCausalLM", "FalconMambaForCausalLM"),
        ("mamba", "falcon_mamba"),
        read_mamba,
        vllm=(_M + "mamba.py::MambaForCausalLM",),
        sglang=(_S + "mamba.py::MambaConfig", _S + "mamba.py::FalconMambaConfig"),
        ssm_dtype={"sglang": _SG_NO_CONFIG},
        spec_widens_conv=False,
        fixture="mamba-2.8b",
        cpu_gdn_backend=True,
    ),
    Family(
        "mamba2",
        "Mamba2 (attention-free)",
        ("Mamba2ForCausalLM",),
        ("mamba2",),
        read_mamba2,
        vllm=(_M + "mamba2.py::Mamba2ForCausalLM",),
        sglang=(_S + "mamba2.py::Mamba2Config",),
        ssm_dtype={"sglang": _SG_NO_CONFIG},
        fixture="mamba-codestral-7b",
        cpu_gdn_backend=True,
    ),
    Family(
        "zamba2",
        "Zamba2 (Mamba2 + shared attention)",
        ("Zamba2ForCausalLM",),
        ("zamba2",),
        read_zamba2,
        vllm=(_M + "zamba2.py::Zamba2ForCausalLM",),
        fixture="zamba2-2.7b",
        cpu_gdn_backend=True,
    ),
    Family(
        "lfm2",
        "LFM2 (short convolution)",
        ("Lfm2ForCausalLM",),
        ("lfm2",),
        read_lfm2,
        vllm=(_M + "lfm2.py::Lfm2ForCausalLM",),
        sglang=(_S + "lfm2.py::Lfm2Config",),
        ssm_dtype={"vllm": None, "sglang": None},
        spec_widens_conv=False,
        fixture="lfm2-1.2b",
    ),
    Family(
        "lfm2_moe",
        "LFM2-MoE / LFM2-VL (short convolution)",
        ("Lfm2MoeForCausalLM", "Lfm2VlForConditionalGeneration"),
        ("lfm2_moe", "lfm2_vl"),
        read_lfm2_moe,
        vllm=(_M + "lfm2_moe.py::Lfm2MoeForCausalLM", _M + "lfm2_vl.py::Lfm2VLForConditionalGeneration"),
        sglang=(_S + "lfm2_moe.py::Lfm2MoeConfig", _S + "lfm2_vl.py::Lfm2VlConfig"),
        ssm_dtype={"vllm": None, "sglang": None},
        spec_widens_conv=False,
        fixture="lfm2-8b-a1b",
    ),
    Family(
        "bailing_linear",
        "Bailing (Ling) 2.5 linear attention",
        ("BailingMoeV2_5ForCausalLM",),
        ("bailing_moe_v2_5", "bailing_moe_linear", "bailing_hybrid"),
        read_bailing_linear,
        vllm=(_M + "bailing_moe_linear.py::BailingMoeV25ForCausalLM",),
        sglang=(_S + "bailing_hybrid.py::BailingHybridConfig",),
        ssm_dtype={"vllm": ("model",), "sglang": _SG_NO_CONFIG},
        fixture="ling-2.5-linear",
    ),
    Family(
        "bailing_v3",
        "Bailing (Ling) V3 (KDA)",
        ("BailingMoeV3ForCausalLM", "BailingMoeV3VLForConditionalGeneration"),
        ("bailing_moe_v3", "bailing_moe_v3_vl"),
        read_bailing_v3,
        vllm=(_M + "bailing_moe_v3.py::BailingMoeV3ForCausalLM", _M + "bailing_moe_v3_vl.py::BailingMoeV3VLForConditionalGeneration"),
        sglang=(_S + "bailing_hybrid.py::BailingHybridConfig",),
        ssm_dtype={"vllm": ("fp32",), "sglang": _SG_NO_CONFIG},
        fixture="ling-v3-kda",
    ),
    # the engines serve these as hybrids; the model does not (yet): refused with their name
    Family(
        "lfm3",
        "LFM3 (short convolution)",
        ("Lfm3ForCausalLM", "Lfm3VlForConditionalGeneration", "Lfm3AudioForConditionalGeneration"),
        ("lfm3", "lfm3_vl", "lfm3_audio"),
        vllm=(_M + "lfm3.py::Lfm3ForCausalLM",),
        refused="vLLM 0.34's LFM3 is not read here (its conv width and layer rule are not checked against a run)",
    ),
    Family(
        "alice_ai",
        "AliceAI (KDA)",
        ("AliceAIForCausalLM",),
        ("alice_ai",),
        vllm=(_M + "alice_ai.py::AliceAIForCausalLM",),
        refused="vLLM 0.33+'s AliceAI KDA layout is not read here",
    ),
    Family(
        "zaya",
        "Zaya (CCA)",
        ("ZayaForCausalLM",),
        ("zaya",),
        vllm=(_M + "zaya.py::ZayaForCausalLM",),
        sglang=(_S + "zaya.py::ZayaConfig",),
        refused="Zaya's CCA state (zaya.py::_cca_state_shapes) is not read here",
    ),
    Family(
        "glm5_next",
        "GLM-5 Next (KDA)",
        ("Glm5NextForCausalLM", "Glm5NextForConditionalGeneration"),
        ("glm5_next",),
        vllm=("vllm/models/glm5next/common/model.py::Glm5NextForCausalLM",),
        sglang=(_S + "glm5_next.py::Glm5NextConfig", _S + "glm5_next.py::Glm5NextTextConfig"),
        refused="GLM-5 Next's KDA state is not read here",
    ),
    Family(
        "minicpm_sala",
        "MiniCPM SALA (lightning attention)",
        ("MiniCPMSALAForCausalLM",),
        ("minicpm_sala",),
        sglang=(_S + "minicpm.py::MiniCPMHybridConfig",),
        refused="SGLang's MiniCPM lightning layers (mixer_types) are not read here",
    ),
    Family(
        "qwen4_exp",
        "Qwen4-Exp",
        ("Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration"),
        ("qwen4_exp",),
        vllm=("vllm/models/qwen4_exp/nvidia/model.py::Qwen4ExpForCausalLM",),
        refused="vLLM's Qwen4-Exp (its own config hook and prefill-checkpoint grid) is not read here",
    ),
    Family(
        "interns2",
        "Intern-S2 (GDN)",
        ("InternS2PreviewForConditionalGeneration", "InternS2MobiusForConditionalGeneration"),
        ("intern_s2_preview", "interns2_mobius"),
        vllm=(_M + "interns2_preview.py::InternS2PreviewForConditionalGeneration",),
        sglang=(_S + "interns2preview.py::InternS2PreviewConfig", _S + "interns2_mobius.py::InternS2MobiusConfig"),
        refused="Intern-S2's text config is not read here",
    ),
    Family(
        "minicpmv4_7",
        "MiniCPM-V 4.7 / MiniCPM-OCR",
        ("MiniCPMV4_7ForConditionalGeneration", "MiniCPMOcrForConditionalGeneration"),
        ("minicpmv4_7", "minicpm_ocr"),
        vllm=(_M + "minicpmv4_7.py::MiniCPMV4_7ForConditionalGeneration",),
        refused="MiniCPM-V 4.7's text model is not checked against vLLM's functions here (4.6's is)",
    ),
    Family(
        "clef_flash",
        "Clef-Flash",
        ("ClefFlashForJointSchema",),
        ("clef_flash",),
        vllm=(_M + "clef_flash.py::ClefFlashForJointSchema",),
        refused="Clef-Flash's state is not read here",
    ),
    Family(
        "jet_nemotron",
        "Jet-Nemotron (JetBlock)",
        ("JetNemotronForCausalLM", "JetVLMForConditionalGeneration"),
        ("jet_nemotron", "jet_vlm"),
        sglang=(_S + "jet_nemotron.py::JetNemotronConfig", _S + "jet_vlm.py::JetVLMConfig"),
        refused="SGLang's JetBlock state is not read here",
    ),
    Family(
        "gigachat35",
        "GigaChat 3.5",
        ("GigaChat35ForCausalLM",),
        ("gigachat3_5",),
        sglang=(_S + "gigachat35.py::GigaChat35Config",),
        refused="SGLang's GigaChat 3.5 linear layers are not read here",
    ),
    Family(
        "inkling",
        "Inkling",
        ("InklingForConditionalGeneration", "InklingForCausalLM"),
        ("inkling_model", "inkling"),
        sglang=(_S + "inkling.py::InklingModelConfig", _S + "inkling.py::InklingMMConfig"),
        refused="Inkling's mamba layers are not read here",
    ),
)

BY_KEY: dict[str, Family] = {f.key: f for f in CATALOGUE}
BY_ARCH: dict[str, Family] = {a: f for f in CATALOGUE for a in f.architectures}
BY_MODEL_TYPE: dict[str, Family] = {t: f for f in CATALOGUE for t in f.model_types}


def family_of(architecture: str, model_type: str = "") -> Family | None:
    """The catalogue's family for an architecture (``architectures[0]``), else for a ``model_type``."""
    return BY_ARCH.get(architecture) or BY_MODEL_TYPE.get(model_type)


# --------------------------------------------------------------------------------------------------------------
# recurrent-state fields: what makes a config that no family reads a refusal rather than a dense model

_RECURRENT_KEY = re.compile(
    r"(^|_)(mamba|ssm|ssms)(_|$)|^(d_state|state_size|conv_kernel|conv_dim|conv_l_cache|d_conv|short_conv\w*|"
    r"linear_(num|key|value|conv|attn)\w*|linear_attn_config|hybrid_override_pattern|layers_block_type|"
    r"attn_layer_(period|offset)|full_attn_idxs|full_attention_interval|layer_group_size|attn_type_list|"
    r"lightning_\w+|kda_\w+|gdn_\w+|rwkv\w*|time_step\w*)$",
    re.I,
)
_ATTENTION_TYPES = ("full_attention", "attention", "sliding_attention", "chunked_attention", "global", "local", "full", "sliding")


def recurrent_fields(cfg: dict[str, Any]) -> list[str]:
    """The keys of a (merged) config that describe recurrent state: mamba / ssm / conv / linear-attention keys, a
    hybrid layer pattern, or a ``layer_types`` entry that is not attention. Empty for a dense transformer."""
    out = sorted(k for k in cfg if _RECURRENT_KEY.search(k) and cfg[k] not in (None, False, [], ""))
    for key in ("layer_types", "mixer_types"):
        t = cfg.get(key)
        if isinstance(t, list) and any(str(x).lower() not in _ATTENTION_TYPES for x in t):
            out.append(f"{key} ({', '.join(sorted({str(x) for x in t if str(x).lower() not in _ATTENTION_TYPES}))})")
    return out
