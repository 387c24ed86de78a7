"""The reference kernels of tests/engine/sglang_cpu against naive formulas, run by the SGLang engine's interpreter
(it has torch; the project's own venv does not):

    $SGLANG_PY tests/engine/sglang_kernel_checks.py [NAME...]     # prints "ok NAME" per check, exits 1 on a failure

``test_sglang_kernels.py`` runs each check. The naive formulas are written independently of the references:
``torch.nn.functional.conv1d`` over the state followed by the sequence for the causal convolutions; the gated delta
rule as its explicit matrix recurrence S <- exp(g) S (I - beta k k^T) + beta v k^T, o = S q, token by token in
float64 (the references use the FLA kernels' update form in float32); the gates from their definition with math; the
Mamba2 SSM as its recurrence S <- exp(dt A) S + dt x B^T, y = S C + D x, token by token and head by head in float64
(the prefill reference uses the chunked form).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIPPED = HERE / "sglang_cpu"
# what the repository ships, not the copy in the environment (its sitecustomize imported that one at start)
sys.path.insert(0, str(SHIPPED))
for _name in [n for n in sys.modules if n.split(".")[0] in ("hce_sglang_cpu", "sgl_kernel")]:
    del sys.modules[_name]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from hce_sglang_cpu import kernels as K  # noqa: E402

torch.manual_seed(0)
TOL = 2e-5


def close(a: torch.Tensor, b: torch.Tensor, what: str, tol: float = TOL) -> None:
    err = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    assert err <= tol, f"{what}: max abs error {err:.3g} > {tol}"


# --------------------------------------------------------------------------------------------
# causal conv1d


def naive_conv(full: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, silu: bool) -> torch.Tensor:
    """conv1d without padding over (dim, width - 1 + n): n outputs."""
    y = F.conv1d(full[None].double(), weight[:, None, :].double(), None if bias is None else bias.double(), groups=full.shape[0])[0]
    return F.silu(y) if silu else y


def check_causal_conv1d_fn() -> None:
    dim, width, slots = 24, 4, 6
    lens, idx, init = [5, 1, 7, 3], [4, 1, -1, 2], [True, False, False, True]  # slot -1: a padded sequence
    w, bias = torch.randn(dim, width), torch.randn(dim)
    states = torch.randn(slots, dim, width - 1)
    before = states.clone()
    # SGLang's GDN prefill passes a transposed (non-contiguous) view: (tokens, dim) -> (dim, tokens)
    x = torch.randn(sum(lens), dim).transpose(0, 1)
    qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    for silu in (False, True):
        st = before.clone()
        out = K.causal_conv1d_fn(
            x,
            w,
            bias,
            conv_states=st,
            query_start_loc=qsl,
            cache_indices=torch.tensor(idx, dtype=torch.int32),
            has_initial_state=torch.tensor(init),
            activation="silu" if silu else None,
        )
        assert out.shape == x.shape and out.stride() == x.stride(), "out is shaped and strided like x"
        for i in range(len(lens)):
            s, e = int(qsl[i]), int(qsl[i + 1])
            if idx[i] < 0:
                assert torch.all(out[:, s:e] == 0), "a padded sequence gives zeros"
                continue
            prior = before[idx[i]] if init[i] else torch.zeros(dim, width - 1)
            full = torch.cat([prior, x[:, s:e]], dim=1)
            close(out[:, s:e], naive_conv(full, w, bias, silu), f"sequence {i} output")
            close(st[idx[i]], full[:, -(width - 1) :], f"sequence {i} state")
        untouched = [j for j in range(slots) if j not in idx]
        assert torch.equal(st[untouched], before[untouched]), "slots of no sequence are untouched"


def check_causal_conv1d_update() -> None:
    dim, width, slots = 16, 3, 5
    w = torch.randn(dim, width)
    for seqlen in (None, 2):
        st = torch.randn(slots, dim, width - 1)
        before = st.clone()
        idx = [3, -1, 0]
        x = torch.randn(len(idx), dim) if seqlen is None else torch.randn(len(idx), dim, seqlen)
        out = K.causal_conv1d_update(x, st, w, None, activation="silu", conv_state_indices=torch.tensor(idx, dtype=torch.int32))
        assert out.shape == x.shape
        for b, slot in enumerate(idx):
            if slot < 0:
                assert torch.all(out[b] == 0) and torch.equal(st, st), "a padded row gives zeros"
                continue
            xb = x[b] if seqlen is not None else x[b][:, None]
            full = torch.cat([before[slot], xb], dim=1)
            ref = naive_conv(full, w, None, True)
            close(out[b] if seqlen is not None else out[b][:, None], ref, f"row {b}")
            close(st[slot], full[:, -(width - 1) :], f"row {b} state")
        assert torch.equal(st[[1, 2, 4]], before[[1, 2, 4]])


def check_conv_prefill_then_decode() -> None:
    """A prefill of n tokens equals a prefill of n - 1 followed by one decode step (the state carries the window)."""
    dim, width, n = 8, 4, 6
    w, bias = torch.randn(dim, width), torch.randn(dim)
    x = torch.randn(dim, n)
    one = torch.zeros(1, dim, width - 1)
    whole = K.causal_conv1d_fn(
        x, w, bias, one, torch.tensor([0, n]), cache_indices=torch.tensor([0]), has_initial_state=torch.tensor([False])
    )
    two = torch.zeros(1, dim, width - 1)
    head = K.causal_conv1d_fn(
        x[:, : n - 1], w, bias, two, torch.tensor([0, n - 1]), cache_indices=torch.tensor([0]), has_initial_state=torch.tensor([False])
    )
    last = K.causal_conv1d_update(x[:, n - 1][None], two, w, bias, activation="silu", conv_state_indices=torch.tensor([0]))
    close(torch.cat([head, last[0][:, None]], dim=1), whole, "prefill = prefill + decode")
    close(two, one, "the same state")


# --------------------------------------------------------------------------------------------
# Gated DeltaNet


def naive_gates(A_log, a, b, dt_bias):
    g = torch.empty(a.shape, dtype=torch.float64)
    beta = torch.empty(b.shape, dtype=torch.float64)
    for t in range(a.shape[0]):
        for h in range(a.shape[1]):
            x = float(a[t, h]) + float(dt_bias[h])
            softplus = x if x > 20.0 else math.log1p(math.exp(x))
            g[t, h] = -math.exp(float(A_log[h])) * softplus
            beta[t, h] = 1.0 / (1.0 + math.exp(-float(b[t, h])))
    return g, beta


def naive_delta_rule(q, k, v, g, beta, state):
    """One sequence in float64: q, k (T, H, K), v (T, HV, V), g, beta (T, HV), state (HV, V, K)."""
    T, H, Kd = q.shape
    HV, Vd = v.shape[1], v.shape[2]
    S = state.double().clone()
    out = torch.zeros(T, HV, Vd, dtype=torch.float64)
    eye = torch.eye(Kd, dtype=torch.float64)
    for t in range(T):
        for h in range(HV):
            j = h // (HV // H)  # the query/key head this value head shares
            kk = k[t, j].double() / math.sqrt(float((k[t, j].double() ** 2).sum()) + 1e-6)
            qq = q[t, j].double() / math.sqrt(float((q[t, j].double() ** 2).sum()) + 1e-6) / math.sqrt(Kd)
            S[h] = math.exp(float(g[t, h])) * S[h] @ (eye - float(beta[t, h]) * torch.outer(kk, kk)) + float(beta[t, h]) * torch.outer(
                v[t, h].double(), kk
            )
            out[t, h] = S[h] @ qq
    return out, S


def _gdn_inputs(T: int, H: int = 2, HV: int = 4, Kd: int = 8, Vd: int = 6):
    q, k, v = torch.randn(1, T, H, Kd), torch.randn(1, T, H, Kd), torch.randn(1, T, HV, Vd)
    a, b = torch.randn(T, HV), torch.randn(T, HV)
    A_log, dt_bias = torch.randn(HV) * 0.5, torch.randn(HV) * 0.5
    return q, k, v, a, b, A_log, dt_bias


def check_fused_gdn_gating() -> None:
    _, _, _, a, b, A_log, dt_bias = _gdn_inputs(7)
    a[0, 0] = 30.0  # past softplus's threshold
    g, beta = torch.ops.sgl_kernel.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
    ng, nb = naive_gates(A_log, a, b, dt_bias)
    assert g.dtype == torch.float32 and g.shape == (1, 7, 4) and beta.shape == (1, 7, 4)
    close(g[0], ng, "g", 1e-5)
    close(beta[0], nb, "beta", 1e-6)


def check_chunk_gated_delta_rule() -> None:
    import sgl_kernel.mamba as m

    lens, idx = [5, 3, 4], [2, -1, 0]
    T = sum(lens)
    q, k, v, a, b, A_log, dt_bias = _gdn_inputs(T)
    g, beta = K.fused_gdn_gating(A_log, a, b, dt_bias)
    pool = torch.randn(4, 4, 6, 8) * 0.1
    before = pool.clone()
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    out, final, h = m.chunk_gated_delta_rule_cpu(
        q=q,
        k=k,
        v=v,
        g=g,
        beta=beta,
        initial_state=pool,
        cu_seqlens=cu,
        head_first=False,
        use_qk_l2norm_in_kernel=True,
        initial_state_indices=torch.tensor(idx, dtype=torch.int32),
    )
    assert out.shape == v.shape and h is None and final.shape == (3, 4, 6, 8)
    for i in range(len(lens)):
        s, e = int(cu[i]), int(cu[i + 1])
        if idx[i] < 0:
            assert torch.all(out[0, s:e] == 0)
            continue
        ref, S = naive_delta_rule(q[0, s:e], k[0, s:e], v[0, s:e], g[0, s:e], beta[0, s:e], before[idx[i]])
        close(out[0, s:e], ref, f"sequence {i} output", 1e-4)
        close(pool[idx[i]], S, f"sequence {i} state in place", 1e-4)
        close(final[i], S, f"sequence {i} final state", 1e-4)
    assert torch.equal(pool[[1, 3]], before[[1, 3]]), "slots of no sequence are untouched"


def check_fused_sigmoid_gating_delta_rule_update() -> None:
    """Decode: one token for each of B requests (SGLang's layout: q, k, v (1, B, heads, dim); a, b (B, HV))."""
    B = 3
    q, k, v, a, b, A_log, dt_bias = _gdn_inputs(B)
    pool = torch.randn(5, 4, 6, 8) * 0.1
    before = pool.clone()
    idx = torch.tensor([4, 0, 2], dtype=torch.int32)
    out = torch.ops.sgl_kernel.fused_sigmoid_gating_delta_rule_update_cpu(
        A_log=A_log,
        dt_bias=dt_bias,
        q=q,
        k=k,
        v=v,
        a=a,
        b=b,
        initial_state_source=pool,
        initial_state_indices=idx,
        cu_seqlens=torch.arange(B + 1, dtype=torch.int32),
        use_qk_l2norm_in_kernel=True,
        softplus_beta=1.0,
        softplus_threshold=20.0,
    )
    g, beta = naive_gates(A_log, a, b, dt_bias)
    assert out.shape == (1, B, 4, 6)
    for i in range(B):
        ref, S = naive_delta_rule(q[0, i : i + 1], k[0, i : i + 1], v[0, i : i + 1], g[i : i + 1], beta[i : i + 1], before[int(idx[i])])
        close(out[0, i : i + 1], ref, f"request {i}", 1e-4)
        close(pool[int(idx[i])], S, f"request {i} state", 1e-4)
    assert torch.equal(pool[[1, 3]], before[[1, 3]])


def check_delta_rule_prefill_then_decode() -> None:
    """A prefill of n tokens leaves the state and last output a prefill of n - 1 and one decode step give."""
    n = 6
    q, k, v, a, b, A_log, dt_bias = _gdn_inputs(n)
    g, beta = K.fused_gdn_gating(A_log, a, b, dt_bias)
    one, two = torch.zeros(1, 4, 6, 8), torch.zeros(1, 4, 6, 8)
    whole, _, _ = K.chunk_gated_delta_rule(
        q, k, v, g, beta, one, torch.tensor([0, n]), use_qk_l2norm_in_kernel=True, initial_state_indices=torch.tensor([0])
    )
    K.chunk_gated_delta_rule(
        q[:, :-1],
        k[:, :-1],
        v[:, :-1],
        g[:, :-1],
        beta[:, :-1],
        two,
        torch.tensor([0, n - 1]),
        use_qk_l2norm_in_kernel=True,
        initial_state_indices=torch.tensor([0]),
    )
    last = K.fused_sigmoid_gating_delta_rule_update(
        A_log, dt_bias, q[:, -1:], k[:, -1:], v[:, -1:], a[-1:], b[-1:], two, torch.tensor([0]), torch.tensor([0, 1]), True
    )
    close(last[0, 0], whole[0, -1], "the last token's output", 1e-5)
    close(two, one, "the same state", 1e-5)


def check_rms_norm_gated() -> None:
    """The gated RMSNorm against its formula, element by element in float64: x / sqrt(mean(x^2) + eps) * w * act(g)."""
    x, g, w = torch.randn(5, 8), torch.randn(5, 8), torch.randn(8)
    for act in ("silu", "sigmoid"):
        y = K.rms_norm_gated(x, g, w, None, act, eps=1e-6)
        ref = torch.empty(5, 8, dtype=torch.float64)
        for i in range(5):
            ms = sum(float(v) ** 2 for v in x[i]) / 8
            for j in range(8):
                gate = float(g[i, j]) / (1 + math.exp(-float(g[i, j]))) if act == "silu" else 1 / (1 + math.exp(-float(g[i, j])))
                ref[i, j] = float(x[i, j]) / math.sqrt(ms + 1e-6) * float(w[j]) * gate
        close(y, ref, f"activation {act}", 1e-5)


def check_fused_gate_sigmoid_mul_add() -> None:
    """The shared expert's gate: out[t] += sigmoid(sum_i h[t, i] w[i]) s[t], element by element in float64."""
    h, w, s, f = torch.randn(4, 6), torch.randn(6), torch.randn(4, 6), torch.randn(4, 6)
    out = f.clone()
    K.fused_gate_sigmoid_mul_add(h, w, s, out)
    ref = torch.empty(4, 6, dtype=torch.float64)
    for t in range(4):
        gate = 1 / (1 + math.exp(-sum(float(h[t, i]) * float(w[i]) for i in range(6))))
        for j in range(6):
            ref[t, j] = gate * float(s[t, j]) + float(f[t, j])
    close(out, ref, "in place", 1e-5)
    close(K.fused_gate_sigmoid_mul(h, w, s), ref - f.double(), "without the add", 1e-5)


# --------------------------------------------------------------------------------------------
# Mamba2 (Nemotron-H): the SSM recurrence token by token, in float64, with explicit loops over heads


def naive_softplus(v: float) -> float:
    return v if v > 20.0 else math.log1p(math.exp(v))


def naive_ssm(x, dt, A, B, C, D, dt_bias, S0, z=None):
    """One sequence: x (T, H, P), dt (T, H) raw (softplus(dt + dt_bias) applied here), A (H,), B, C (T, G, N), D (H,) or
    (H, P), S0 (H, P, N). Per token and head: S <- exp(d A) S + d x B^T; y = S C + D x (times silu(z))."""
    T, H, P = x.shape
    G = B.shape[1]
    S = S0.double().clone()
    y = torch.zeros(T, H, P, dtype=torch.float64)
    for t in range(T):
        for h in range(H):
            g = h // (H // G)
            d = naive_softplus(float(dt[t, h]) + float(dt_bias[h]))
            S[h] = math.exp(d * float(A[h])) * S[h] + d * torch.outer(x[t, h].double(), B[t, g].double())
            dh = D[h].double() if D.dim() == 2 else float(D[h])
            y[t, h] = S[h] @ C[t, g].double() + dh * x[t, h].double()
            if z is not None:
                y[t, h] = y[t, h] * z[t, h].double() * torch.sigmoid(z[t, h].double())
    return y, S


def _mamba2_inputs(T: int, H: int = 4, P: int = 6, N: int = 5, G: int = 2):
    x = torch.randn(1, T, H, P)
    dt = torch.randn(1, T, H) - 1.0
    A = -torch.rand(H) * 2 - 0.1  # SGLang loads A as -exp(A_log): negative
    B, C = torch.randn(1, T, G, N), torch.randn(1, T, G, N)
    return x, dt, A, B, C, torch.randn(H), torch.randn(H) * 0.5


def check_mamba_chunk_scan_combined() -> None:
    """The prefill as the Mamba2 mixer calls it (varlen, some sequences from a saved state, the output in place), with
    sequences longer than the chunk so that the chunked form's state passing is exercised."""
    lens = [9, 3, 6]
    T, H, P, N = sum(lens), 4, 6, 5
    x, dt, A, B, C, D, dt_bias = _mamba2_inputs(T)
    dt[0, 2, 1] = 25.0  # past softplus's threshold
    init = torch.randn(3, H, P, N) * 0.3
    init[1] = 0  # mamba.py passes zeros for a sequence without a state (torch.where over has_initial_states)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    for chunk in (4, 8, 64):
        out = torch.full((1, T, H, P), float("nan"))
        got = K.mamba_chunk_scan_combined(
            x, dt, A, B, C, chunk_size=chunk, D=D, z=None, dt_bias=dt_bias, cu_seqlens=cu, initial_states=init,
            return_varlen_states=True, return_final_states=False, return_track_states=True, track_seq_idx=None,
            track_end_locs=None, dt_softplus=True, dt_limit=(0.0, float("inf")), out=out, state_dtype=torch.float32,
        )  # fmt: skip
        assert isinstance(got, tuple) and len(got) == 3, "mamba.py unpacks (chunk states, varlen states, track states)"
        varlen = got[1]
        assert varlen.shape == (3, H, P, N)
        for i in range(3):
            s, e = int(cu[i]), int(cu[i + 1])
            ref, S = naive_ssm(x[0, s:e], dt[0, s:e], A, B[0, s:e], C[0, s:e], D, dt_bias, init[i])
            close(out[0, s:e], ref, f"chunk {chunk}: sequence {i} output", 1e-4)
            close(varlen[i], S, f"chunk {chunk}: sequence {i} final state", 1e-4)


def check_mamba_chunk_scan_combined_batched_with_z() -> None:
    """The other layout: each batch row a sequence, no varlen states; D per channel, a gate z, the final states."""
    H, P, N = 4, 3, 4
    xs = [_mamba2_inputs(7, H, P, N, 1) for _ in range(2)]
    x, dt = torch.cat([a[0] for a in xs]), torch.cat([a[1] for a in xs])
    B, C = torch.cat([a[3] for a in xs]), torch.cat([a[4] for a in xs])
    A, dt_bias, D = xs[0][2], xs[0][6], torch.randn(H, P)
    z, out = torch.randn(2, 7, H, P), torch.empty(2, 7, H, P)
    final = K.mamba_chunk_scan_combined(x, dt, A, B, C, 4, D=D, z=z, dt_bias=dt_bias, dt_softplus=True, out=out, return_final_states=True)
    for b in range(2):
        ref, S = naive_ssm(x[b], dt[b], A, B[b], C[b], D, dt_bias, torch.zeros(H, P, N), z=z[b])
        close(out[b], ref, f"row {b} output", 1e-4)
        close(final[b], S, f"row {b} final state", 1e-4)


def _decode_args(x, dt, A, B, C, D, dt_bias, P: int, N: int):
    """The decode's arguments as the Mamba2 mixer builds them (mamba.py: A, dt, dt_bias and D expanded over head_dim)."""
    return dict(
        x=x,
        dt=dt[:, :, None].expand(-1, -1, P),
        A=A[:, None, None].expand(-1, P, N).float(),
        B=B,
        C=C,
        D=D[:, None].expand(-1, P),
        dt_bias=dt_bias[:, None].expand(-1, P),
        z=None,
        dt_softplus=True,
    )


def check_selective_state_update() -> None:
    """Decode: one token per request, states by slot index updated in place, a padded slot skipped."""
    Bn, H, P, N = 3, 4, 6, 5
    x3, dt3, A, B3, C3, D, dt_bias = _mamba2_inputs(Bn)
    x, dt, B, C = x3[0], dt3[0], B3[0], C3[0]
    pool = torch.randn(5, H, P, N) * 0.3
    before = pool.clone()
    idx = [4, -1, 1]
    out = torch.full((Bn, H, P), 7.0)
    K.selective_state_update(
        pool, **_decode_args(x, dt, A, B, C, D, dt_bias, P, N), state_batch_indices=torch.tensor(idx, dtype=torch.int32), out=out
    )
    for b, slot in enumerate(idx):
        if slot < 0:
            assert torch.all(out[b] == 7.0), "a padded row's output is left alone"
            continue
        ref, S = naive_ssm(x[b : b + 1], dt[b : b + 1], A, B[b : b + 1], C[b : b + 1], D, dt_bias, before[slot])
        close(out[b], ref[0], f"row {b} output", 1e-4)
        close(pool[slot], S, f"row {b} state in place", 1e-4)
    assert torch.equal(pool[[0, 2, 3]], before[[0, 2, 3]]), "slots of no request are untouched"


def check_mamba2_prefill_then_decode() -> None:
    """A prefill of n tokens equals a prefill of n - 1 and one decode step: the same last output and state."""
    n, H, P, N = 7, 4, 6, 5
    x, dt, A, B, C, D, dt_bias = _mamba2_inputs(n)
    common = dict(D=D, dt_bias=dt_bias, dt_softplus=True, return_varlen_states=True)
    whole = torch.empty(1, n, H, P)
    S_whole = K.mamba_chunk_scan_combined(x, dt, A, B, C, 4, cu_seqlens=torch.tensor([0, n]), out=whole, **common)
    head = torch.empty(1, n - 1, H, P)
    S_head = K.mamba_chunk_scan_combined(
        x[:, :-1], dt[:, :-1], A, B[:, :-1], C[:, :-1], 4, cu_seqlens=torch.tensor([0, n - 1]), out=head, **common
    )
    last = torch.empty(1, H, P)
    K.selective_state_update(
        S_head,
        **_decode_args(x[:, -1], dt[:, -1], A, B[:, -1], C[:, -1], D, dt_bias, P, N),
        state_batch_indices=torch.tensor([0]),
        out=last,
    )
    close(head, whole[:, :-1], "the first n - 1 outputs", 1e-5)
    close(last[0], whole[0, -1], "the last token's output", 1e-5)
    close(S_head, S_whole, "the same state", 1e-5)


def check_mamba2_mixer_takes_the_references() -> None:
    """The import hooks bind the Mamba2 mixer's kernels (the Triton SSM kernels, and the convolution it leaves unbound
    on a CPU) to the shipped references."""
    from hce_sglang_cpu import hooks

    # the environment's sitecustomize installed its copy's finder at start: the shipped one takes its place
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != hooks.__name__]
    assert "sglang.srt.layers.attention.mamba.mamba" not in sys.modules
    hooks.install()
    from sglang.srt.layers.attention.mamba import mamba

    for name in ("causal_conv1d_fn", "causal_conv1d_update", "mamba_chunk_scan_combined", "selective_state_update"):
        assert getattr(mamba, name) is getattr(K, name), name
    assert mamba.causal_conv1d_fn_triton is K.causal_conv1d_fn and mamba.causal_conv1d_update_triton is K.causal_conv1d_update


