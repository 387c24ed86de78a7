"""A stand-in for ``sgl_kernel``, SGLang's kernel package, whose CPU build no registry here has (the published
``sglang-kernel`` / ``sgl-kernel`` wheels are CUDA builds: every library needs libcudart or libnvrtc).

SGLang 0.5.23 imports it at start with ``--device cpu`` for any model (the KV cache mover imports
``copy_all_layer_kv_cache_cpu``). The names SGLang imports on the CPU path are here; each raises if ever called,
except the GDN operators, which are registered from the reference kernels (``sgl_kernel.mamba``; a torch custom op
for those SGLang looks up as ``torch.ops.sgl_kernel.*``).

It registers no ``convert_weight_packed``: SGLang's AMX probe (``cpu_has_amx_support``: the CPU has AMX tiles *and*
``hasattr(torch.ops.sgl_kernel, "convert_weight_packed")``) is therefore false on every CPU, so a machine with AMX
takes the same plain-torch path as one without (docs/engine-suite.md, "Machine features").
"""

from __future__ import annotations

__version__ = "0.0.0+hce.stand.in"

STAND_IN = True


def _missing(name: str):
    def fn(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name}: the suite's stand-in for SGLang's CPU kernel package has no implementation of it "
            "(tests/engine/sglang_cpu; docs/engine-suite.md lists what is replaced)"
        )

    fn.__name__ = name
    return fn


# imported at start on the CPU path (found by booting SGLang with a stand-in that logged every name asked), called
# only by what the suite does not run: the hierarchical cache's KV mover and speculative decoding
_IMPORTED_ONLY = (
    "copy_all_layer_kv_cache_cpu",  # sglang/kernels/ops/kvcache/cache_move.py (HiCache)
    "assign_req_to_token_pool_cpu",  # srt/mem_cache/allocation.py (alloc_for_spec_decode)
    "build_tree_kernel_efficient_cpu",  # speculative decoding (EAGLE trees)
    "verify_tree_greedy_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
)
for _n in _IMPORTED_ONLY:
    globals()[_n] = _missing(_n)

from . import mamba  # noqa: E402,F401  (registers torch.ops.sgl_kernel's GDN operators)
