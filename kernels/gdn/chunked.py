"""Chunked (WY / UT) form of the general recurrence in PyTorch: forward and an explicit backward.

Within a chunk of C steps with chunk-local cumulative log-decay gamma_t = sum_{r<=t} g_r (per channel), the
state update S_t = D_t S_{t-1} + k_t delta_t^T with delta_t = w_t*v_t - S_{t-1}^T (exp(g_t) * b_t * k_t) unrolls to

    (I + A) delta = U - X S_0,      A_ts = sum_c e_tc k_sc exp(gamma_tc - gamma_sc)  (s < t),   e = b*k,
                                    X_t = e_t * exp(gamma_t),   U_t = w_t * v_t,

so with the unit-lower-triangular inverse T = (I + A)^{-1} (the UT transform) and the WY factors W = T X,
U~ = T U, the chunk is three matrix products:

    delta = U~ - W S_0
    o     = (q * Gamma) S_0 + P delta,          P_ts = sum_c q_tc k_sc exp(gamma_tc - gamma_sc)  (s <= t)
    S_C   = Diag(Gamma_C) S_0 + Kend^T delta,   Kend_s = k_s * exp(gamma_C - gamma_s)

The backward is written out by hand (no autograd through the chunk loop): a reverse-time scan carries
dS across chunks in the accumulation dtype (float32 for low-precision inputs, float64 for float64 inputs), then
every chunk's WY / triangular-inverse VJP (dA = -T^T dT T^T) and the pairwise decay products are
differentiated in parallel. With no erase (b is None: LA, GLA, SSD) A = 0, T = I and the solve is skipped.

Non-finite queries: the product P delta distributes q_t over the state's terms, so an infinite q_tc would give
inf * 0 and inf - inf = NaN where the recurrence o_t = S_t^T q_t gives +-inf. Steps whose query is not finite are
therefore recomputed with the intra-chunk state formed first (:func:`_rows_in_state_order`); finite rows are
untouched.

Tensors inside are ``[B, H, N, C, .]`` (N chunks). Pairwise decays are formed as exp(gamma_t - gamma_s) of the
difference, never as a ratio of two exponentials, so strong decays cannot overflow in this reference path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def acc_dtype_for(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64 (the ~1e-12 check against the oracle); everything else accumulates in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _to_chunks(x: torch.Tensor, C: int, dtype: torch.dtype) -> torch.Tensor:
    """[B, T, H, D] -> [B, H, N, C, D], zero-padded in time. Zero q/k/g steps leave the state unchanged."""
    B, T, H, D = x.shape
    pad = (-T) % C
    x = x.to(dtype)
    if pad:
        x = F.pad(x, (0, 0, 0, 0, 0, pad))
    return x.reshape(B, (T + pad) // C, C, H, D).permute(0, 3, 1, 2, 4)


def _from_chunks(x: torch.Tensor, T: int) -> torch.Tensor:
    B, H, N, C, D = x.shape
    return x.permute(0, 2, 3, 1, 4).reshape(B, N * C, H, D)[:, :T]


def _masks(C: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    strict = torch.ones(C, C, dtype=torch.bool, device=device).tril(-1)
    return strict, strict | torch.eye(C, dtype=torch.bool, device=device)


def _decay_pairs(gam: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """exp(gamma_t - gamma_s) per channel, zero outside ``mask``: [B,H,N,C,C,K]."""
    diff = gam.unsqueeze(-2) - gam.unsqueeze(-3)
    return torch.exp(diff.masked_fill(~mask[..., None], float("-inf")))


def _pair(x, y, E):
    """M_ts = sum_c x_tc y_sc E_tsc."""
    return torch.einsum("...tk,...sk,...tsk->...ts", x, y, E)


def _pair_bwd(dM, x, y, E):
    """VJP of :func:`_pair`: (dx, dy, dgamma)."""
    G = dM.unsqueeze(-1) * E
    dx = torch.einsum("...tsk,...sk->...tk", G, y)
    dy = torch.einsum("...tsk,...tk->...sk", G, x)
    Z = G * x.unsqueeze(-2) * y.unsqueeze(-3)
    return dx, dy, Z.sum(-2) - Z.sum(-3)


def _rows_in_state_order(o, rows, qc, kc, Gam, Ei, Hs, delta):
    """Recompute the output rows ``rows`` ([B,H,N,C] bool) as o_t = S_t^T q_t, the state formed first.

    The chunked form distributes q_t over the terms of the state: (q Gamma) S_0 + P delta with
    P_ts = sum_c q_tc k_sc exp(gamma_tc - gamma_sc). That is the same operator for finite q, but an infinite
    q_tc then multiplies every term separately: the masked pairs s > t (decay exactly 0) and a zero initial
    state give inf * 0 = NaN, and the terms of both signs of P delta give inf - inf = NaN. The recurrence's
    IEEE result is +-inf (one infinite product per output, sign of q_tc * S_t[c, v]). So for the steps whose
    query is not finite (and only those: every finite row keeps the fast form bit for bit), the intra-chunk
    state S_t = Diag(Gamma_t) S_0 + sum_{s<=t} (k_s * exp(gamma_t - gamma_s)) delta_s^T is built from finite
    operands and contracted with q_t last, as the recurrence does.
    """
    bi, hi, ni, ti = rows.nonzero(as_tuple=True)
    kdec = kc[bi, hi, ni] * Ei[bi, hi, ni, ti]  # [R, C(s), K]; pairs s > t hold exp(-inf) = 0 times finite k
    St = Gam[bi, hi, ni, ti].unsqueeze(-1) * Hs[bi, hi, ni] + kdec.transpose(-1, -2) @ delta[bi, hi, ni]
    o = o.clone()
    o[bi, hi, ni, ti] = (St * qc[bi, hi, ni, ti].unsqueeze(-1)).sum(-2)
    return o


def wy_intra(k, g, b, chunk: int):
    """The intra-chunk UT transform alone: (A, T) per chunk for k, g, b in ``[B,T,H,K]``.

    Exposed so tests can check that b = 0 makes A vanish and T exactly the identity.
    """
    acc = acc_dtype_for(k.dtype)
    kc, gc, bc = (_to_chunks(x, chunk, acc) for x in (k, g, b))
    gam = gc.cumsum(-2)
    strict, _ = _masks(chunk, k.device)
    A = _pair(bc * kc, kc, _decay_pairs(gam, strict))
    eye = torch.eye(chunk, dtype=acc, device=k.device)
    Tm = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False, unitriangular=True)
    return A, Tm


def chunk_fwd(q, k, v, g, b, w, scale=None, chunk: int = 64, initial_state=None):
    """Forward of the chunked form. g ``[B,T,H,K]`` (full), b ``[B,T,H,K]`` or None (no erase), w ``[B,T,H,V]``.

    Returns ``(o, final_state, ctx)`` where o has q's dtype, the state is in the accumulation dtype and ctx holds
    what :func:`chunk_bwd` needs.
    """
    B, T, H, K = q.shape
    acc = acc_dtype_for(q.dtype)
    s = K**-0.5 if scale is None else float(scale)
    C = chunk
    qc = _to_chunks(q, C, acc) * s
    kc, gc = _to_chunks(k, C, acc), _to_chunks(g, C, acc)
    vc, wc = _to_chunks(v, C, acc), _to_chunks(w, C, acc)
    uc = wc * vc
    gam = gc.cumsum(-2)
    Gam = torch.exp(gam)
    strict, incl = _masks(C, q.device)
    Ei = _decay_pairs(gam, incl)
    P = _pair(qc, kc, Ei)
    if b is not None:
        bc = _to_chunks(b, C, acc)
        ec = bc * kc
        A = _pair(ec, kc, Ei * strict[..., None])
        eye = torch.eye(C, dtype=acc, device=q.device)
        Tm = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False, unitriangular=True)
        Xe = ec * Gam
        Wm, Um = Tm @ Xe, Tm @ uc
    else:
        bc = ec = Tm = Xe = Wm = None
        Um = uc
    Qg = qc * Gam
    Kend = kc * torch.exp(gam[..., -1:, :] - gam)
    GC = Gam[..., -1, :]
    N = qc.shape[2]
    S = q.new_zeros(B, H, K, v.shape[-1], dtype=acc) if initial_state is None else initial_state.to(acc)
    hs, deltas = [], []
    for n in range(N):
        hs.append(S)
        d = Um[:, :, n] if Wm is None else Um[:, :, n] - Wm[:, :, n] @ S
        deltas.append(d)
        S = GC[:, :, n, :, None] * S + Kend[:, :, n].transpose(-1, -2) @ d
    Hs = torch.stack(hs, dim=2)
    delta = torch.stack(deltas, dim=2)
    o = Qg @ Hs + P @ delta
    rows = ~torch.isfinite(qc).all(-1)  # [B,H,N,C]: steps whose query holds a NaN or an infinity
    if bool(rows.any()):
        o = _rows_in_state_order(o, rows, qc, kc, Gam, Ei, Hs, delta)
    ctx = dict(qc=qc, kc=kc, uc=uc, vc=vc, wc=wc, bc=bc, ec=ec, gam=gam, Gam=Gam, Ei=Ei, P=P, Tm=Tm, Xe=Xe,
               Wm=Wm, Qg=Qg, Kend=Kend, GC=GC, Hs=Hs, delta=delta, scale=s, T=T, C=C, dtype=q.dtype,
               has_init=initial_state is not None)
    return _from_chunks(o, T).to(q.dtype), S, ctx


def reverse_state_scan(do_c, ctx, dS_final=None):
    """Reverse-time inter-chunk scan: dS_C of every chunk, d(delta) of every chunk, and d(initial state).

    dS is carried in the accumulation dtype (float32 unless the inputs are float64). Per chunk n (reverse):
    d delta_n = P_n^T dO_n + Kend_n dS,   dS <- (q Gamma)_n^T dO_n + Diag(Gamma_C) dS - W_n^T d delta_n.
    """
    P, Kend, Qg, GC, Wm = ctx["P"], ctx["Kend"], ctx["Qg"], ctx["GC"], ctx["Wm"]
    B, H, N, C, V = do_c.shape
    K = Qg.shape[-1]
    dS = do_c.new_zeros(B, H, K, V) if dS_final is None else dS_final.to(do_c.dtype)
    dS_next = [None] * N
    ddelta = [None] * N
    for n in reversed(range(N)):
        dS_next[n] = dS
        dd = P[:, :, n].transpose(-1, -2) @ do_c[:, :, n] + Kend[:, :, n] @ dS
        ddelta[n] = dd
        dS = Qg[:, :, n].transpose(-1, -2) @ do_c[:, :, n] + GC[:, :, n, :, None] * dS
        if Wm is not None:
            dS = dS - Wm[:, :, n].transpose(-1, -2) @ dd
    return torch.stack(dS_next, dim=2), torch.stack(ddelta, dim=2), dS


def wy_vjp_torch(dd, ctx):
    """K2, the WY / triangular-inverse VJP of every chunk: (dXe, du, dA) from d delta ``dd`` ``[B,H,N,C,V]``.

    With S0 = Hs (state at the chunk's start), T = Tm, X = Xe, U = uc:
    dW = -dd S0^T, dT = dW X^T + dd U^T, dXe = T^T dW, du = T^T dd, dA = -(T^T dT T^T) * strict (strictly lower).
    Only called when the forward ran with erase (Tm is not None). The native kernels
    (:func:`lethe.kernels.gdn.native.api.native_wy_vjp`) are drop-ins for this function.
    """
    Tm = ctx["Tm"]
    strict, _ = _masks(Tm.shape[-1], dd.device)
    HsT = ctx["Hs"].transpose(-1, -2)
    dW = -(dd @ HsT)
    TmT = Tm.transpose(-1, -2)
    dT = dW @ ctx["Xe"].transpose(-1, -2) + dd @ ctx["uc"].transpose(-1, -2)
    dXe = TmT @ dW
    du = TmT @ dd
    dA = -(TmT @ dT @ TmT) * strict
    return dXe, du, dA


def grad_dtype(ctx: dict, name: str):
    """The dtype a backward returns gradient ``name`` ("dq", "dk", "dv", "dg", "db", "dw") in: the inputs' dtype,
    unless the autograd Function asked for another in ``ctx["grad_dtypes"]`` (float32 for the gradients it goes on
    to sum over a broadcast axis, so that they are rounded once, after the sum)."""
    return ctx.get("grad_dtypes", {}).get(name) or ctx["dtype"]


def chunk_bwd(do, ctx, dS_final=None, scan=None, wy_vjp=None):
    """Explicit backward of :func:`chunk_fwd`: (dq, dk, dv, dg, db, dw, d_initial_state), g-shaped dg ``[B,T,H,K]``.

    db is None when the forward ran without erase. ``scan`` replaces K1 (:func:`reverse_state_scan`) and
    ``wy_vjp`` replaces K2 (:func:`wy_vjp_torch`); both default to the torch code.
    """
    acc = ctx["qc"].dtype
    C, T, s = ctx["C"], ctx["T"], ctx["scale"]
    do_c = _to_chunks(do, C, acc)
    # K1 and K2 are swappable (the native CuTe DSL kernels plug in here); the rest stays shared.
    dSn, dd, dinit = (scan or reverse_state_scan)(do_c, ctx, dS_final)
    Hs, delta, Tm = ctx["Hs"], ctx["delta"], ctx["Tm"]
    qc, kc, vc, wc = ctx["qc"], ctx["kc"], ctx["vc"], ctx["wc"]
    gam, Ei, Kend, Qg, GC = ctx["gam"], ctx["Ei"], ctx["Kend"], ctx["Qg"], ctx["GC"]
    strict, incl = _masks(C, do.device)
    HsT = Hs.transpose(-1, -2)
    # output and state-passing products
    dP = (do_c @ delta.transpose(-1, -2)) * incl
    dQg = do_c @ HsT
    dKend = delta @ dSn.transpose(-1, -2)
    dGC = (Hs * dSn).sum(-1)
    dq, dk, dgam = _pair_bwd(dP, qc, kc, Ei)
    dq = dq + dQg * ctx["Gam"]
    dgam = dgam + dQg * Qg
    expK = torch.exp(gam[..., -1:, :] - gam)
    dk = dk + dKend * expK
    dgam = dgam - dKend * Kend
    dgamC = (dKend * Kend).sum(-2) + dGC * GC
    # WY / triangular-inverse VJP
    if Tm is not None:
        dXe, du, dA = (wy_vjp or wy_vjp_torch)(dd, ctx)
        de, dk_a, dgam_a = _pair_bwd(dA, ctx["ec"], kc, Ei * strict[..., None])
        dk = dk + dk_a
        de = de + dXe * ctx["Gam"]
        dgam = dgam + dgam_a + dXe * ctx["Xe"]
        db = de * kc
        dk = dk + de * ctx["bc"]
    else:
        du, db = dd, None
    dgam[..., -1, :] = dgam[..., -1, :] + dgamC
    dg = dgam.flip(-2).cumsum(-2).flip(-2)
    dv, dw = du * wc, du * vc
    dt = lambda name: grad_dtype(ctx, name)  # noqa: E731
    out = [_from_chunks(x, T).to(dt(n)) for n, x in zip(("dq", "dk", "dv", "dg"), (dq * s, dk, dv, dg), strict=True)]
    out.append(None if db is None else _from_chunks(db, T).to(dt("db")))
    out.append(_from_chunks(dw, T).to(dt("dw")))
    out.append(dinit if ctx["has_init"] else None)
    return tuple(out)
