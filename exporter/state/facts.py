"""Facts about one server, derived from what its log said: release, radix strategy, slots per request, caps and
where they come from, dtypes, the capacity the pools were given.

Everything above the rules reads these (the rules' conditions, the recommendations, ``report``, the collector's
request cap), so a fact is derived in one place. :func:`facts_of` derives them once per *generation* of what the
log said about the server (``SourceState.generation``: the state bumps it on every line but a sample, a restart,
the engine told; the rules when they learn the release) and keeps them on the server; batch samples reuse them,
whoever reads them: a reader without the rules reads current facts too. What changes per sample (the usage distribution, the peak
demand) is :class:`Demand`, read at the moment a recommendation is computed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Protocol

from parsers import events as ev
from parsers.numbers import GIB

from .. import capacity as cap
from ..capacity import defaults, families
from ..capacity.version import VersionRange, parse_version
from ..catalogues.configvalues import number, truthy, unset
from .revisions import sizes_after_warmup
from .store import ServerState, SourceState

# the architectures whose linear-attention layers are Gated DeltaNet (Qwen3-Next, Qwen3.5 and later)
GDN_ARCH_RE = re.compile(r"Qwen3Next|Qwen3_5|Qwen3_8|Qwen4")
_MULTIMODAL_NAME_RE = re.compile(r"qwen3\.[5-9]|qwen3_5|vl\b|-vl-|omni", re.I)


class EngineVersionConfig(Protocol):
    """The one setting the facts read from the rules' configuration (``RulesConfig.engine_version``)."""

    engine_version: str | None


# --------------------------------------------------------------------------------------------
# release, strategy, slots per request, caps


def version_range(src: SourceState, cfg: EngineVersionConfig | None = None) -> VersionRange:
    """The release range of the server behind ``src`` (this boot)."""
    if cfg is not None and cfg.engine_version:
        pv = parse_version(cfg.engine_version)
        return VersionRange(pv, pv, True, [f"rules-config engine_version={cfg.engine_version}"])
    if src.version:
        pv = parse_version(src.version)
        if pv is not None:
            return VersionRange(pv, pv, True, [f"version {src.version} in the log"])
    return src.release


# --------------------------------------------------------------------------------------------
# SGLang slots-per-request table (docs/formats/sglang.md#slots-per-running-request)


def radix_strategy(src: SourceState) -> str:
    """'disabled' | 'no_buffer' | 'extra_buffer' | 'extra_buffer_lazy' | 'auto' (unresolved)."""
    cfg = src.config
    if truthy(cfg.get("disable_radix_cache")):
        return "disabled"
    s = cfg.get("mamba_radix_cache_strategy") or cfg.get("mamba_scheduler_strategy")
    s = str(s).strip().lower() if s not in (None, "") else "auto"
    if s == "auto":
        overlap = not truthy(cfg.get("disable_overlap_schedule"))
        page = cfg.get("page_size")
        paged = isinstance(page, (int, float)) and not isinstance(page, bool) and page > 1
        return "extra_buffer" if overlap or paged else "no_buffer"
    return s


def speculative_on(src: SourceState) -> bool:
    for k in ("speculative_algorithm", "speculative_config"):
        v = src.config.get(k)
        if v not in (None, "", "None", "none", {}):
            return True
    return False


def slots_per_request_table(version: tuple[int, ...], strategy: str, overlap: bool, spec: bool) -> int | None:
    """The capacity model's table (:func:`exporter.capacity.sglang_slots_per_request`, the one copy), read with
    what a log can say: before 0.5.7 there was one radix mode whatever the strategy name, and a strategy that a
    release does not have gives ``None`` instead of an error."""
    if version < (0, 5, 7, 0) and strategy != "disabled":
        strategy = "no_buffer"
    try:
        return cap.sglang_slots_per_request(strategy, version, overlap=overlap, spec=spec)
    except ValueError:
        return None


