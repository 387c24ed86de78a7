"""Reference implementations, in plain torch, of the compute kernels SGLang 0.5.23 has no CPU build of here.

Each follows the calling convention of the kernel it stands for (arguments, layouts, in-place state updates, padded
slots) and computes in float32. They are slow and simple on purpose: the suite's models are tiny, and what is under
test is SGLang's scheduler, pools and logging, which call them. ``check_kernels.py`` tests each against a naive
formula (``torch.nn.functional.conv1d``; the gated delta rule written as the explicit matrix recurrence).

* ``causal_conv1d_fn`` / ``causal_conv1d_update``: sglang/kernels/ops/mamba/causal_conv1d_triton.py (Triton; LFM2's
  short convolution calls them on any device without the CUDA kernel, and Triton has no CPU driver).
* ``causal_conv1d_fn_cpu`` / ``causal_conv1d_update_cpu`` and the three GDN ops: sgl_kernel's CPU build
  (``sgl_kernel.mamba``, ``torch.ops.sgl_kernel.*_cpu``), which no registry here has.
* ``mamba_chunk_scan_combined`` / ``selective_state_update``: the Mamba2 SSM kernels of
  sglang/kernels/ops/mamba/triton_ops (Triton only; Nemotron-H's mixer calls them on every device), and Nemotron-H's
  causal convolution, for which the Mamba2 mixer binds no kernel at all on a CPU (``causal_conv1d_fn`` above).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

PAD_SLOT_ID = -1


def _act(y: torch.Tensor, activation) -> torch.Tensor:
    if activation is True or activation in ("silu", "swish"):
        return F.silu(y)
    if activation in (None, False):
        return y
    raise NotImplementedError(f"activation {activation!r}")


def _conv_window(window: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, n: int) -> torch.Tensor:
    """The depthwise causal convolution of the last ``n`` positions of ``window`` (dim, width - 1 + n), float32."""
    width = weight.shape[1]
    w = weight.float()
    out = torch.zeros(window.shape[0], n, dtype=torch.float32)
    for k in range(width):
        out += window[:, k : k + n] * w[:, k : k + 1]
    if bias is not None:
        out += bias.float()[:, None]
    return out


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor | None,
    query_start_loc: torch.Tensor,
    seq_lens_cpu=None,
    cache_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    activation="silu",
    pad_slot_id: int = PAD_SLOT_ID,
    validate_data: bool = False,
    block_table=None,
    **kwargs,
) -> torch.Tensor:
    """Varlen prefill: ``x`` (dim, total tokens), the sequences one after another as ``query_start_loc`` says; the
    state of sequence i is ``conv_states[cache_indices[i]]`` (its first ``width - 1`` columns, oldest first), read
    when ``has_initial_state[i]`` and overwritten with the sequence's last ``width - 1`` inputs. Returns a tensor
    shaped and strided like ``x``; a padded sequence (cache index ``pad_slot_id``) gives zeros."""
    if block_table is not None:
        raise NotImplementedError("block_table (CUDA-graph launch) has no meaning on the CPU")
    width = weight.shape[1]
    keep = width - 1
    out = torch.zeros_like(x)
    qsl = [int(v) for v in query_start_loc.tolist()]
    for i in range(len(qsl) - 1):
        start, end = qsl[i], qsl[i + 1]
        if end <= start:
            continue
        coord = int(cache_indices[i]) if cache_indices is not None else i
        if coord == pad_slot_id:
            continue
        xs = x[:, start:end].float()
        init = torch.zeros(x.shape[0], keep, dtype=torch.float32)
        if conv_states is not None and has_initial_state is not None and bool(has_initial_state[i]):
            init = conv_states[coord, :, :keep].float()
        window = torch.cat([init, xs], dim=1)
        out[:, start:end] = _act(_conv_window(window, weight, bias, end - start), activation).to(x.dtype)
        if conv_states is not None:
            conv_states[coord, :, :keep] = window[:, -keep:].to(conv_states.dtype)
    return out


def causal_conv1d_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation=None,
    cache_seqlens: torch.Tensor | None = None,
    conv_state_indices: torch.Tensor | None = None,
    num_accept_tokens=None,
    intermediate_conv_window=None,
    intermediate_state_indices=None,
    retrieve_next_token=None,
    retrieve_next_sibling=None,
    retrieve_parent_token=None,
    pad_slot_id: int = PAD_SLOT_ID,
    metadata=None,
    validate_data: bool = False,
) -> torch.Tensor:
    """Decode: ``x`` (batch, dim) or (batch, dim, seqlen); each row continues the state
    ``conv_state[conv_state_indices[b]]`` (updated in place). Speculative decoding's arguments are refused."""
    if (
        cache_seqlens is not None
        or num_accept_tokens is not None
        or intermediate_conv_window is not None
        or retrieve_next_token is not None
    ):
        raise NotImplementedError("circular buffers and speculative decoding are not implemented in the reference")
    squeeze = x.dim() == 2
    x3 = x.unsqueeze(-1) if squeeze else x
    width = weight.shape[1]
    keep = width - 1
    out = torch.zeros_like(x3)
    for b in range(x3.shape[0]):
        coord = int(conv_state_indices[b]) if conv_state_indices is not None else b
        if coord == pad_slot_id:
            continue
        window = torch.cat([conv_state[coord, :, :keep].float(), x3[b].float()], dim=1)
        out[b] = _act(_conv_window(window, weight, bias, x3.shape[2]), activation).to(x.dtype)
        conv_state[coord, :, :keep] = window[:, -keep:].to(conv_state.dtype)
    return out.squeeze(-1) if squeeze else out


