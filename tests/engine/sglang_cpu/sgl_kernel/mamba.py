"""``sgl_kernel.mamba`` of the stand-in: the CPU ops of SGLang's GDN path, from the reference kernels, and the two
SGLang looks up as ``torch.ops.sgl_kernel.*`` (registered here as torch operators of the ``sgl_kernel`` namespace)."""

from __future__ import annotations

import torch
from hce_sglang_cpu import kernels

causal_conv1d_fn_cpu = kernels.causal_conv1d_fn
causal_conv1d_update_cpu = kernels.causal_conv1d_update
chunk_gated_delta_rule_cpu = kernels.chunk_gated_delta_rule

_LIB = torch.library.Library("sgl_kernel", "DEF")  # noqa: TID251 - kept alive for the process
_LIB.define("fused_gdn_gating_cpu(Tensor A_log, Tensor a, Tensor b, Tensor dt_bias) -> (Tensor, Tensor)")
_LIB.define(
    "fused_sigmoid_gating_delta_rule_update_cpu(Tensor A_log, Tensor dt_bias, Tensor q, Tensor k, Tensor v, Tensor a, "
    "Tensor b, Tensor(a!) initial_state_source, Tensor initial_state_indices, Tensor? cu_seqlens, "
    "bool use_qk_l2norm_in_kernel, float softplus_beta=1.0, float softplus_threshold=20.0) -> Tensor"
)
_LIB.impl("fused_gdn_gating_cpu", kernels.fused_gdn_gating, "CompositeExplicitAutograd")
_LIB.impl("fused_sigmoid_gating_delta_rule_update_cpu", kernels.fused_sigmoid_gating_delta_rule_update, "CompositeExplicitAutograd")