def slots_per_request(src: SourceState, srv: ServerState, cfg: EngineVersionConfig | None = None) -> tuple[int | None, str]:
    """Mamba slots each running request reserves: printed (cap line), else from the table."""
    v = srv.capacity.get("mamba_slots_per_request")
    if v:
        return int(v), "log"
    if src.engine != ev.SGLANG:
        return None, ""
    vr = version_range(src, cfg)
    strategy = radix_strategy(src)
    overlap = not truthy(src.config.get("disable_overlap_schedule"))
    spec = speculative_on(src)
    cands = {slots_per_request_table(x, strategy, overlap, spec) for x in (vr.floor, vr.ceiling) if x is not None}
    if vr.floor is None and vr.ceiling is None:
        cands = {slots_per_request_table(cap.LATEST_SGLANG, strategy, overlap, spec)}
    elif vr.floor is None:
        cands.add(slots_per_request_table((0, 5, 10, 0), strategy, overlap, spec) if vr.ceiling >= (0, 5, 10, 0) else None)
    cands.discard(None)
    if len(cands) == 1:
        return cands.pop(), f"table ({strategy}, SGLang {vr})"
    if cands:
        # ambiguous across the known range: the floor's value
        return slots_per_request_table(vr.floor or (0, 5, 10, 0), strategy, overlap, spec), f"table ({strategy}, SGLang {vr}, ambiguous)"
    return None, ""


def mamba_cap(src: SourceState, srv: ServerState, cfg: EngineVersionConfig | None = None) -> int | None:
    """Running requests the mamba pool allows: the printed cap, else slots // slots per request."""
    c = srv.capacity
    v = c.get("mamba_capped_max_running_requests")
    if v:
        return int(v)
    slots = c.get("mamba_capacity_slots")
    if not slots:
        return None
    spr, _ = slots_per_request(src, srv, cfg)
    if not spr:
        return None
    return int(slots) // spr


# --------------------------------------------------------------------------------------------
# vLLM's defaults on this server (exporter/capacity/defaults.py): what the log shows of the device and the sizing mode

# basis of a fact: read from a line of the log, or the engine's default (exporter/capacity/defaults.py) where the log says
# nothing; a default the log does not let the exporter know is no value at all (hybrid_cache_max_running_requests'
# ``basis`` label, docs/metrics.md)
LOGGED, DEFAULT = "logged", "default"


def device_gib(src: SourceState, srv: ServerState) -> float | None:
    """The GPU's memory in GiB as the log shows it: ``Free memory on device (F/T GiB)``, else the budget a 0.34 line
    names (``the requested R GiB``, ``caps this instance at R GiB``) over the utilization in force."""
    c = srv.capacity
    if c.get("_device_total_bytes"):
        return c["_device_total_bytes"] / GIB
    req = c.get("_requested_bytes")
    util = gpu_memory_utilization(src, srv)[0]
    return req / util / GIB if req and util else None


def gpu_memory_utilization(src: SourceState, srv: ServerState) -> tuple[float | None, str, str]:
    """(value, basis, why) of vLLM's ``gpu_memory_utilization`` in force: logged (``non-default args``, the value
    ``Free memory on device`` or 0.34's cap warning names), else the release's default (0.9, 0.92, and from 0.34
    1.0 with the extensible KV cache); None when the log does not tell which default applies."""
    v = number(src.config.get("gpu_memory_utilization"))
    if v:
        return v, LOGGED, f"gpu_memory_utilization {v:g} (non-default args)"
    v = srv.capacity.get("_gpu_memory_utilization")
    if v:
        return v, LOGGED, f"gpu_memory_utilization {v:g} (as the engine logged it in force)"
    after = sizes_after_warmup(src.config, src.version)
    d = defaults.vllm_gpu_memory_utilization(src.version, after)
    if d is None:
        return None, "", "the release's default: not known from the log (0.9, 0.92, or from 0.34 1.0 with the extensible KV cache)"
    mode = " with the extensible KV cache" if after else ""
    return d, DEFAULT, f"unset: vLLM {src.version}'s default {d:g}{mode}"


def _world(src: SourceState) -> int:
    world = 1
    for k in ("tensor_parallel_size", "pipeline_parallel_size"):
        v = src.config.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            world *= v
    return world


def vllm_default_max_num_seqs(src: SourceState, srv: ServerState) -> defaults.MaxNumSeqs:
    """The ``max_num_seqs`` vLLM resolves for this server when the flag is not set, from what the log shows of its
    device (exporter/capacity/defaults.py); ``value`` None where the log does not tell."""
    cfg = src.config
    dev = cfg.get("_device") or cfg.get("device_config")
    mnbt = number(cfg.get("max_num_batched_tokens"))
    return defaults.vllm_max_num_seqs(
        src.version,
        device="cpu" if dev == "cpu" else (str(dev) if dev else None),
        device_gib=device_gib(src, srv),
        sm90_or_later=cfg.get("_gdn_prefill_kernel") == "flashinfer",
        world=_world(src),
        throughput=str(cfg.get("performance_mode") or "").lower() == "throughput",
        max_num_batched_tokens=int(mnbt) if mnbt else None,
    )


