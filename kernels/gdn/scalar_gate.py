"""The scalar-gate gated delta rule on its own Triton kernels: KDA with one decay per head and step.

    S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,     o_t = S_t^T (scale q_t)

with g, beta ``[B, T, H]`` -- fla's ``chunk_gated_delta_rule``, ``chunk_family(member="kda")`` with a per-head g.
It is the general recurrence (:mod:`lethe.kernels.gdn.chunked`) with g broadcast over d_k and b = w = beta, so the
float64 oracle and the torch chunked path are its references, and the general Triton kernels compute it too. They
have to form per-channel decayed float32 operands (q * Gamma, k / Gamma) and run TF32 products on them. With a
scalar decay every pairwise decay factors out of the products as a [C, C] matrix exp(gc_t - gc_s) (gc the
chunk-local cumulative log-decay) or a per-row scale, so here

* the products of raw inputs (q k^T, k k^T) take the bf16/fp16 tensors as they are: tensor-core products that are
  exact in float32, accumulated in float32, the decay applied to the float32 result;
* products with a float32 operand (T, W, the states, delta, the gradients) run at the forward's "auto" precision
  (single-pass TF32 on operands rounded to nearest for 16-bit inputs; float32-grade for float32 inputs), with the
  decays on the float32 side, so a bf16 operand still enters exactly;
* inputs are read and gradients written in the caller's ``[B, T, H, D]`` layout and dtype (no float32 copies of
  q, k, v), the gate gradients dg and dbeta summed in float32 inside the kernel and rounded once.

Forward: ``sg_a_kernel`` (gc, A = strict_tril(beta_t (k_t . k_s) exp(gc_t - gc_s))), the general path's in-place
``wy_inverse_kernel`` (T = (I + A)^{-1}), ``sg_wu_kernel`` (W = T (beta exp(gc) k), U~ = T (beta v)), then the
general forward's ``state_fwd_kernel`` (the sequential inter-chunk scan, states and delta = U~ - W S_n stored) and
``output_fwd_kernel`` in their scalar-gate variant (``SCALAR_GATE=True``: the decay read as one value per step, the
inputs in the caller's layout), launched with this path's entries ``sg_state_fwd_kernel`` / ``sg_output_kernel``
(:data:`SG_VARIANTS`). Backward: ``sg_dd_local_kernel`` (the output's share of d delta, P^T dO, for all chunks at once),
``sg_state_bwd_kernel`` (the reverse scan: dS per chunk, the end state's share of d delta) and
two chunk-local kernels: ``sg_intra_out_bwd_kernel`` (through the output's products and the end state: dq, and dk
and d gc so far) and ``sg_intra_wy_bwd_kernel`` (the WY / triangular-inverse VJP: dv, dbeta, the rest of dk and
d gc, dg as its in-chunk reverse sum), which write the gradients in the caller's layout themselves.

:func:`lethe.kernels.gdn.autograd.scalar_gate_applies` says when :func:`lethe.kernels.gdn.autograd.chunk_family` takes this
path (``gate_form="auto"``); ``gate_form="general"`` keeps the general kernels for the same call (the control).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fwd_options import resolve_precision
from .triton_fwd import (
    FWD_LAUNCH,
    _check_dims,
    _decay_pairs,
    _mm,
    _raw_dot,
    _rn,
    _tile,
    check_index_range,
    output_fwd_kernel,
    state_fwd_kernel,
    wy_inverse_kernel,
)

# Launch configuration ("BV" an upper bound: min(V, BV)), each choice timed on the H200 against the one before with
# the outputs compared (results/gdn/scalar_gate/: each run's "variants"). num_stages=1 (no software pipelining of
# the chunk loops) except where a measurement said otherwise. The in-place inverse is the general forward's kernel
# and launches with its entry there (FWD_LAUNCH["wy_inverse_kernel"]).
SG_LAUNCH = {
    "sg_a_kernel": dict(num_warps=4, num_stages=1),
    "sg_wu_kernel": dict(BV=64, num_warps=4, num_stages=1),
    # BV 64 (here, in the reverse scan and in the output-side backward kernel): bitwise the BV-32 results, fwd+bwd
    # 14.86 / 14.22 / 14.97 against 15.21 ms (H200, c20fb82, d_v 128, T 4k, 2^20 head-tokens: results/gdn/scalar_gate/)
    # num_stages 2 (the chunk loop's loads of W, U and k issued a step ahead): 13.64 against 13.79 ms, bitwise (388a466)
    "sg_state_fwd_kernel": dict(BV=64, num_warps=4, num_stages=2),
    "sg_output_kernel": dict(BV=64, num_warps=4, num_stages=1),
    "sg_dd_local_kernel": dict(BV=64, num_warps=4, num_stages=1),
    # 4 warps: fwd+bwd 20.19 against 22.48 ms at 8 (917623b; bitwise the same)
    "sg_state_bwd_kernel": dict(BV=64, num_warps=4, num_stages=1),
    "sg_intra_out_bwd_kernel": dict(BV=64, num_warps=8, num_stages=1),
    # 4 warps: 13.33 against 13.79 ms at 8, bitwise (388a466). (The earlier versions of this kernel, which formed dW
    # and dW X^T, did not agree with themselves across warp counts: at 4 warps 2.2e-3 (917623b) and 0.17 (c20fb82,
    # max-relative) away from their 8-warp runs, not explained; the current one agrees bit for bit. The committed
    # checks against float64 ran at the defaults.)
    "sg_intra_wy_bwd_kernel": dict(BV=32, num_warps=4, num_stages=1),
}


# The general kernels this path launches in their scalar-gate variant (SCALAR_GATE=True), by the name of the entry
# above they launch with: one kernel with a flag rather than a fork, its launch configured apart from the general
# path's (launch_tables.entry_name maps a recorded launch back to its entry).
SG_VARIANTS = {"sg_state_fwd_kernel": "state_fwd_kernel", "sg_output_kernel": "output_fwd_kernel"}


def _launch(name: str) -> dict:
    cfg = SG_LAUNCH.get(name) or FWD_LAUNCH[name]
    return {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}


def _bv(name: str, V: int) -> int:
    return min(V, SG_LAUNCH[name]["BV"])


# The two scans are sequential over the chunks, so their parallelism is B*H x V-blocks programs alone: below about
# one program per SM (132 on the H200) the V-block is halved (to 16 at most), as the CuTe K1's tile rule does.
# Every V-block width gave bitwise the same results on the H200 (BV 16, 32, 64; results/gdn/scalar_gate/).
SCAN_MIN_PROGRAMS = 128


def _scan_bv(name: str, BH: int, V: int) -> int:
    bv = _bv(name, V)
    while bv > 16 and BH * (V // bv) < SCAN_MIN_PROGRAMS:
        bv //= 2
    return bv


@triton.jit
def _vec(ptr, b, h, t, tmask, T, H):
    """Rows ``t`` of head (b, h) of a contiguous [B, T, H] tensor as float32; rows past T read as 0."""
    return tl.load(ptr + (b * T + t) * H + h, mask=tmask, other=0.0).to(tl.float32)


@triton.jit
def sg_a_kernel(k_ptr, g_ptr, beta_ptr, gc_ptr, A_ptr, T, H, K: tl.constexpr, C: tl.constexpr,
                NATIVE: tl.constexpr, PREC: tl.constexpr):
    # grid (chunks, B*H): gc = the chunk-local cumulative log-decay (stored for every later kernel) and the strictly
    # lower A_ts = beta_t (k_t . k_s) exp(gc_t - gc_s), which wy_inverse_kernel then inverts in place
    n = tl.program_id(0)
    bh = tl.program_id(1)
    NT = tl.num_programs(0)
    b = bh // H
    h = bh % H
    r = tl.arange(0, C)
    t = n * C + r
    tmask = t < T
    gc = tl.cumsum(_vec(g_ptr, b, h, t, tmask, T, H), 0)
    tl.store(gc_ptr + bh * NT * C + n * C + r, gc)
    beta = _vec(beta_ptr, b, h, t, tmask, T, H)
    k = _tile(k_ptr, b, h, t, tmask, tl.arange(0, K), T, H, K)
    kk = _raw_dot(k, tl.trans(k), NATIVE, PREC)
    A = beta[:, None] * kk * _decay_pairs(gc, r, True)
    tl.store(A_ptr + (bh * NT + n) * C * C + r[:, None] * C + r[None, :], A)


@triton.jit
def sg_wu_kernel(k_ptr, v_ptr, beta_ptr, gc_ptr, Tm_ptr, W_ptr, U_ptr, T, H, K: tl.constexpr, V: tl.constexpr,
                 C: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr):
    # grid (chunks, B*H): W = T X with X = beta exp(gc) k, and U~ = T (beta v), float32 [B*H, T_pad, .] (W as
    # the later products read it: TF32-rounded under "tf32rn")
    n = tl.program_id(0)
    bh = tl.program_id(1)
    NT = tl.num_programs(0)
    b = bh // H
    h = bh % H
    r = tl.arange(0, C)
    t = n * C + r
    tmask = t < T
    ck = tl.arange(0, K)
    row = bh * NT * C + n * C + r
    Tm = tl.load(Tm_ptr + (bh * NT + n) * C * C + r[:, None] * C + r[None, :])
    gc = tl.load(gc_ptr + row)
    beta = _vec(beta_ptr, b, h, t, tmask, T, H)
    k = _tile(k_ptr, b, h, t, tmask, ck, T, H, K).to(tl.float32)
    Tm = _rn(Tm, PREC)
    # W is only ever a product's operand (W S_n forward, W^T d delta backward): stored as those products read it
    tl.store(W_ptr + row[:, None] * K + ck[None, :], _rn(_mm(Tm, _rn((beta * tl.exp(gc))[:, None] * k, PREC), PREC), PREC))
    for iv in tl.static_range(V // BV):
        cv = iv * BV + tl.arange(0, BV)
        vb = _tile(v_ptr, b, h, t, tmask, cv, T, H, V).to(tl.float32) * beta[:, None]
        tl.store(U_ptr + row[:, None] * V + cv[None, :], _mm(Tm, _rn(vb, PREC), PREC))


@triton.jit
def sg_dd_local_kernel(q_ptr, k_ptr, gc_ptr, DO_ptr, DD_ptr, scale, T, H, K: tl.constexpr, V: tl.constexpr,
                       C: tl.constexpr, BV: tl.constexpr, NATIVE: tl.constexpr, PREC: tl.constexpr):
    # grid (chunks, B*H): the output's share of d delta, P^T dO (P = scale (q k^T) * exp(gc_t - gc_s) on s <= t),
    # for every chunk at once; the reverse scan adds the end state's share. Taking it out of the scan's sequential
    # loop also stops every V-block's program of the scan from forming P again.
    n = tl.program_id(0)
    bh = tl.program_id(1)
    NT = tl.num_programs(0)
    b = bh // H
    h = bh % H
    r = tl.arange(0, C)
    t = n * C + r
    tmask = t < T
    ck = tl.arange(0, K)
    q = _tile(q_ptr, b, h, t, tmask, ck, T, H, K)
    k = _tile(k_ptr, b, h, t, tmask, ck, T, H, K)
    gc = tl.load(gc_ptr + bh * NT * C + n * C + r)
    PT = tl.trans(_rn(_raw_dot(q, tl.trans(k), NATIVE, PREC) * scale * _decay_pairs(gc, r, False), PREC))
    for iv in tl.static_range(V // BV):
        cv = iv * BV + tl.arange(0, BV)
        do = _tile(DO_ptr, b, h, t, tmask, cv, T, H, V).to(tl.float32)
        tl.store(DD_ptr + (bh * NT * C + n * C + r)[:, None] * V + cv[None, :], _mm(PT, do, PREC))


@triton.jit
def sg_state_bwd_kernel(q_ptr, k_ptr, gc_ptr, W_ptr, DO_ptr, DSF_ptr, DSN_ptr, DD_ptr, DS0_ptr, scale, T, H,
                        NT: tl.constexpr, K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr,
                        HAS_DSF: tl.constexpr, PREC: tl.constexpr):
    # grid (V-blocks, B*H): the reverse scan, dS in float32 registers. Per chunk (last first): store dS (the
    # gradient at the chunk's end state), d delta = P^T dO (from sg_dd_local_kernel, in DD) + exp(gc_C - gc) (k dS),
    # then dS <- exp(gc_C) dS + q^T (scale exp(gc) dO) - W^T d delta; the last dS is the initial state's gradient
    iv = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    TP = NT * C
    r = tl.arange(0, C)
    ck = tl.arange(0, K)
    cv = iv * BV + tl.arange(0, BV)
    offS = bh * K * V + ck[:, None] * V + cv[None, :]
    if HAS_DSF:
        dS = tl.load(DSF_ptr + offS)
    else:
        dS = tl.zeros([K, BV], dtype=tl.float32)
    for i in range(NT):
        n = NT - 1 - i
        tl.store(DSN_ptr + (bh * NT + n) * K * V + ck[:, None] * V + cv[None, :], dS)
        t = n * C + r
        tmask = t < T
        row = bh * TP + n * C + r
        offv = row[:, None] * V + cv[None, :]
        gc = tl.load(gc_ptr + row)
        gC = tl.load(gc_ptr + bh * TP + n * C + C - 1)
        k = _tile(k_ptr, b, h, t, tmask, ck, T, H, K).to(tl.float32)
        dSr = _rn(dS, PREC)
        dd = tl.load(DD_ptr + offv) + tl.exp(gC - gc)[:, None] * _mm(k, dSr, PREC)
        tl.store(DD_ptr + offv, dd)
        q = _tile(q_ptr, b, h, t, tmask, ck, T, H, K).to(tl.float32)
        do = _tile(DO_ptr, b, h, t, tmask, cv, T, H, V).to(tl.float32)
        W = tl.load(W_ptr + row[:, None] * K + ck[None, :])
        dS = (tl.exp(gC) * dS + _mm(tl.trans(q), _rn(do * (scale * tl.exp(gc))[:, None], PREC), PREC)
              - _mm(tl.trans(W), _rn(dd, PREC), PREC))
    tl.store(DS0_ptr + offS, dS)


@triton.jit
def sg_intra_out_bwd_kernel(q_ptr, k_ptr, gc_ptr, H_ptr, D_ptr, DSN_ptr, DO_ptr, DQ_ptr, DKP_ptr, DGCP_ptr, scale, T, H,
                            K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr,
                            NATIVE: tl.constexpr, PREC: tl.constexpr):
    # grid (chunks, B*H), first of the two chunk-local kernels: the gradients through the output
    # o = scale exp(gc) (q S_n) + P delta (P = scale (q k^T) * exp(gc_t - gc_s) on s <= t) and through the end state
    # S_C = exp(gc_C) S_n + Kend^T delta (Kend = exp(gc_C - gc) k). Contracts over V one V-block at a time:
    # M = dO delta^T, dO S_n^T, delta dS_C^T and <S_n, dS_C>. Writes dq, and dk and d gc so far (float32), which
    # sg_intra_wy_bwd_kernel completes. (One kernel for both held five [C, K] / [C, C] float32 accumulators and
    # spilled 2.3 KB per thread at 8 warps on sm_90a.)
    n = tl.program_id(0)
    bh = tl.program_id(1)
    NT = tl.num_programs(0)
    TP = NT * C
    b = bh // H
    h = bh % H
    r = tl.arange(0, C)
    t = n * C + r
    tmask = t < T
    ck = tl.arange(0, K)
    row = bh * TP + n * C + r
    gc = tl.load(gc_ptr + row)
    gC = tl.load(gc_ptr + bh * TP + n * C + C - 1)
    M = tl.zeros([C, C], dtype=tl.float32)
    dqS = tl.zeros([C, K], dtype=tl.float32)
    dKe = tl.zeros([C, K], dtype=tl.float32)
    dGC = tl.zeros([K], dtype=tl.float32)
    for iv in range(V // BV):  # a loop, not unrolled: unrolled, the loads of every V-block were live at once
        cv = iv * BV + tl.arange(0, BV)
        offS = (bh * NT + n) * K * V + ck[:, None] * V + cv[None, :]
        S = tl.load(H_ptr + offS)
        dSn = tl.load(DSN_ptr + offS)
        dGC += tl.sum(S * dSn, 1)
        S = _rn(S, PREC)
        d = _rn(tl.load(D_ptr + row[:, None] * V + cv[None, :]), PREC)
        do = _tile(DO_ptr, b, h, t, tmask, cv, T, H, V).to(tl.float32)
        M += _mm(do, tl.trans(d), PREC)
        dqS += _mm(do, tl.trans(S), PREC)
        dKe += _mm(d, tl.trans(_rn(dSn, PREC)), PREC)
    q = _tile(q_ptr, b, h, t, tmask, ck, T, H, K)
    k = _tile(k_ptr, b, h, t, tmask, ck, T, H, K)
    qf = q.to(tl.float32)
    kf = k.to(tl.float32)
    eg = tl.exp(gc)
    Mg = M * _decay_pairs(gc, r, False) * scale  # d(q k^T)
    Mp = Mg * _raw_dot(q, tl.trans(k), NATIVE, PREC)  # dP * P: the pairwise decays' share of d gc
    Mg = _rn(Mg, PREC)
    dq = (scale * eg)[:, None] * dqS + _mm(Mg, kf, PREC)
    dgc = scale * eg * tl.sum(qf * dqS, 1) + tl.sum(Mp, 1) - tl.sum(Mp, 0)
    ek = tl.exp(gC - gc)
    dk = _mm(tl.trans(Mg), qf, PREC) + ek[:, None] * dKe
    sK = ek * tl.sum(dKe * kf, 1)
    dgc -= sK
    # gc_C is the chunk's last row of gc: its gradient joins that row's before the in-chunk reverse sum
    dgc = tl.where(r == C - 1, dgc + tl.sum(sK, 0) + tl.exp(gC) * tl.sum(dGC, 0), dgc)
    tl.store(DQ_ptr + ((b * T + t[:, None]) * H + h) * K + ck[None, :], dq.to(DQ_ptr.dtype.element_ty),
             mask=tmask[:, None])
    tl.store(DKP_ptr + row[:, None] * K + ck[None, :], dk)
    tl.store(DGCP_ptr + row, dgc)


@triton.jit
def sg_intra_wy_bwd_kernel(k_ptr, v_ptr, beta_ptr, gc_ptr, Tm_ptr, H_ptr, D_ptr, DD_ptr, DKP_ptr, DGCP_ptr,
                           DK_ptr, DV_ptr, DG_ptr, DB_ptr, T, H, K: tl.constexpr, V: tl.constexpr, C: tl.constexpr,
                           BV: tl.constexpr, NATIVE: tl.constexpr, PREC: tl.constexpr):
    # grid (chunks, B*H), second chunk-local kernel: the WY step delta = U~ - W S_n, W = T X (X = beta exp(gc) k),
    # U~ = T U (U = beta v), T = (I + A)^{-1}, A = strict_tril(beta_t (k_t . k_s) exp(gc_t - gc_s)).
    # With dU = T^T d delta (the gradient of U, -> dv, dbeta):
    #   dX = T^T dW = -dU S_n^T,    dT = dW X^T + d delta U^T = d delta (U - X S_n)^T = (d delta delta^T) (I + A)^T,
    # since U - X S_n = T^{-1} delta. So the V loop accumulates dX and the [C, C] d delta delta^T, and A is
    # rebuilt from k k^T, which A's own gradient needs anyway; then dA = -T^T dT T^T. Completes dk and d gc from
    # sg_intra_out_bwd_kernel, takes dg as the in-chunk reverse sum of d gc and writes dk, dv, dg, dbeta.
    n = tl.program_id(0)
    bh = tl.program_id(1)
    NT = tl.num_programs(0)
    TP = NT * C
    b = bh // H
    h = bh % H
    r = tl.arange(0, C)
    t = n * C + r
    tmask = t < T
    ck = tl.arange(0, K)
    row = bh * TP + n * C + r
    gc = tl.load(gc_ptr + row)
    beta = _vec(beta_ptr, b, h, t, tmask, T, H)
    TmT = _rn(tl.trans(tl.load(Tm_ptr + (bh * NT + n) * C * C + r[:, None] * C + r[None, :])), PREC)
    Md = tl.zeros([C, C], dtype=tl.float32)
    dX = tl.zeros([C, K], dtype=tl.float32)
    dbeta = tl.zeros([C], dtype=tl.float32)
    for iv in range(V // BV):  # a loop, not unrolled (see sg_intra_out_bwd_kernel)
        cv = iv * BV + tl.arange(0, BV)
        offv = row[:, None] * V + cv[None, :]
        dd = _rn(tl.load(DD_ptr + offv), PREC)
        dU = _mm(TmT, dd, PREC)
        v = _tile(v_ptr, b, h, t, tmask, cv, T, H, V).to(tl.float32)
        tl.store(DV_ptr + ((b * T + t[:, None]) * H + h) * V + cv[None, :],
                 (beta[:, None] * dU).to(DV_ptr.dtype.element_ty), mask=tmask[:, None])
        dbeta += tl.sum(dU * v, 1)
        S = _rn(tl.load(H_ptr + (bh * NT + n) * K * V + ck[:, None] * V + cv[None, :]), PREC)
        dX -= _mm(_rn(dU, PREC), tl.trans(S), PREC)
        Md += _mm(dd, tl.trans(_rn(tl.load(D_ptr + offv), PREC)), PREC)
    k = _tile(k_ptr, b, h, t, tmask, ck, T, H, K)
    kf = k.to(tl.float32)
    eg = tl.exp(gc)
    bg = beta * eg
    kk = _raw_dot(k, tl.trans(k), NATIVE, PREC)
    Gs = _decay_pairs(gc, r, True)
    Mdr = _rn(Md, PREC)
    dT = Md + _mm(Mdr, tl.trans(_rn(beta[:, None] * kk * Gs, PREC)), PREC)
    dA = -_mm(_rn(_mm(TmT, _rn(dT, PREC), PREC), PREC), TmT, PREC)
    Ag = dA * Gs  # d(k k^T) / beta_t, strictly lower
    AgK = Ag * kk
    Ag = _rn(Ag, PREC)
    dk = tl.load(DKP_ptr + row[:, None] * K + ck[None, :])
    dk += beta[:, None] * _mm(Ag, kf, PREC) + _mm(tl.trans(Ag), _rn(beta[:, None] * kf, PREC), PREC) + bg[:, None] * dX
    Ma = AgK * beta[:, None]  # dA * A
    dXk = tl.sum(dX * kf, 1)
    dbeta += tl.sum(AgK, 1) + eg * dXk
    dgc = tl.load(DGCP_ptr + row) + tl.sum(Ma, 1) - tl.sum(Ma, 0) + bg * dXk
    dg = tl.cumsum(dgc, 0, reverse=True)
    tl.store(DK_ptr + ((b * T + t[:, None]) * H + h) * K + ck[None, :], dk.to(DK_ptr.dtype.element_ty),
             mask=tmask[:, None])
    tl.store(DG_ptr + (b * T + t) * H + h, dg, mask=tmask)
    tl.store(DB_ptr + (b * T + t) * H + h, dbeta, mask=tmask)


def sg_chunk_fwd(q, k, v, g, beta, scale=None, chunk: int = 64, initial_state=None, dot_precision: str = "tf32x3",
                 prec: str | None = None):
    """Forward; returns ``(o, final_state, ctx)``: o ``[B, T, H, V]`` in q's dtype, the final state ``[B, H, K, V]``
    in float32, ctx what :func:`sg_chunk_bwd` needs. g and beta ``[B, T, H]`` (natural-log decay, write strength).
    The products with a float32 operand run at ``prec`` (None: the forward's "auto" rule for ``dot_precision``;
    the tests force "tf32rn" on float32 inputs, the interpreter being unreliable in bf16); the backward at the same."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    C = chunk
    _check_dims(K, V, C)
    check_index_range(B, H, T, K, V, C)
    if g.shape != (B, T, H) or beta.shape != (B, T, H):
        raise ValueError(f"g and beta must be [B, T, H] = {(B, T, H)}, got {tuple(g.shape)} and {tuple(beta.shape)}")
    sixteen = q.dtype in (torch.bfloat16, torch.float16)
    prec = prec or resolve_precision("auto", dot_precision, sixteen)
    s = K**-0.5 if scale is None else float(scale)
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    TP = T + (-T) % C
    NT = TP // C
    dev = q.device
    f32 = dict(device=dev, dtype=torch.float32)
    gc = torch.empty(B, H, TP, **f32)
    Tm = torch.empty(B, H, NT, C, C, **f32)
    sg_a_kernel[(NT, B * H)](k, g, beta, gc, Tm, T, H, K=K, C=C, NATIVE=sixteen, PREC=prec, **_launch("sg_a_kernel"))
    wy_inverse_kernel[(B * H * NT,)](Tm, C=C, **_launch("wy_inverse_kernel"))
    Wi = torch.empty(B, H, TP, K, **f32)
    Ui = torch.empty(B, H, TP, V, **f32)
    sg_wu_kernel[(NT, B * H)](k, v, beta, gc, Tm, Wi, Ui, T, H, K=K, V=V, C=C, BV=_bv("sg_wu_kernel", V), PREC=prec,
                              **_launch("sg_wu_kernel"))
    Hs = torch.empty(B, H, NT, K, V, **f32)
    Di = torch.empty(B, H, TP, V, **f32)
    SF = torch.empty(B, H, K, V, **f32)
    S0 = initial_state.float().contiguous() if initial_state is not None else SF
    BVs = _scan_bv("sg_state_fwd_kernel", B * H, V)
    state_fwd_kernel[(V // BVs, B * H)](k, gc, Wi, Ui, S0, Hs, Di, SF, k, T, H, NT=NT, K=K, V=V, C=C, BV=BVs,
                                        HAS_ERASE=True, HAS_INIT=initial_state is not None, PREC=prec, KEND_IN=False,
                                        SCALAR_GATE=True, **_launch("sg_state_fwd_kernel"))
    del Ui
    o = torch.empty(B, T, H, V, device=dev, dtype=q.dtype)
    BVo = _bv("sg_output_kernel", V)
    output_fwd_kernel[(NT, B * H)](q, k, gc, Hs, Di, o, s, T, H, K=K, V=V, C=C, BV=BVo, NVL=V // BVo, PREC=prec,
                                   DIRECT=True, SCALAR_GATE=True, NATIVE=sixteen, **_launch("sg_output_kernel"))
    ctx = dict(q=q, k=k, v=v, beta=beta, gc=gc, Tm=Tm, Wi=Wi, Hs=Hs, Di=Di, scale=s, T=T, C=C, NT=NT,
               dtype=q.dtype, native=sixteen, prec=prec, has_init=initial_state is not None,
               init_dtype=None if initial_state is None else initial_state.dtype, pipeline="scalar-gate")
    return o, SF, ctx


def sg_chunk_bwd(do, ctx, dS_final=None):
    """Backward from the ctx of :func:`sg_chunk_fwd`: ``(dq, dk, dv, dg, dbeta, d_initial_state or None)``; dq, dk,
    dv in the inputs' dtype, dg and dbeta ``[B, T, H]`` in float32 (summed over d_k and d_v in float32 inside the
    kernel; the caller rounds them once to its gates' dtype)."""
    q, k, v, beta = ctx["q"], ctx["k"], ctx["v"], ctx["beta"]
    B, T, H, K = q.shape
    V = v.shape[-1]
    C, NT, s, prec, native = ctx["C"], ctx["NT"], ctx["scale"], ctx["prec"], ctx["native"]
    dev = q.device
    do = do.contiguous()
    f32 = dict(device=dev, dtype=torch.float32)
    dSn = torch.empty_like(ctx["Hs"])
    dd = torch.empty_like(ctx["Di"])
    dS0 = torch.empty(B, H, K, V, **f32)
    dSF = dS_final.float().contiguous() if dS_final is not None else dS0
    sg_dd_local_kernel[(NT, B * H)](q, k, ctx["gc"], do, dd, s, T, H, K=K, V=V, C=C, BV=_bv("sg_dd_local_kernel", V),
                                    NATIVE=native, PREC=prec, **_launch("sg_dd_local_kernel"))
    BVs = _scan_bv("sg_state_bwd_kernel", B * H, V)
    sg_state_bwd_kernel[(V // BVs, B * H)](q, k, ctx["gc"], ctx["Wi"], do, dSF, dSn, dd, dS0, s, T, H, NT=NT, K=K,
                                           V=V, C=C, BV=BVs, HAS_DSF=dS_final is not None, PREC=prec,
                                           **_launch("sg_state_bwd_kernel"))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dk_part = torch.empty_like(ctx["Wi"])
    dgc_part = torch.empty_like(ctx["gc"])
    sg_intra_out_bwd_kernel[(NT, B * H)](q, k, ctx["gc"], ctx["Hs"], ctx["Di"], dSn, do, dq, dk_part, dgc_part, s,
                                         T, H, K=K, V=V, C=C, BV=_bv("sg_intra_out_bwd_kernel", V), NATIVE=native,
                                         PREC=prec, **_launch("sg_intra_out_bwd_kernel"))
    dg = torch.empty(B, T, H, **f32)
    dbeta = torch.empty(B, T, H, **f32)
    sg_intra_wy_bwd_kernel[(NT, B * H)](k, v, beta, ctx["gc"], ctx["Tm"], ctx["Hs"], ctx["Di"], dd, dk_part, dgc_part,
                                        dk, dv, dg, dbeta, T, H, K=K, V=V, C=C, BV=_bv("sg_intra_wy_bwd_kernel", V),
                                        NATIVE=native, PREC=prec, **_launch("sg_intra_wy_bwd_kernel"))
    ctx["bwd_dSn"], ctx["bwd_ddelta"] = dSn, dd
    dinit = dS0.to(ctx["init_dtype"]) if ctx["has_init"] else None
    return dq, dk, dv, dg, dbeta, dinit