# --------------------------------------------------------------------------------------------
# Gated DeltaNet (Qwen3-Next's linear attention). SGLang's GDN state pool holds one V x K matrix per value head
# (``Mamba2StateShape.temporal``: (num_v_heads, head_v_dim, head_k_dim)); per token, with q and k L2-normalised and
# q scaled by K^-1/2 (``use_qk_l2norm_in_kernel``, the FLA kernels' recurrence):
#   S <- exp(g) S;   u <- beta (v - S k);   S <- S + u k^T;   o <- S q


def fused_gdn_gating(
    A_log: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """g = -exp(A_log) * softplus(a + dt_bias) (float32) and beta = sigmoid(b) (b's dtype), each shaped (1, T, HV)."""
    x = a.float() + dt_bias.float()
    sp = torch.where(softplus_beta * x <= softplus_threshold, F.softplus(x, beta=softplus_beta), x)
    g = -torch.exp(A_log.float()) * sp
    beta = torch.sigmoid(b.float()).to(b.dtype)
    return g.unsqueeze(0), beta.unsqueeze(0)


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def _gated_delta_sequence(q, k, v, g, beta, state: torch.Tensor, normalise: bool, scale: float, eps: float = 1e-6):
    """One sequence: q, k (T, H, K), v (T, HV, V), g, beta (T, HV), state (HV, V, K) float32, updated and returned
    with the outputs (T, HV, V). Query/key heads are shared by HV / H value heads (GQA)."""
    q, k, v, g, beta = q.float(), k.float(), v.float(), g.float(), beta.float()
    if normalise:
        q, k = _l2norm(q, eps), _l2norm(k, eps)
    q = q * scale
    rep = v.shape[1] // q.shape[1]
    if rep > 1:
        q, k = q.repeat_interleave(rep, dim=1), k.repeat_interleave(rep, dim=1)
    out = torch.empty(v.shape[0], v.shape[1], v.shape[2], dtype=torch.float32)
    for t in range(v.shape[0]):
        state = state * torch.exp(g[t])[:, None, None]
        u = beta[t][:, None] * (v[t] - torch.einsum("hvk,hk->hv", state, k[t]))
        state = state + u[:, :, None] * k[t][:, None, :]
        out[t] = torch.einsum("hvk,hk->hv", state, q[t])
    return out, state


def _segments(cu_seqlens: torch.Tensor | None, total: int) -> list[tuple[int, int]]:
    if cu_seqlens is None:
        return [(0, total)]
    c = [int(v) for v in cu_seqlens.tolist()]
    return list(zip(c[:-1], c[1:], strict=True))


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor,
    cu_seqlens: torch.Tensor | None = None,
    head_first: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    initial_state_indices: torch.Tensor | None = None,
    eps: float = 1e-6,
    scale: float | None = None,
    output_final_state: bool = True,
    **kwargs,
):
    """Prefill (the API of sgl_kernel's ``chunk_gated_delta_rule_cpu``): q, k (1, T, H, K), v (1, T, HV, V), g, beta
    (1, T, HV), the sequences as ``cu_seqlens`` says; the state of sequence i is
    ``initial_state[initial_state_indices[i]]``, read and written in place (an index below 0 is a padded slot:
    skipped). Returns (output (1, T, HV, V) in v's dtype, the final states (N, HV, V, K) float32, None)."""
    if head_first:
        raise NotImplementedError("head_first layouts are not used by SGLang's CPU path")
    if kwargs.get("inplace_update") is False:
        raise NotImplementedError("inplace_update=False (multi-item scoring)")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.zeros(v.shape, dtype=v.dtype)
    finals = []
    for i, (s, e) in enumerate(_segments(cu_seqlens, q.shape[1])):
        idx = int(initial_state_indices[i]) if initial_state_indices is not None else i
        if idx < 0 or e <= s:
            finals.append(torch.zeros(initial_state.shape[1:], dtype=torch.float32))
            continue
        o, st = _gated_delta_sequence(
            q[0, s:e], k[0, s:e], v[0, s:e], g[0, s:e], beta[0, s:e], initial_state[idx].float(), use_qk_l2norm_in_kernel, scale, eps
        )
        out[0, s:e] = o.to(v.dtype)
        initial_state[idx] = st.to(initial_state.dtype)
        finals.append(st)
    return out, torch.stack(finals) if finals else initial_state.new_zeros((0, *initial_state.shape[1:])).float(), None