# --------------------------------------------------------------------------------------------
# the AMX probe: on a CPU with AMX tiles SGLang would take its Intel AMX backend if the kernel package answered
# ``convert_weight_packed`` (sglang/srt/utils/common.py::cpu_has_amx_support), and die in init_cpu_threads_env; the
# stand-in must make the probe fail so that every CPU takes the plain-torch path this suite runs


def check_amx_probe_fails_even_on_an_amx_cpu() -> None:
    """Run in a fresh interpreter (``main`` runs it first): SGLang reads the CPU's AMX support once, at import."""
    assert "sglang.srt.utils.common" not in sys.modules, "run this check before SGLang is imported"
    torch.cpu._is_amx_tile_supported = lambda: True  # an AMX machine, as far as SGLang can tell
    import sgl_kernel  # noqa: F401
    from sglang.srt.utils import common

    assert common.is_amx_tile_supported is True, "the monkeypatch did not reach SGLang's probe"
    assert not hasattr(torch.ops.sgl_kernel, "convert_weight_packed")
    assert common._is_intel_amx_backend_available() is False
    assert common.cpu_has_amx_support() is False


CHECKS = {n[len("check_") :]: f for n, f in sorted(globals().items()) if n.startswith("check_") and callable(f)}


def main(names: list[str]) -> int:
    import sgl_kernel  # noqa: F401  the stand-in registers the torch.ops.sgl_kernel operators

    for mod in (sgl_kernel, K):
        assert Path(mod.__file__).resolve().is_relative_to(SHIPPED), f"{mod.__name__} is not the shipped file: {mod.__file__}"
    failed = 0
    for name in names or list(CHECKS):
        try:
            CHECKS[name]()
            print(f"ok {name}")
        except AssertionError as exc:
            failed += 1
            print(f"FAILED {name}: {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
