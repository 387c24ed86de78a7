"""vLLM V1's shared KV/state block pool by release: page unification, grouping, blocks per request, the
mamba-bound concurrency (docs/sizing.md, "vLLM")."""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import defaults
from .model import ModelSpec
from .sizing import kv_bytes_per_token_per_layer, linear_state
from .version import require_version

# --------------------------------------------------------------------------------------------------------------
# vLLM V1: shared block pool
# --------------------------------------------------------------------------------------------------------------


VLLM_LATEST = (0, 34, 0, 0)
PLATFORMS = ("hopper", "blackwell", "cpu")
# what vLLM's CPU build asks of the CPU (torch.cpu._is_avx512_bf16_supported / _is_avx512_supported /
# _is_amx_tile_supported; /proc/cpuinfo flags avx512_bf16, avx512f, amx_bf16): avx512-bf16 covers AMX CPUs
# too; avx2 is any x86 without AVX-512; other is a CPU that is not x86 (ARM, POWER, s390x, RISC-V)
CPU_ISA_WORDS = {
    "avx512-bf16": "AVX512-BF16 or AMX",
    "avx512": "AVX-512 without BF16",
    "avx2": "no AVX-512 (x86)",
    "other": "no x86 ISA (ARM, POWER, s390x, RISC-V)",
}
CPU_ISAS = tuple(CPU_ISA_WORDS)
# --gdn-prefill-backend (0.33.0 engine/arg_utils.py; additional_config["gdn_prefill_backend"]): what ``plan`` takes
GDN_BACKENDS = ("auto", "flashinfer", "triton")
# the default --block-size by release and platform: exporter/capacity/defaults.py::vllm_block_size (16 on GPUs up to 0.33, 64
# from 0.34; the CPU build's 128)
# the smallest kernel block of the default GQA attention backend: FLASH_ATTN (Hopper) and FLASHINFER (Blackwell,
# SM100: v1/attention/backends/flashinfer.py::get_supported_kernel_block_sizes [16, 32, 64, ...]) take 16;
# CPU_ATTN MultipleOf(32) (v1/attention/backends/cpu_attn.py)
KERNEL_BLOCK = {"hopper": 16, "blackwell": 16, "cpu": 32}


@dataclass(frozen=True)
class VLLMRelease:
    """What a vLLM release does with a hybrid model's cache, by release (the version table).

    Verified against the 0.33.0 and 0.34.0 wheels (files cited per field); the older gates come from the release
    notes of docs/sizing.md ("vLLM by release") and are kept as they were when not re-verified."""

    version: tuple[int, int, int, int]

    @property
    def prefix_caching_default(self) -> bool:
        """``config/model.py::ModelConfig.is_prefix_caching_supported`` returns True for generative hybrids from
        0.26.0 and ``engine/arg_utils.py::_set_default_chunked_prefill_and_prefix_caching_args`` takes it
        (exporter/capacity/defaults.py)."""
        return defaults.vllm_prefix_caching(self.version)

    @property
    def sizes_after_warmup(self) -> bool:
        """0.34.0's extensible KV cache (CUDA, ROCm): the pool is sized from the memory measured after CUDA-graph
        capture and warmup (``v1/worker/extensible_kv_cache.py::measure_kv_cache_blocks``), which a plan from a
        config cannot know; the budget ``plan`` takes is then the log's ``Extended KV cache to N blocks (X GiB)``."""
        return self.version >= (0, 34, 0, 0)

    def default_block_size(self, platform: str) -> int:
        """``CacheConfig.DEFAULT_BLOCK_SIZE`` on GPUs (16, 64 from 0.34), 128 on the CPU build (exporter/capacity/defaults.py)."""
        return defaults.vllm_block_size(self.version, platform)

    @property
    def has_modes(self) -> bool:
        """``mamba_cache_mode`` none/align exists from 0.15.0."""
        return self.version >= (0, 15, 0, 0)

    @property
    def spec_blocks_in_none_mode(self) -> bool:
        return self.version >= (0, 15, 0, 0)

    @property
    def checkpoint_blocks(self) -> bool:
        """``kv_cache_interface.py::MambaSpec.max_memory_usage_bytes`` adds ``num_prefill_checkpoint_blocks`` in
        align mode: Mamba2 (``mamba_mixer2.py::MambaMixer2.get_kv_cache_spec``) and KDA already in 0.32.0 (its
        wheel; a real Nemotron-H log of the CPU build: 585.14x = 8192 blocks / (8 + 2 groups x 3 blocks));
        earlier releases not re-verified."""
        return self.version >= (0, 32, 0, 0)

    @property
    def gdn_checkpoint_blocks(self) -> bool:
        """GDN exports prefill checkpoints (with the FlashInfer prefill) from 0.33.0
        (``layers/mamba/gdn/qwen_gdn_linear_attn.py::QwenGatedDeltaNetAttention.get_kv_cache_spec``; 0.32.0 has none)."""
        return self.version >= (0, 33, 0, 0)

    @property
    def backend_alignment(self) -> bool:
        """``platforms/interface.py::_align_hybrid_block_size`` takes the backend's kernel block (MLA ≥128) and, in
        align mode, the prefill-checkpoint alignment from 0.20; before, A was 16 (64 for MLA)."""
        return self.version >= (0, 20, 0, 0)


