"""A capacity plan from a config: both engines' pools for one set of inputs, and what it leaves out."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import defaults
from .model import ConfigError, ModelSpec
from .sizing import (
    LinearState,
    SGLangPool,
    kv_bytes_per_token,
    linear_state,
    norm_strategy,
    sglang_page_size,
    sglang_pool,
    sglang_slots_per_request,
)
from .vllm import CPU_ISA_WORDS, VLLMPool, vllm_default_mode, vllm_gdn_prefill_kernel, vllm_pool, vllm_release, vllm_ssm_dtype

# vLLM 0.34's extensible KV cache: what a plan from a config cannot know (exporter/advice/plan.py prints it)
MEASURED_BUDGET = (
    "vLLM {v} sizes the KV cache from the memory measured after CUDA-graph capture and warmup (the extensible KV cache, "
    "on by default on CUDA and ROCm): the budget is the log's `Extended KV cache to N blocks (X GiB)` (--kv-budget X, or "
    "plan --from-log); `Available KV cache memory` is only the estimate before warmup"
)
MEASURED_GPU_MEMORY = (
    "not known to the model: vLLM {v} measures CUDA graphs, warmup transients and a safety margin (at least 1 GiB) after "
    "warmup, so a budget from --gpu-memory is an upper bound, not vLLM's pool; and unset, gpu_memory_utilization is 1.0 "
    "there (--mem-fraction 1.0)"
)

# --------------------------------------------------------------------------------------------------------------
# config-driven plan and its flag effects
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanInputs:
    """Inputs of a capacity plan. ``budget_bytes`` is per GPU, for KV + state."""

    engine: str = "sglang"
    tp: int = 1
    budget_bytes: int = 0
    kv_dtype: str | None = None
    ssm_dtype: str | None = None
    ratio: float = defaults.SGLANG_MAMBA_FULL_MEMORY_RATIO
    radix_strategy: str = "auto"
    context_len: int | None = None
    max_running_requests: int | None = None
    spec_draft_tokens: int = 0
    max_mamba_cache_size: int | None = None
    skip_decode_lock: bool = False
    overlap: bool = True
    sglang_version: str | None = None
    vllm_mode: str | None = None  # None/"auto": follows prefix caching (align by default for hybrids, 0.26+)
    language_model_only: bool = False
    notes: tuple[str, ...] = field(default=())
    platform: str = "hopper"  # hopper | blackwell | cpu: vLLM block alignment, SGLang page size
    cpu_isa: str = "avx512-bf16"  # platform cpu: what the CPU has (capacity/vllm.py::CPU_ISAS): SSM dtype, fp8 KV
    gdn_backend: str = "auto"  # vLLM --gdn-prefill-backend: auto | flashinfer | triton (capacity/vllm.py::GDN_BACKENDS)
    prefix_caching: bool | None = None  # vLLM --enable-prefix-caching / --no-enable-prefix-caching (None: default)
    vllm_version: str | None = None  # vLLM release for the version table (default 0.34.0)
    num_gpu_blocks_override: int | None = None
    use_replayssm: bool = False  # vLLM --use-replayssm (Mamba2 layers keep x / dt / B rings)
    replayssm_buffer_len: int = 16  # vLLM --replayssm-buffer-len (the ring length with the default Triton backend)

    @property
    def replayssm_len(self) -> int:
        return self.replayssm_buffer_len if self.engine == "vllm" and self.use_replayssm else 0

    @property
    def resolved_vllm_mode(self) -> str:
        m = (self.vllm_mode or "auto").lower()
        return vllm_default_mode(self.vllm_version, self.prefix_caching) if m == "auto" else m


@dataclass(frozen=True)
class Plan:
    model: ModelSpec
    inputs: PlanInputs
    kv_bytes_per_token: int  # per GPU
    kv_bytes_per_token_all_gpus: int
    state: LinearState
    slots_per_request: int | None  # SGLang slots / vLLM blocks per request (all mamba groups)
    sglang: SGLangPool | None = None
    vllm: VLLMPool | None = None

    @property
    def cap(self) -> int:
        if self.sglang is not None:
            return self.sglang.max_running_requests
        assert self.vllm is not None
        return self.vllm.cap

    @property
    def binding_pool(self) -> str:
        return self.sglang.binding_pool if self.sglang is not None else self.vllm.binding_pool  # type: ignore[union-attr]

    @property
    def mamba_slots(self) -> int:
        if self.sglang is not None:
            return self.sglang.mamba_slots
        return self.vllm.num_blocks  # type: ignore[union-attr]

    @property
    def kv_tokens(self) -> int:
        if self.sglang is not None:
            return self.sglang.kv_tokens
        v = self.vllm
        assert v is not None
        return v.kv_cache_tokens_new if v.kv_cache_tokens_new is not None else v.kv_cache_tokens_old


def as_served(model: ModelSpec, engine: str) -> ModelSpec:
    """``model`` as ``engine`` reads its config (:meth:`ModelSpec.for_engine`); a :class:`ConfigError` naming the
    family when that engine does not serve it (SGLang 0.5.23 has no Jamba, Zamba2 or OLMo-hybrid)."""
    why = model.refusal(engine)
    if why:
        raise ConfigError(why)
    return model.for_engine(engine)


def check_replayssm(model: ModelSpec, inputs: PlanInputs) -> None:
    """``--use-replayssm`` is modelled where vLLM's class appends the rings it allocates: Nemotron-H
    (``nemotron_h.py::NemotronHForCausalLM.get_mamba_state_shape_from_config``). Every Mamba2 mixer holds them
    (``mamba_mixer2.py::MambaMixer2.get_state_shape``), but the other Mamba2 classes' shape function, which the
    block size is computed from, does not append them: not modelled. Speculative decoding with it needs
    FlashInfer's Mamba backend (a longer ring): not modelled either."""
    if not inputs.replayssm_len:
        return
    if model.linear_kind != "mamba2":
        raise ValueError(f"--use-replayssm keeps rings for Mamba2 layers; {model.name} has {model.linear_kind or 'none'}")
    if model.family != "nemotron_h":
        raise ValueError(f"--use-replayssm is modelled for Nemotron-H only: {model.family}'s class does not append the rings")
    if inputs.spec_draft_tokens:
        raise ValueError("--use-replayssm with speculative decoding needs --mamba-backend flashinfer: not modelled")


