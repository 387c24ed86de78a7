"""One sizing done twice, by ``exporter.capacity`` and by the oracle (tests/oracle/), as two dicts of the quantities
both produce: test_oracle.py's grids and test_oracle_families.py's family grids compare through these, so a
quantity added to the comparison is added once."""

from __future__ import annotations

from types import ModuleType

from exporter import capacity as cap

GiB = 1 << 30
# what vLLM's pool sizing gives, by the plan's names (the oracle's kv_cache_tokens is the plan's kv_cache_tokens_new)
VLLM_KEYS = (
    "mode",
    "mamba_page",
    "block_size",
    "page_bytes",
    "group_size",
    "n_attn_groups",
    "n_mamba_groups",
    "num_blocks",
    "blocks_per_request",
    "max_concurrency",
    "mamba_bound_concurrency",
    "cap",
)


def vllm_pair(
    model: cap.ModelSpec,
    cfg: dict,
    oracle: ModuleType,
    release: str,
    *,
    tp: int,
    avail: int,
    kv: str,
    ssm: str = "auto",
    pc: bool = True,
    mml: int | None = None,
    mns: int | None = None,
    platform: str = "hopper",
    backend: str = "auto",
) -> tuple[dict, dict]:
    """(the plan's, the oracle's) vLLM pool for ``avail`` bytes; ``oracle`` is the release's module."""
    want = oracle.size_pool(
        cfg,
        available_memory=avail,
        tp=tp,
        cache_dtype=kv,
        mamba_ssm_cache_dtype=ssm,
        enable_prefix_caching=pc,
        max_model_len=mml,
        max_num_seqs=mns,
        platform=platform,
        gdn_backend=backend,
    )
    plan = cap.make_plan(
        model,
        cap.PlanInputs(
            engine="vllm",
            tp=tp,
            budget_bytes=avail,
            kv_dtype=kv,
            ssm_dtype=None if ssm == "auto" else ssm,
            context_len=mml,
            max_running_requests=mns,
            prefix_caching=pc,
            platform=platform,
            gdn_backend=backend,
            vllm_version=release,  # the release of the oracle module, whatever plan's default
        ),
    )
    got = {k: getattr(plan.vllm, k) for k in VLLM_KEYS}
    got["kv_cache_tokens"] = plan.vllm.kv_cache_tokens_new
    return got, want


def sglang_pair(
    model: cap.ModelSpec,
    cfg: dict,
    oracle: ModuleType,
    *,
    tp: int,
    rest: int,
    kv: str,
    ssm: str | None,
    strategy: str,
    ctx: int | None,
    ratio: float = 0.9,
    mmcs: int | None = None,
    mrr: int | None = None,
    overlap: bool = True,
    skip: bool = False,
) -> tuple[dict, dict]:
    """(the plan's, the oracle's) SGLang pools for ``rest`` bytes. The engine goes through float GB and back
    (``int(rest_memory * 2**30)``): compare max_total_num_tokens with :func:`same_pools`."""
    want = oracle.size_pools(
        cfg,
        rest_gb=rest / GiB,
        tp=tp,
        kv_dtype=kv,
        mamba_ssm_dtype=ssm,
        mamba_full_memory_ratio=ratio,
        max_mamba_cache_size=mmcs,
        max_running_requests=mrr,
        context_length=ctx,
        strategy=strategy,
        overlap=overlap,
        skip_decode_lock=skip,
    )
    plan = cap.make_plan(
        model,
        cap.PlanInputs(
            engine="sglang",
            tp=tp,
            budget_bytes=rest,
            kv_dtype=kv,
            ssm_dtype=ssm,
            ratio=ratio,
            radix_strategy=strategy,
            context_len=ctx,
            max_running_requests=mrr,
            max_mamba_cache_size=mmcs,
            skip_decode_lock=skip,
            overlap=overlap,
        ),
    )
    sp = plan.sglang
    got = {
        "mamba_cache_per_req": plan.state.per_request,
        "kv_bytes_per_token": plan.kv_bytes_per_token,
        "max_mamba_cache_size": sp.mamba_slots,
        "slots_per_request": sp.slots_per_request,
        "max_total_num_tokens": sp.kv_tokens,
        "mamba_cap": sp.mamba_cap,
        "max_running_requests": sp.max_running_requests,
        "context_len": sp.context_len,
    }
    return got, want


def same_pools(got: dict, want: dict) -> None:
    """Every quantity equal, the KV tokens within one token (the engine's float GB)."""
    tokens = "max_total_num_tokens"
    assert {k: got[k] for k in got if k != tokens} == {k: want[k] for k in want if k != tokens}
    assert abs(got[tokens] - want[tokens]) <= 1