def vllm_release(version: str | tuple[int, ...] | None) -> VLLMRelease:
    return VLLMRelease(require_version(version, VLLM_LATEST))


def vllm_default_mode(version: str | tuple[int, ...] | None = None, prefix_caching: bool | None = None) -> str:
    """``model_executor/models/config.py::MambaModelConfig.verify_and_update_config``: prefix caching switches the
    mode to ``align``; prefix caching is on by default for hybrids from 0.26.0."""
    rel = vllm_release(version)
    pc = rel.prefix_caching_default if prefix_caching is None else prefix_caching
    return "align" if pc and rel.has_modes else "none"


def vllm_gdn_prefill_kernel(model: ModelSpec, platform: str = "hopper", requested: str = "auto") -> str:
    """The GDN prefill kernel vLLM 0.33.0 runs (``layers/mamba/gdn/qwen_gdn_linear_attn.py::
    _resolve_gdn_prefill_backend``, logged by ``_log_gdn_backend_decision`` as ``Using <kernel> GDN prefill kernel``):
    ``cpu`` on the CPU build; FlashInfer (``requested`` auto or flashinfer) on Hopper (SM90) with no further
    constraint, on Blackwell (SM10x/SM12x) only with ``head_k_dim == 128`` and a CUDA 13 runtime (assumed here;
    pass ``triton`` for CUDA 12); else Triton/FLA, also when ``--gdn-prefill-backend triton``."""
    if platform == "cpu":
        return "cpu"
    req = (requested or "auto").lower()
    if req not in GDN_BACKENDS:
        raise ValueError(f"unknown GDN prefill backend {requested!r} (one of {', '.join(GDN_BACKENDS)})")
    if req == "triton":
        return "triton"
    if platform == "hopper" or (platform == "blackwell" and model.lin_k_dim == 128):
        return "flashinfer"
    return "triton"


