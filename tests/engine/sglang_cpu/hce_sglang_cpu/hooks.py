"""Import hooks for SGLang 0.5.23 on a CPU, installed by the environment's ``sitecustomize.py``.

They change no file of SGLang and nothing of its scheduler, memory pools, radix cache or logging. Two things are
done at import time, each before or after one module is executed:

* ``torchvision``: its only wheels are CUDA builds, whose compiled operators do not load against the CPU torch; its
  ``_meta_registrations`` then registers fake kernels for operators that do not exist and the import fails
  (``operator torchvision::nms does not exist``). transformers and SGLang import torchvision; nothing here runs a
  torchvision operator. Fake registrations of ``torchvision::`` operators become no-ops while it is imported.
* ``sglang.kernels.ops.mamba.causal_conv1d_triton``: the Triton causal_conv1d, which SGLang uses on any device
  without the CUDA build of the kernel (LFM2's short convolution). Triton has no CPU driver ("0 active drivers": the
  first request kills the scheduler). Its two entry points become ``kernels.causal_conv1d_fn`` / ``_update``.
* ``sglang.kernels.ops.attention.fla.fused_norm_gate``: the Triton gated RMSNorm after Qwen3-Next's linear attention,
  which ``FusedRMSNormGated`` calls on a CPU without AMX (with AMX: sgl_kernel's ``fused_rmsnorm_gated_cpu``). Its
  ``rms_norm_gated`` becomes ``kernels.rms_norm_gated``.
* ``sglang.kernels.ops.elementwise.elementwise``: the Triton gate of the MoE's shared expert (Qwen3-Next), fused on a
  CPU without AMX. ``fused_gate_sigmoid_mul`` and ``fused_gate_sigmoid_mul_add`` become the references.
* ``sglang.kernels.ops.mamba.triton_ops``: the Mamba2 SSM kernels (Triton only), which the Mamba2 mixer imports from
  this package. ``mamba_chunk_scan_combined`` and ``selective_state_update`` become the references before the mixer's
  module takes them.
* ``sglang.srt.layers.attention.mamba.mamba``: the Mamba2 mixer (Nemotron-H) imports its causal convolution only on
  CUDA, NPU and XPU, so on a CPU the names it calls (``causal_conv1d_fn[_triton]``, ``causal_conv1d_update[_triton]``;
  Nemotron-H asks for the Triton pair) are unbound: the first prefill dies of a NameError. They are bound to the
  reference convolution.

The stand-in ``sgl_kernel`` package (beside this one) covers the third gap: SGLang's CPU kernel package.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

# module -> the names it gets from kernels.py: ``name`` or ``name=kernel`` (bound under another name)
REPLACED: dict[str, tuple[str, ...]] = {
    "sglang.kernels.ops.mamba.causal_conv1d_triton": ("causal_conv1d_fn", "causal_conv1d_update"),
    "sglang.kernels.ops.attention.fla.fused_norm_gate": ("rms_norm_gated",),
    "sglang.kernels.ops.elementwise.elementwise": ("fused_gate_sigmoid_mul", "fused_gate_sigmoid_mul_add"),
    "sglang.kernels.ops.mamba.triton_ops": ("mamba_chunk_scan_combined", "selective_state_update"),
    "sglang.srt.layers.attention.mamba.mamba": (
        "causal_conv1d_fn",
        "causal_conv1d_update",
        "causal_conv1d_fn_triton=causal_conv1d_fn",
        "causal_conv1d_update_triton=causal_conv1d_update",
        "mamba_chunk_scan_combined",
        "selective_state_update",
    ),
}


def _before_torchvision() -> None:
    import torch.library

    real = torch.library.register_fake
    if getattr(real, "_hce_wrapped", False):
        return

    def register_fake(op, *args, **kwargs):
        name = op if isinstance(op, str) else getattr(op, "_name", "")
        if str(name).startswith("torchvision::"):
            if args and callable(args[0]):
                return args[0]
            return lambda fn: fn
        return real(op, *args, **kwargs)

    register_fake._hce_wrapped = True
    torch.library.register_fake = register_fake


def _replace(module) -> None:
    """The module's Triton entry points become the references (looked up at call time by its callers)."""
    from . import kernels

    for entry in REPLACED[module.__name__]:
        name, _, kernel = entry.partition("=")
        setattr(module, name, getattr(kernels, kernel or name))


BEFORE = {"torchvision": _before_torchvision}
AFTER = dict.fromkeys(REPLACED, _replace)


class _Loader(importlib.abc.Loader):
    def __init__(self, name: str, real) -> None:
        self.name, self.real = name, real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module) -> None:
        if self.name in BEFORE:
            BEFORE[self.name]()
        self.real.exec_module(module)
        if self.name in AFTER:
            AFTER[self.name](module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in BEFORE and name not in AFTER:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(name, spec.loader)
                return spec
        return None


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