def state_of(model: ModelSpec, inputs: PlanInputs) -> LinearState:
    """The per-request state per GPU the engine of ``inputs`` holds for ``model`` (vLLM: the SSM dtype its platform
    keeps, the conv window widened by the draft tokens where the family's class does, the ReplaySSM rings)."""
    tp = max(1, inputs.tp)
    if inputs.engine == "vllm":
        check_replayssm(model, inputs)
        ssm = vllm_ssm_dtype(inputs.platform, inputs.ssm_dtype, model.cpu_state_backend, inputs.cpu_isa)
        return linear_state(model, tp, ssm, engine="vllm", conv_extra_tokens=inputs.spec_draft_tokens, replayssm_len=inputs.replayssm_len)
    return linear_state(model, tp, inputs.ssm_dtype, engine="sglang")


def make_plan(model: ModelSpec, inputs: PlanInputs) -> Plan:
    """Size the pools for ``model`` under ``inputs`` (SGLang or vLLM). An attention-free model (Mamba, Mamba2) has no
    pool model here: ``ValueError`` (``plan`` shows its per-request state and says so)."""
    model = as_served(model, inputs.engine)
    if model.attention_free:
        raise ValueError(
            f"{model.name}: the pool of an attention-free model ({model.linear_layers} state layers, no attention) is not modelled"
        )
    tp = max(1, inputs.tp)
    kvt = kv_bytes_per_token(model, inputs.kv_dtype, tp)
    if inputs.engine == "vllm":
        check_replayssm(model, inputs)
        vp = vllm_pool(
            model,
            inputs.budget_bytes,
            tp=tp,
            kv_dtype=inputs.kv_dtype,
            ssm_dtype=inputs.ssm_dtype,
            mode=inputs.resolved_vllm_mode,
            spec_tokens=inputs.spec_draft_tokens,
            max_model_len=inputs.context_len or model.context_length,
            # the CPU backend's default for the API server (exporter/capacity/defaults.py): 128 x world; a GPU's depends on it
            max_num_seqs=inputs.max_running_requests
            or (defaults.vllm_max_num_seqs(inputs.vllm_version, device="cpu", world=tp).value if inputs.platform == "cpu" else None),
            version=inputs.vllm_version,
            platform=inputs.platform,
            num_gpu_blocks_override=inputs.num_gpu_blocks_override,
            gdn_backend=inputs.gdn_backend,
            cpu_isa=inputs.cpu_isa,
            replayssm_len=inputs.replayssm_len,
        )
        return Plan(model, inputs, kvt, kvt * tp, state_of(model, inputs), vp.n_mamba_groups * vp.blocks_per_request or None, vllm=vp)
    st = state_of(model, inputs)
    strat = norm_strategy(inputs.radix_strategy, inputs.overlap)
    spr = sglang_slots_per_request(
        strat,
        inputs.sglang_version,
        overlap=inputs.overlap,
        spec=inputs.spec_draft_tokens > 0,
        skip_decode_lock=inputs.skip_decode_lock,
    )
    sp = sglang_pool(
        inputs.budget_bytes,
        st.per_request,
        kvt,
        ratio=inputs.ratio,
        slots_per_request=spr,
        max_mamba_cache_size=inputs.max_mamba_cache_size,
        max_running_requests=inputs.max_running_requests,
        radix=strat != "disable",
        spec_draft_tokens=inputs.spec_draft_tokens,
        context_len=inputs.context_len or model.context_length,
        version=inputs.sglang_version,
        page_size=sglang_page_size(model, inputs.platform, strat, inputs.spec_draft_tokens > 0, inputs.sglang_version),
    )
    return Plan(model, inputs, kvt, kvt * tp, st, spr if model.is_hybrid else None, sglang=sp)