def vllm_ssm_dtype(platform: str, ssm_dtype: str | None, linear_kind: str | None = "gdn", cpu_isa: str = "avx512-bf16") -> str | None:
    """The SSM state dtype the engine stores. On the CPU build (0.32.0-0.33.0 ``platforms/cpu.py::
    CpuPlatform.check_and_update_config``), on a CPU with AVX512-BF16 (AMX CPUs have it), any SSM cache dtype
    but float32 becomes float32 (``Reset SSM cache type to float32 for accelerated GDN mamba backend ...``),
    except float16 / bfloat16 asked for a GDN model, which are kept (``Using bfloat16 SSM state storage ...``);
    on any other CPU the dtype is as asked (None: the model's own, bf16 for the suite's tiny Qwen3-Next). GPUs:
    as asked."""
    if cpu_isa not in CPU_ISAS:
        raise ValueError(f"unknown CPU ISA {cpu_isa!r} (one of {', '.join(CPU_ISAS)})")
    if platform != "cpu" or cpu_isa != "avx512-bf16" or ssm_dtype == "float32":
        return ssm_dtype
    if ssm_dtype in ("float16", "bfloat16") and linear_kind == "gdn":
        return ssm_dtype
    return "float32"


def vllm_checkpoint_blocks(
    model: ModelSpec, mode: str, version: str | tuple[int, ...] | None = None, platform: str = "hopper", gdn_backend: str = "auto"
) -> int:
    """Prefill checkpoint blocks a mamba group holds per request in align mode (0.33.0):

    * Mamba2: always 1 (``layers/mamba/mamba_mixer2.py::MambaMixer2.get_kv_cache_spec``);
    * GDN: 1 when the FlashInfer GDN prefill runs (:func:`vllm_gdn_prefill_kernel`;
      ``qwen_gdn_linear_attn.py::QwenGatedDeltaNetAttention.get_kv_cache_spec``), none with Triton or on the CPU;
    * KDA: 1 only with FlashKDA, which needs a bounded gate (``gate_lower_bound`` in ``linear_attn_config``;
      ``models/kimi_k3/nvidia/kda.py::is_flashkda_supported``).
    """
    if mode != "align" or not vllm_release(version).checkpoint_blocks or not model.is_hybrid or not model.prefill_checkpoints:
        return 0
    if model.linear_kind == "mamba2":
        return 1
    if model.linear_kind == "gdn":
        if not vllm_release(version).gdn_checkpoint_blocks:
            return 0
        return 1 if vllm_gdn_prefill_kernel(model, platform, gdn_backend) == "flashinfer" else 0
    if model.linear_kind == "kda":
        return 1 if model.kda_bounded_gate and model.lin_v_dim == 128 else 0
    return 0


def vllm_checkpoint_alignment(
    model: ModelSpec, mode: str, version: str | tuple[int, ...] | None = None, platform: str = "hopper", gdn_backend: str = "auto"
) -> int:
    """Token alignment of those checkpoints, ``lcm``-ed into the block size in align mode
    (``layers/mamba/abstract.py::get_mamba_prefill_checkpoint_alignment``): FlashInfer GDN 64
    (``v1/attention/backends/gdn_attn.py::FLASHINFER_GDN_CHECKPOINT_ALIGNMENT``), FlashKDA 16
    (``layers/mamba/kda_checkpoint.py``); Mamba2 declares none (1)."""
    if not vllm_checkpoint_blocks(model, mode, version, platform, gdn_backend):
        return 1
    return {"gdn": 64, "kda": 16}.get(model.linear_kind or "", 1)


def vllm_blocks_per_request(
    mode: str = "none", spec_tokens: int = 0, version: str | tuple[int, ...] | None = None, checkpoint_blocks: int = 0
) -> int:
    """Mamba blocks per request per mamba group (``MambaSpec.max_memory_usage_bytes / page_size``): none →
    ``1 + spec`` (0.10–0.14: 1), align → ``2 + spec + checkpoint blocks`` (0.32+). ``all`` mode depends on the length;
    not modelled (raises)."""
    rel = vllm_release(version)
    m = (mode or "none").lower()
    if m == "none":
        return 1 + max(0, spec_tokens) if rel.spec_blocks_in_none_mode else 1
    if m == "align":
        return 2 + max(0, spec_tokens) + (checkpoint_blocks if rel.checkpoint_blocks else 0)
    raise ValueError(f"mamba cache mode {mode!r} not modelled (use none or align)")