def effective_max_running(src: SourceState, srv: ServerState) -> tuple[float | None, str]:
    """The effective request cap and where it came from: ``log`` (a line), ``args`` (``non-default args``), or
    ``default: <why>`` (the engine's default, which vLLM logs only at DEBUG); (None, ``unknown: <why>``) where the
    default depends on what the log does not show (vLLM on a GPU: its memory and name)."""
    v = srv.capacity.get("max_running_requests")
    if v is not None:
        return v, "log"
    if src.engine != ev.VLLM:
        return None, ""
    for key in ("max_num_seqs", "_max_num_seqs_default"):
        a = src.config.get(key)
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            return float(a), "args" if key == "max_num_seqs" else "log"
    d = vllm_default_max_num_seqs(src, srv)
    if d.value is None:
        return None, f"unknown: {d.why}"
    return float(d.value), f"default: {d.why}"


def basis_of(how: str) -> str:
    """The basis (``logged`` | ``default`` | ``""``) of a fact whose source :func:`effective_max_running` names."""
    if how.startswith("default"):
        return DEFAULT
    return LOGGED if how in ("log", "args") else ""


def requested_max_running(src: SourceState, srv: ServerState) -> tuple[float | None, str]:
    """What the operator asked for (per DP worker), or SGLang's default estimate when unset."""
    c = srv.capacity
    if c.get("requested_max_running_requests"):
        return c["requested_max_running_requests"], "log"
    cfg = src.config
    req = cfg.get("max_running_requests")
    if isinstance(req, (int, float)) and not isinstance(req, bool) and req > 0:
        dp = cfg.get("dp_size") or 1
        if truthy(cfg.get("enable_dp_attention")) and isinstance(dp, (int, float)) and dp > 1:
            return float(int(req) // int(dp)), "server_args (per dp worker)"
        return float(req), "server_args"
    if src.engine == ev.SGLANG and "max_running_requests" in cfg:
        tokens = c.get("kv_capacity_tokens")
        ctx = c.get("context_length_tokens") or cfg.get("context_length")
        if tokens and isinstance(ctx, (int, float)) and ctx > 0:
            est = min(max(int(tokens / ctx * 512), 2048), 4096)
            return float(min(est, int(tokens) // 2)), "default estimate"
        return 2048.0, "default estimate"
    return None, ""


# --------------------------------------------------------------------------------------------
# dtypes and model kind from the config the log printed


def sglang_ssm_dtype(src: SourceState) -> tuple[str, str]:
    """(dtype, where from). server_args None -> the model config, float32 on public checkpoints."""
    v = _dtype(src.config.get("mamba_ssm_dtype"))
    if v is not None:
        return v, "server_args"
    return "float32", "the model config's default (mamba_ssm_dtype not set in server_args)"


def _dtype(v: object) -> str | None:
    """A dtype the log set, normalised; None when not set or not one the capacity model knows (a
    damaged value: not read, never an error)."""
    if unset(v):
        return None
    try:
        return cap.normalize_dtype(str(v))
    except ValueError:
        return None


def vllm_arch(src: SourceState) -> str | None:
    return src.arch


def vllm_is_hybrid(src: SourceState, srv: ServerState) -> bool:
    """Whether a vLLM server keeps recurrent state: its log says so (the hybrid block size, mamba blocks, a mamba
    setting), or its architecture is a family of the catalogue that vLLM serves (exporter/capacity/families.py)."""
    c = srv.capacity
    fam = families.family_of(vllm_arch(src) or "")
    return bool(
        c.get("attention_block_size_tokens")
        or c.get("mamba_blocks")
        or src.config.get("mamba_cache_mode")
        or src.config.get("mamba_ssm_cache_dtype")
        or (fam is not None and fam.vllm)
    )


def vllm_ssm_dtype(src: SourceState) -> str:
    v = _dtype(src.config.get("mamba_ssm_cache_dtype"))
    if v is not None:
        return v
    arch = vllm_arch(src) or ""
    model = str(src.config.get("model") or src.config.get("model_path") or "")
    # auto -> float32 for NemotronH (HF value), Qwen3.5/3.6 (HF mamba_ssm_dtype), KDA (docs/formats/vllm.md#flags-and-defaults)
    if re.search(r"NemotronH|Qwen3_5|KimiLinear", arch) or re.search(r"qwen3\.[5-9]|nemotron-h|kimi-linear", model, re.I):
        return "float32"
    return _dtype(src.config.get("mamba_cache_dtype")) or "bfloat16"


def is_multimodal(src: SourceState) -> bool:
    arch = vllm_arch(src)
    if arch:
        return arch.endswith("ForConditionalGeneration")
    model = str(src.config.get("model") or src.config.get("served_model_name") or "")
    return bool(_MULTIMODAL_NAME_RE.search(model)) and "next" not in model.lower()


# --------------------------------------------------------------------------------------------
# the facts of one server, derived once per generation


@dataclass(frozen=True)
class ServerFacts:
    """What the log said about one server, derived in one place (see the module doc). ``*_source`` says where a
    value came from (``log``, ``server_args``, ``table (...)``, ``default estimate`` …) for ``report``."""

    engine: str | None
    version: VersionRange
    strategy: str  # disabled | no_buffer | extra_buffer | extra_buffer_lazy (SGLang; resolved from auto)
    overlap: bool
    speculative: bool
    unified_memory: bool
    slots_per_request: int | None
    slots_per_request_source: str
    mamba_slots: int | None
    mamba_cap: int | None  # running requests the mamba pool allows
    max_running: float | None  # the effective request cap
    max_running_source: str  # log | args | default: <why> | unknown: <why>
    requested_max_running: float | None  # what the operator asked for (per DP worker), or SGLang's estimate
    requested_source: str
    ssm_dtype: str
    ssm_dtype_source: str
    kv_dtype: str | None
    context_len: int | None  # tokens one request may reach (SGLang context_len / vLLM max_model_len)
    capacity: cap.ObservedCapacity  # the pools as logged; usage left empty (see :meth:`observed`)
    generation: tuple = field(default=(), compare=False)

    def observed(self, demand: Demand) -> cap.ObservedCapacity:
        """The capacity model's view with the usage percentiles of ``demand`` filled in."""
        return replace(
            self.capacity,
            kv_usage=demand.kv_p95,
            mamba_usage=demand.mamba_p95 if self.engine != ev.VLLM else None,
        )


@dataclass(frozen=True)
class Demand:
    """What the server was asked to do so far (changes per sample): usage percentiles and peak demand."""

    kv_p95: float | None = None
    kv_max: float | None = None
    mamba_p95: float | None = None
    peak_running: float = 0.0
    peak_queued: float = 0.0


def stamp(src: SourceState, cfg: EngineVersionConfig | None) -> tuple:
    """What the facts depend on: the source's generation of what the log said, and the configured release."""
    return (src.generation, getattr(cfg, "engine_version", None))


def derive(src: SourceState, srv: ServerState, cfg: EngineVersionConfig | None = None, generation: tuple = ()) -> ServerFacts:
    """The facts of ``srv``, computed now (no cache; :func:`facts_of` caches)."""
    c = srv.capacity
    conf = src.config
    eff, eff_how = effective_max_running(src, srv)
    spr, spr_how = slots_per_request(src, srv, cfg)
    req, req_how = requested_max_running(src, srv)
    vr = version_range(src, cfg)
    b = srv.mamba_state_bytes
    ctx = c.get("context_length_tokens") or conf.get("context_length") or conf.get("max_model_len")
    ctx = int(ctx) if isinstance(ctx, (int, float)) and not isinstance(ctx, bool) and ctx > 0 else None
    if src.engine == ev.VLLM:
        ssm, ssm_how = vllm_ssm_dtype(src), "vllm config"
        kvd = str(conf.get("kv_cache_dtype") or "auto")
        slots = int(c["mamba_blocks"]) if c.get("mamba_blocks") else None
        gib = device_gib(src, srv)
        observed = cap.ObservedCapacity(
            mamba_slots=slots,
            kv_tokens=int(c["kv_capacity_tokens"]) if c.get("kv_capacity_tokens") else None,
            kv_bytes=c.get("kv_capacity_bytes"),
            max_running_requests=int(eff) if eff else None,
            ssm_dtype=ssm,
            kv_dtype=kvd,
            requested_max_running_requests=int(req) if req else None,
            engine="vllm",
            padding_slots=0,
            context_len=ctx,
            device_bytes=gib * GIB if gib else None,
            memory_utilization=gpu_memory_utilization(src, srv)[0],
            withheld_bytes=c.get("_withheld_bytes"),
        )
    else:
        ssm, ssm_how = sglang_ssm_dtype(src)
        raw_kv = conf.get("kv_cache_dtype")
        kvd = None if unset(raw_kv) else str(raw_kv).replace("torch.", "")
        slots = int(c["mamba_capacity_slots"]) if c.get("mamba_capacity_slots") else None
        ratio = number(conf.get("mamba_full_memory_ratio"))
        observed = cap.ObservedCapacity(
            mamba_slots=slots,
            slots_per_request=spr,
            conv_bytes=b.get("conv"),
            ssm_bytes=b.get("ssm"),
            kv_tokens=int(c["kv_capacity_tokens"]) if c.get("kv_capacity_tokens") else None,
            kv_bytes=c.get("kv_capacity_bytes"),
            max_running_requests=int(eff) if eff else None,
            mamba_full_memory_ratio=ratio if ratio else defaults.SGLANG_MAMBA_FULL_MEMORY_RATIO,
            ssm_dtype=ssm,
            kv_dtype=kvd,
            requested_max_running_requests=int(req) if req else None,
            radix_strategy=radix_strategy(src),
            engine="sglang",
            context_len=ctx,
            unmodelled=_unmodelled(src, srv),
            explicit_mamba_size=_mamba_size_set(src),
            kv_token_limit=_kv_token_limit(src),
        )
    return ServerFacts(
        engine=src.engine,
        version=vr,
        strategy=radix_strategy(src),
        overlap=not truthy(conf.get("disable_overlap_schedule")),
        speculative=speculative_on(src),
        unified_memory=truthy(conf.get("enable_unified_memory")),
        slots_per_request=spr,
        slots_per_request_source=spr_how,
        mamba_slots=slots,
        mamba_cap=mamba_cap(src, srv, cfg),
        max_running=eff,
        max_running_source=eff_how,
        requested_max_running=req,
        requested_source=req_how,
        ssm_dtype=ssm,
        ssm_dtype_source=ssm_how,
        kv_dtype=kvd,
        context_len=ctx,
        capacity=observed,
        generation=generation,
    )


def _unmodelled(src: SourceState, srv: ServerState) -> tuple[str, ...]:
    """What the log shows an SGLang server has that the capacity model's ratio arithmetic leaves out."""
    out = []
    if srv.kv_upper_bound or srv.capacity.get("kv_upper_bound_tokens"):
        out.append("the pre-capture reserve (KV Cache VA upper bound, sized again after the CUDA graphs)")
    if srv.replayssm_buffer_bytes:
        out.append(f"the ReplaySSM ring buffers ({sum(srv.replayssm_buffer_bytes.values()) / (1 << 30):.2f} GiB)")
    extra = [k for k in srv.mamba_state_bytes if k not in ("conv", "ssm")]
    if extra:
        out.append("the speculative intermediate state (" + ", ".join(extra) + ")")
    if srv.capacity.get("draft_kv_capacity_tokens"):
        out.append("the draft model's KV pool")
    if speculative_on(src) and not extra:
        out.append("speculative decoding's extra state")
    if _mamba_size_set(src):
        out.append(
            "--max-mamba-cache-size (or, with the radix cache off, --max-running-requests), which sizes the mamba pool instead of the ratio"
        )
    return tuple(out)


def _kv_token_limit(src: SourceState) -> int | None:
    """SGLang's ``--max-total-tokens`` as the KV pool's limit: rounded down to the page (``page_size``, 1 when not
    logged), as SGLang rounds its pool; None when not set."""
    c = src.config
    lim = number(c.get("max_total_tokens"))
    if not lim or lim <= 0:
        return None
    page = int(number(c.get("page_size")) or 1)
    return int(lim) // page * page


def _mamba_size_set(src: SourceState) -> bool:
    """Whether SGLang sizes the mamba pool by a count, not by the ratio: ``--max-mamba-cache-size``, or the radix cache
    off with ``--max-running-requests`` (``capacity.sglang_pool``)."""
    c = src.config
    if (number(c.get("max_mamba_cache_size")) or 0) > 0:
        return True
    return truthy(c.get("disable_radix_cache")) and (number(c.get("max_running_requests")) or 0) > 0


def facts_of(src: SourceState, srv: ServerState, cfg: EngineVersionConfig | None = None) -> ServerFacts:
    """The facts of ``srv``, derived once per generation of what the log said (kept on the server)."""
    now = stamp(src, cfg)
    f = srv.facts
    if f is None or f.generation != now:
        f = srv.facts = derive(src, srv, cfg, now)
    return f


def peek(src: SourceState, srv: ServerState, cfg: EngineVersionConfig | None = None) -> ServerFacts:
    """The facts for a reader that must not write (the collector at scrape time): the kept ones when current,
    else derived without keeping them."""
    f = srv.facts
    if f is not None and f.generation == stamp(src, cfg):
        return f
    return derive(src, srv, cfg)