def unmodelled_notes(model: ModelSpec, inputs: PlanInputs, *, gpu_memory: bool = False) -> list[str]:
    """What the engines do that this model does not, said where it changes a number the plan shows."""
    out: list[str] = []
    if inputs.engine == "sglang":
        if model.is_hybrid:
            out.append(
                "not modelled: SGLang re-sizes the KV pool after CUDA-graph capture; that can only lower KV tokens and max_running_requests"
            )
        if not inputs.context_len:
            out.append(f"context length {model.context_length:,} from the config (SGLang's fallback without --context-length)")
        if inputs.spec_draft_tokens:
            out.append("not modelled: the draft model's weights and KV (only the target's mamba intermediate state is)")
    else:
        if not inputs.context_len:
            out.append(f"max_model_len {model.context_length:,} from the config (vLLM's default without --max-model-len)")
        if inputs.spec_draft_tokens:
            out.append("not modelled: the draft model's weights and KV cache (vLLM sizes the pool after loading it)")
        if model.is_hybrid and inputs.resolved_vllm_mode == "align":
            out.append("mamba cache mode align (prefix caching on, the default for hybrids): 2+ state blocks per request")
    after_warmup = inputs.engine == "vllm" and inputs.platform != "cpu" and vllm_release(inputs.vllm_version).sizes_after_warmup
    if after_warmup:
        v = ".".join(map(str, vllm_release(inputs.vllm_version).version[:3]))
        out.append(MEASURED_BUDGET.format(v=v))
        if gpu_memory:
            out.append(MEASURED_GPU_MEMORY.format(v=v))
    if gpu_memory:
        out.append(
            "not modelled with --gpu-memory: activation/CUDA-graph memory and the reserve taken before the split "
            "(SGLang: mamba pre-capture reserve, multimodal reserve); prefer --kv-budget from the log"
        )
    if inputs.platform == "blackwell":
        out.append("blackwell: page/block sizes from the engines' default backends, not checked against a real log")
        fam = model.catalogue_family
        if inputs.engine == "sglang" and fam is not None and fam.read is not None:
            out.append(f"blackwell: SGLang's page size for {fam.title} assumed 64 (TRT-LLM MHA); its model override is not read")
    if inputs.engine == "vllm" and model.is_hybrid and model.linear_kind == "gdn" and model.prefill_checkpoints:
        kernel = vllm_gdn_prefill_kernel(model, inputs.platform, inputs.gdn_backend)
        out.append(
            f"GDN prefill kernel: {kernel}"
            + (" (one prefill-checkpoint block per request in align mode, 64-token block alignment)" if kernel == "flashinfer" else "")
            + (
                "; on Blackwell this assumes a CUDA 13 runtime (CUDA 12: --gdn-prefill-backend triton)"
                if inputs.platform == "blackwell" and kernel == "flashinfer"
                else ""
            )
        )
    if inputs.platform == "cpu":
        if inputs.engine == "sglang":
            out.append("cpu: SGLang 0.5.23 has no CPU path for these models; the SGLang numbers assume its GPU defaults")
        else:
            out.append(
                f"cpu: vLLM's CPU build on a CPU with {CPU_ISA_WORDS[inputs.cpu_isa]} (--cpu-isa; 128-token default blocks, "
                "SSM state float32 on AVX512-BF16/AMX CPUs, else as asked; "
                "KV cache dtype auto or fp8 (fp8 on x86 with AVX-512 or AMX, head size a multiple of 32; MLA models auto only), default max_num_seqs 128 x TP x PP); "
                "the budget is VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes"
            )
    return out