def vllm_kernel_alignment(
    model: ModelSpec,
    mode: str,
    version: str | tuple[int, ...] | None = None,
    platform: str = "hopper",
    block_size: int = 16,
    gdn_backend: str = "auto",
) -> int:
    """The ``A`` of ``attn_block = A × cdiv(mamba_page, A × attn_page_per_token)``.

    0.20+ (``platforms/interface.py::_align_hybrid_block_size``): the attention backend's smallest kernel block
    (:data:`KERNEL_BLOCK`: 16 for the GPU GQA backends, Blackwell's FlashInfer included; 32 on the CPU) raised to
    the configured block size (16; 128 on the CPU), at least 128 for MLA, ``lcm``-ed with the checkpoint alignment
    in align mode (64 with the FlashInfer GDN prefill: 16 → 64 on Hopper and Blackwell). Before 0.20: 16, or 64
    for MLA."""
    if not vllm_release(version).backend_alignment:
        return 64 if model.attention == "mla" else 16
    a = max(KERNEL_BLOCK[platform], block_size)
    if model.attention == "mla":
        a = max(a, 128)
    return math.lcm(a, vllm_checkpoint_alignment(model, mode, version, platform, gdn_backend))


def vllm_group_size(n_attn: int, n_mamba: int) -> int:
    """``v1/core/kv_cache_planning.py::_get_kv_cache_groups_uniform_page_size``: the smaller layer count, or the
    larger one when it is below 1.5× the smaller (fewer padding layers)."""
    counts = [x for x in (n_attn, n_mamba) if x > 0]
    if not counts:
        return 1
    lo, hi = min(counts), max(counts)
    return hi if hi < lo * 1.5 else lo


@dataclass(frozen=True)
class VLLMPool:
    budget_bytes: int
    attn_page_per_token: int  # bytes per token per attention layer per GPU
    mamba_page: int  # one linear layer's state bytes per GPU (unpadded)
    block_size: int
    page_bytes: int  # P, after unification
    padding_pct: float
    group_size: int
    n_attn_groups: int
    n_mamba_groups: int
    num_blocks: int
    blocks_per_request: int  # per mamba group
    state_bytes_per_request: int  # n_mamba_groups * group_size * P * bpg (per GPU)
    mamba_bound_concurrency: int
    max_model_len: int | None
    max_concurrency: float | None  # "Maximum concurrency for max_model_len tokens per request"
    kv_cache_tokens_old: int  # (num_blocks // num_groups) * block_size   (0.9.1–0.20 log)
    kv_cache_tokens_new: int | None  # int(max_concurrency * max_model_len)  (0.22+ log)
    max_num_seqs: int | None
    cap: int  # min(max_num_seqs, mamba-bound, floor(max_concurrency) if known)
    binding_pool: str
    mode: str = "none"  # mamba cache mode in effect (none | align)
    checkpoint_blocks: int = 0  # prefill checkpoint blocks per request per mamba group (align, 0.33+)