def fused_sigmoid_gating_delta_rule_update(
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state_source: torch.Tensor,
    initial_state_indices: torch.Tensor,
    cu_seqlens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> torch.Tensor:
    """Decode (sgl_kernel's ``fused_sigmoid_gating_delta_rule_update_cpu``): the gates from a and b, then the rule;
    q, k (1, T, H, K), v (1, T, HV, V), a, b (T, HV); returns (1, T, HV, V)."""
    g, beta = fused_gdn_gating(A_log, a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1]), dt_bias, softplus_beta, softplus_threshold)
    out, _, _ = chunk_gated_delta_rule(
        q, k, v, g, beta, initial_state_source, cu_seqlens, False, use_qk_l2norm_in_kernel, initial_state_indices
    )
    return out


# --------------------------------------------------------------------------------------------
# the gated RMSNorm after Qwen3-Next's linear attention (sglang/kernels/ops/attention/fla/fused_norm_gate.py): on a CPU
# without AMX SGLang calls the Triton ``rms_norm_gated``; with AMX it would call sgl_kernel's fused_rmsnorm_gated_cpu


def rms_norm_gated(
    x: torch.Tensor,
    g: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    activation: str = "swish",
    residual: torch.Tensor | None = None,
    prenorm: bool = False,
    residual_in_fp32: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight (+ bias), gated by silu(g) (swish, silu) or sigmoid(g), over the last
    dimension, in x's dtype. A residual (a pre-norm) is not used by SGLang's GDN layers: refused."""
    if residual is not None or prenorm:
        raise NotImplementedError("a residual / pre-norm gated RMSNorm is not implemented in the reference")
    xf, gf = x.float(), g.float().reshape(x.shape)
    y = xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    if activation in ("swish", "silu"):
        y = y * F.silu(gf)
    elif activation == "sigmoid":
        y = y * torch.sigmoid(gf)
    else:
        raise NotImplementedError(f"activation {activation!r}")
    return y.to(x.dtype)


# --------------------------------------------------------------------------------------------
# the shared expert's gate of Qwen3-Next's MoE (sglang/kernels/ops/elementwise/elementwise.py, Triton): on a CPU without
# AMX ``Qwen2MoeSparseMoeBlock`` fuses it (with AMX it takes the plain path)


def fused_gate_sigmoid_mul(hidden_states: torch.Tensor, gate_weight: torch.Tensor, shared_output: torch.Tensor) -> torch.Tensor:
    """sigmoid(hidden_states . gate_weight) * shared_output, row by row (one gate per token)."""
    gate = torch.sigmoid(hidden_states.float() @ gate_weight.float())[:, None]
    return (gate * shared_output.float()).to(shared_output.dtype)


def fused_gate_sigmoid_mul_add(
    hidden_states: torch.Tensor, gate_weight: torch.Tensor, shared_output: torch.Tensor, final_hidden_states: torch.Tensor
) -> None:
    """final_hidden_states += sigmoid(hidden_states . gate_weight) * shared_output, in place."""
    gate = torch.sigmoid(hidden_states.float() @ gate_weight.float())[:, None]
    final_hidden_states.copy_((gate * shared_output.float() + final_hidden_states.float()).to(final_hidden_states.dtype))


# --------------------------------------------------------------------------------------------
# Mamba2 (Nemotron-H's mixer, sglang/srt/layers/attention/mamba/mamba.py), whose two SSM kernels are Triton only
# (sglang/kernels/ops/mamba/triton_ops): the chunked scan of a prefill (``mamba_chunk_scan_combined``) and the one-token
# update of a decode (``selective_state_update``). Per head h (of group g), with dt' = softplus(dt + dt_bias) clamped to
# dt_limit, a = exp(dt' A_h), the state S_h (headdim x dstate) and the output of a token are
#   S_h <- a S_h + dt' x_h B_g^T;   y_h = S_h C_g + D_h x_h   (times silu(z_h) when z is given)
# The prefill reference computes it as the chunked (SSD) form the Triton kernels do, not token by token: within a chunk
# the quadratic form y_i = sum_{j<=i} exp(cs_i - cs_j) (C_i . B_j) dt'_j x_j plus exp(cs_i) C_i S, and the state passed
# from chunk to chunk; the check (sglang_kernel_checks.py) is the recurrence above, token by token in float64.


def _dt(dt: torch.Tensor, dt_bias: torch.Tensor | None, softplus: bool, limit=(0.0, float("inf"))) -> torch.Tensor:
    d = dt.float() + (dt_bias.float() if dt_bias is not None else 0.0)
    if softplus:
        d = torch.where(d <= 20.0, F.softplus(d), d)
    if tuple(limit) != (0.0, float("inf")):
        d = d.clamp(min=limit[0], max=limit[1])
    return d


def _ssd_sequence(x, dt, A, B, C, S, chunk_size: int):
    """One sequence, chunk by chunk: x (L, H, P), dt (L, H) (processed), A (H,), B, C (L, H, N) (per head), S (H, P, N)
    float32. Returns y (L, H, P) without the D and z terms, and the final state."""
    y = torch.empty(x.shape, dtype=torch.float32)
    for s in range(0, x.shape[0], chunk_size):
        xs, ds, bs, cs_ = x[s : s + chunk_size], dt[s : s + chunk_size], B[s : s + chunk_size], C[s : s + chunk_size]
        cum = torch.cumsum(ds * A[None, :], dim=0)  # (l, H)
        diff = cum[:, None, :] - cum[None, :, :]  # (i, j, H): cs_i - cs_j
        causal = torch.ones(diff.shape[:2], dtype=torch.bool).tril()
        decay = torch.exp(torch.where(causal[:, :, None], diff, torch.tensor(float("-inf"))))
        scores = torch.einsum("ihn,jhn->ijh", cs_, bs) * decay * ds[None, :, :]
        y[s : s + chunk_size] = torch.einsum("ijh,jhp->ihp", scores, xs) + torch.einsum("ihn,hpn->ihp", cs_ * torch.exp(cum)[:, :, None], S)
        to_end = torch.exp(cum[-1][None, :] - cum) * ds  # (l, H)
        S = torch.exp(cum[-1])[:, None, None] * S + torch.einsum("jh,jhp,jhn->hpn", to_end, xs, bs)
    return y, S


def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    chunk_indices=None,
    chunk_offsets=None,
    cu_seqlens: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit=(0.0, float("inf")),
    out: torch.Tensor | None = None,
    return_final_states: bool = False,
    return_varlen_states: bool = False,
    return_intermediate_states: bool = False,
    state_dtype=None,
    return_track_states: bool = False,
    track_seq_idx=None,
    track_end_locs: torch.Tensor | None = None,
):
    """Prefill (triton_ops/ssd_combined.py): x (batch, seqlen, H, P), dt (batch, seqlen, H), A (H,), B, C (batch,
    seqlen, G, N); with ``return_varlen_states`` the batch is 1 and holds the sequences ``cu_seqlens`` says, each
    starting from ``initial_states[i]`` (or zeros); otherwise each batch row is one sequence. The output is written
    into ``out`` (x's shape); returns what the Triton function returns for the same flags. The per-chunk states it
    also returns are only read by the radix cache's state tracking (``mamba_track_mask``: the ``extra_buffer``
    strategy, which SGLang refuses on the CPU), so they are None here, and tracking asked for is refused."""
    if track_end_locs is not None and track_end_locs.numel() > 0:
        raise NotImplementedError("state tracking (extra_buffer radix cache) is not implemented in the reference")
    batch, seqlen, H, P = x.shape
    G = B.shape[2]
    rep = H // G
    Bh, Ch = B.float().repeat_interleave(rep, dim=2), C.float().repeat_interleave(rep, dim=2)
    d = _dt(dt, dt_bias, dt_softplus, dt_limit)
    Af = A.float()
    if return_varlen_states:
        assert cu_seqlens is not None and batch == 1, "varlen states need cu_seqlens and a batch of 1"
        rows = [(0, s, e) for s, e in _segments(cu_seqlens, seqlen)]
    else:
        rows = [(b, 0, seqlen) for b in range(batch)]
    y = torch.zeros(x.shape, dtype=torch.float32)
    finals = []
    for i, (b, s, e) in enumerate(rows):
        S = torch.zeros(H, P, Bh.shape[-1], dtype=torch.float32)
        if initial_states is not None:
            S = initial_states[i].float().clone()
        if e > s:
            y[b, s:e], S = _ssd_sequence(x[b, s:e].float(), d[b, s:e], Af, Bh[b, s:e], Ch[b, s:e], S, chunk_size)
        finals.append(S)
    if D is not None:
        Df = D.float()
        y += x.float() * (Df[None, None, :, :] if Df.dim() == 2 else Df[None, None, :, None])
    if z is not None:
        y *= F.silu(z.float())
    if out is not None:
        out.copy_(y.to(out.dtype))
    states = torch.stack(finals).to(state_dtype or torch.float32)
    varlen = states if return_varlen_states else None
    final = states if not return_varlen_states else None
    if return_track_states:
        assert return_varlen_states, "return_track_states requires return_varlen_states (cu_seqlens mode)"
        return None, varlen, None
    if return_intermediate_states:
        if return_varlen_states:
            return (None, final, varlen) if return_final_states else (None, varlen)
        return (None, final) if return_final_states else None
    if not return_varlen_states:
        return final if return_final_states else None
    return (final, varlen) if return_final_states else varlen


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: torch.Tensor | None = None,
    pad_slot_id: int = PAD_SLOT_ID,
    out: torch.Tensor | None = None,
    disable_state_update: bool = False,
    intermediate_states_buffer=None,
    cache_steps=None,
    retrieve_parent_token=None,
    intermediate_state_indices=None,
    **kwargs,
) -> None:
    """Decode (triton_ops/ssu_dispatch.py): one token per row. state (slots, H, P, N) updated in place at
    ``state_batch_indices[b]``; x (batch, H, P), dt (batch, H, P), A (H, P, N), B, C (batch, G, N), D and dt_bias (H,
    P), z like x; the output written into ``out`` (x's shape). A row whose slot is ``pad_slot_id`` is skipped (state and
    output untouched, as the Triton kernel returns early). Speculative verification (several tokens, intermediate
    states) is refused."""
    if disable_state_update or intermediate_states_buffer is not None or x.dim() == 4:
        raise NotImplementedError("speculative decoding's multi-token update is not implemented in the reference")
    if state.dim() == 3:  # the single-head layouts: a head axis of 1
        state, x, dt, A, B, C = state[:, None], x[:, None], dt[:, None], A[None], B[:, None], C[:, None]
        D = D[None] if D is not None else None
        z = z[:, None] if z is not None else None
        dt_bias = dt_bias[None] if dt_bias is not None else None
        out = out[:, None] if out is not None else None
    H = x.shape[1]
    rep = H // B.shape[1]
    for b in range(x.shape[0]):
        slot = int(state_batch_indices[b]) if state_batch_indices is not None else b
        if slot == pad_slot_id:
            continue
        d = _dt(dt[b], dt_bias, dt_softplus)  # (H, P)
        Bb, Cb = B[b].float().repeat_interleave(rep, dim=0), C[b].float().repeat_interleave(rep, dim=0)  # (H, N)
        S = state[slot].float() * torch.exp(d[:, :, None] * A.float()) + (d * x[b].float())[:, :, None] * Bb[:, None, :]
        y = torch.einsum("hpn,hn->hp", S, Cb)
        if D is not None:
            y = y + x[b].float() * (D.float() if D.dim() == 2 else D.float()[:, None])
        if z is not None:
            y = y * F.silu(z[b].float())
        state[slot] = S.to(state.dtype)
        if out is not None:
            out[b] = y.to(out.dtype)