def vllm_pool(
    model: ModelSpec,
    budget_bytes: float,
    *,
    tp: int = 1,
    kv_dtype: str | None = None,
    ssm_dtype: str | None = None,
    mode: str | None = None,
    spec_tokens: int = 0,
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    user_block_size: int | None = None,
    version: str | tuple[int, ...] | None = None,
    platform: str = "hopper",
    prefix_caching: bool | None = None,
    num_gpu_blocks_override: int | None = None,
    gdn_backend: str = "auto",
    cpu_isa: str = "avx512-bf16",
    replayssm_len: int = 0,
) -> VLLMPool:
    """vLLM V1 hybrid pool: page unification, grouping, blocks, concurrency (docs/sizing.md, "vLLM").

    ``mode`` ``None`` follows prefix caching (``align`` by default for hybrids from 0.26). ``version`` picks the
    release behaviour (default 0.34.0). Qwen3-Next TP2 bf16 with 47,878,721,024 B on 0.10.2 → block 544,
    P 557,056, 7162 blocks, 14.77x at 262,144; on 0.34.0, whose default block size is 64, block 576.
    """
    tp = max(1, tp)
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r} (one of {', '.join(PLATFORMS)})")
    m = (mode or vllm_default_mode(version, prefix_caching)).lower()
    ssm = vllm_ssm_dtype(platform, ssm_dtype, model.cpu_state_backend, cpu_isa)
    st = linear_state(model, tp, ssm, engine="vllm", conv_extra_tokens=spec_tokens, replayssm_len=replayssm_len)
    attn_tok = kv_bytes_per_token_per_layer(model, kv_dtype, tp)
    mamba_page = st.page_bytes
    block = user_block_size or vllm_release(version).default_block_size(platform)
    if model.is_hybrid and attn_tok:
        A = vllm_kernel_alignment(model, m, version, platform, block, gdn_backend)
        attn_block = A * math.ceil(mamba_page / (A * attn_tok))
        if vllm_release(version).backend_alignment:  # a multiple of every backend's smallest kernel block
            attn_block = KERNEL_BLOCK[platform] * math.ceil(attn_block / KERNEL_BLOCK[platform])
        block = max(block, attn_block)
    P = block * attn_tok
    pad_pct = 100.0 * (P - mamba_page) / mamba_page if model.is_hybrid and mamba_page else 0.0
    n_attn, n_mamba = model.full_layers, (model.linear_layers if model.is_hybrid else 0)
    gs = vllm_group_size(n_attn, n_mamba)
    g_attn = math.ceil(n_attn / gs) if n_attn else 0
    g_mamba = math.ceil(n_mamba / gs) if n_mamba else 0
    budget = int(budget_bytes)
    num_blocks = budget // (P * gs) if P else 0
    if num_gpu_blocks_override is not None:
        num_blocks = int(num_gpu_blocks_override)  # kv_cache_planning.py::may_override_num_blocks
    ckpt = vllm_checkpoint_blocks(model, m, version, platform, gdn_backend) if g_mamba else 0
    bpg = vllm_blocks_per_request(m, spec_tokens, version, ckpt) if g_mamba else 0
    state = g_mamba * gs * P * bpg
    mamba_bound = num_blocks // (g_mamba * bpg) if g_mamba else 10**9
    conc = None
    new_tokens = None
    if max_model_len:
        denom = g_attn * math.ceil(max_model_len / block) + g_mamba * bpg
        conc = num_blocks / denom if denom else None
        new_tokens = int(conc * max_model_len) if conc is not None else None
    n_groups = g_attn + g_mamba
    old_tokens = (num_blocks // n_groups) * block if n_groups else 0
    limits = [mamba_bound]
    if max_num_seqs:
        limits.append(int(max_num_seqs))
    if conc is not None:
        limits.append(math.floor(conc))
    cap = min(limits)
    binding = "mamba" if (g_mamba and conc is not None and mamba_bound < conc) or (conc is None and g_mamba) else "kv"
    return VLLMPool(
        budget_bytes=budget,
        attn_page_per_token=attn_tok,
        mamba_page=mamba_page,
        block_size=block,
        page_bytes=P,
        padding_pct=pad_pct,
        group_size=gs,
        n_attn_groups=g_attn,
        n_mamba_groups=g_mamba,
        num_blocks=num_blocks,
        blocks_per_request=bpg,
        state_bytes_per_request=state,
        mamba_bound_concurrency=mamba_bound if g_mamba else 0,
        max_model_len=max_model_len,
        max_concurrency=conc,
        kv_cache_tokens_old=old_tokens,
        kv_cache_tokens_new=new_tokens,
        max_num_seqs=max_num_seqs,
        cap=cap,
        binding_pool=binding,
        mode=m,
        checkpoint_blocks=ckpt,
    )
