"""Triton backward of the chunked WY form: the reverse-time state scan and the per-chunk WY / triangular VJP.

Per chunk n, with P_n = tril((q*Gamma)(k/Gamma)^T) and dS the gradient at the chunk's end state, the reverse scan is

    d delta_n = P_n^T dO_n + Kend_n dS,     dS <- Diag(Gamma_C) dS + (q*Gamma)_n^T dO_n - W_n^T d delta_n

(the last term with an erase gate only). Its first products do not depend on dS. The kernels:

1. ``state_bwd_local_kernel`` (grid B*H x N x V-blocks / NVL): the dS-independent products of every chunk at once,
   in float32: A_n = P_n^T dO_n ([C, V], into the d delta buffer) and B_n = (q*Gamma)_n^T dO_n ([K, V], into the
   slot of the state gradient it belongs to: dS_next of chunk n-1, or the initial-state gradient for chunk 0).
   It reads dO in the caller's [B, T, H, V] layout and dtype and also writes the float32 internal copy of it that
   the intra-chunk kernel reads; with KEND it writes Kend = k * exp(gamma_C - gamma) for the scan.
2. ``state_bwd_kernel`` (grid B*H x V-blocks): the sequential scan, dS [K, BV] in float32 registers, last chunk
   first. Per chunk it stores dS_C (the gradient at the chunk's end state) and d delta, and carries dS to the
   chunk's start; the final dS is the initial-state gradient. SPLIT (the default in its launch entry): only the
   dS-dependent products, d delta = A_n + Kend dS and dS <- Diag(Gamma_C) dS + B_n - W^T d delta, each a
   read-modify-write of the local kernel's output. SPLIT 0: the whole step in this kernel, P_n formed again in
   every V-block's program.
3. ``intra_bwd_kernel`` (grid B*H x N): everything that is local to one chunk, contracting over V one
   V-block at a time: dP = tril(dO delta^T), d(q*Gamma) = dO S^T, dKend = delta dS_C^T, the WY VJP dW = -d delta S^T,
   dT = dW X^T + d delta U^T, dX = T^T dW, dU = T^T d delta, the triangular-inverse VJP dA = -T^T dT T^T, and
   the factored pairwise products back to dq, dk, de and d gamma.
4. ``bwd_tail_kernel`` (grid B*H x N; ``fused_tail=True``, the default): the elementwise tail -- d gamma -> dg by a
   reverse cumulative sum inside each chunk, db = de * k, dk += de * b, dv = dU * w, dw = dU * v -- written
   straight into the caller's [B, T, H, D] layout and dtype, padding rows dropped. ``fused_tail=False`` does the
   same in torch (a reshape / flip / cumsum, the products and one strided cast-and-transpose copy per gradient).

T not a multiple of C: the padding rows of q, k, dO are zero and gamma stays constant through them, so they add
nothing to any product, and gamma_C is the last real row's. All products accumulate in float32; the scan kernels
run at the forward's dot precision (``ctx["prec"]``), the intra-chunk kernel at :func:`intra_precision`'s.
"""

import torch
import triton
import triton.language as tl

from .chunked import grad_dtype
from .fwd_options import KERNEL_PRECISIONS
from .triton_fwd import _dot, from_internal, to_internal

# The intra-chunk backward holds the most dot operands at once: compiled ahead of time for sm_90 with d_k = 128,
# chunk 64, it needs 262,144 B of shared memory with 3xTF32 dots (limit 232,448 B) and 200,704 B with TF32.
# So where the other stages use 3xTF32, this one falls back to TF32 (float32 accumulation either way), unless its
# launch entry names a precision (BWD_LAUNCH["intra_bwd_kernel"]["PREC"]: None follows this mapping; "tf32rn"
# rounds the operands to nearest before the single pass; "tf32x3" fits in shared memory only at 4 warps, 196,608 B
# with heavy spills -- experiments/gdn/intra_precision.py measures what each costs and buys).
INTRA_PRECISION = {"tf32x3": "tf32"}

# Launch configuration ("BV" an upper bound), from ahead-of-time compiles for sm_90a at d_k = 128, chunk 64,
# d_v in {64, 128} (experiments/gdn/triton_aot.py; docs/gdn.md §7). num_stages=1 is what makes these fit: with
# Triton's default num_stages=3, state_bwd_kernel at BV=64, 4 warps asks for 394,240 B of shared memory (IEEE
# dots) or 443,392 B (TF32) against the 232,448 B limit -- the OutOfResources experiments/native/bench.py hit when
# it launched the kernel directly without num_stages (410,624 B at this wrapper's BV=32, 3xTF32, 3 stages);
# through this wrapper it needs 131,072 B. 8 warps instead of 4 cut its spills by a third; no warp count / V-block
# removes them (the [C, K] float32 operand tiles of the chunk step do not fit the register file at once). Same
# V-blocks as before, so numerics are unchanged.
# SPLIT 1: the reverse scan split in two (state_bwd_local_kernel for the dS-independent products of every chunk at
# once, then state_bwd_kernel's SPLIT variant with only the dS-dependent ones); SPLIT 0 is the one-kernel scan
# (tuned at 8 warps, as above). KEND 1: the local kernel writes Kend for the scan. The scan's SPLIT variant holds the
# tiles of the forward's state scan (dS, Kend, W, d delta) and starts from that kernel's entry (BV 32, 4 warps); the
# local kernel from the output kernel's (BV 64, two V-blocks per program), which forms the same P, at 8 warps.
# Untimed: the warp counts are the fewest spills of the ahead-of-time compiles for sm_90a (d_k 128, chunk 64, d_v 128,
# 3xTF32): the scan 456 B/thread at 4 warps against 688 at 8; the local kernel 16 against 640-720 at 4 (BV 32 x 4
# V-blocks: 976-984). Shared memory: 32,768 B and 131,072 B of 232,448.
BWD_LAUNCH = {
    "state_bwd_local_kernel": dict(BV=64, NVL=2, num_warps=8, num_stages=1),
    "state_bwd_kernel": dict(BV=32, SPLIT=1, KEND=1, num_warps=4, num_stages=1),
    "intra_bwd_kernel": dict(BV=32, num_warps=8, num_stages=1, PREC=None),
    "bwd_tail_kernel": dict(num_warps=8, num_stages=1),
}


def intra_precision(dot_precision: str) -> str:
    """The tl.dot precision ``intra_bwd_kernel`` runs at under the forward's ``dot_precision``: its launch entry's
    PREC when set, else INTRA_PRECISION's fallback."""
    prec = BWD_LAUNCH["intra_bwd_kernel"].get("PREC") or INTRA_PRECISION.get(dot_precision, dot_precision)
    if prec not in KERNEL_PRECISIONS:
        raise ValueError(f"BWD_LAUNCH['intra_bwd_kernel']['PREC'] must be None or one of {KERNEL_PRECISIONS}, "
                         f"got {prec!r}")
    return prec


@triton.jit
def _load_rows_cols(x_ptr, sb, st, sh, b, h, t, tmask, cols):
    """Rows ``t``, columns ``cols`` of head (b, h) of a [B, T, H, D] tensor with strides (sb, st, sh, 1), as
    float32; rows past T read as 0."""
    x = tl.load(x_ptr + b * sb + t[:, None] * st + h * sh + cols[None, :], mask=tmask[:, None], other=0.0)
    return x.to(tl.float32)


@triton.jit
def state_bwd_local_kernel(q_ptr, k_ptr, gam_ptr, do_ptr, sd0, sd1, sd2, DOI_ptr, DD_ptr, DSN_ptr, DS0_ptr, KEND_ptr,
                           scale, T, H, K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr,
                           NVL: tl.constexpr, WRITE_KEND: tl.constexpr, PREC: tl.constexpr):
    # grid (B*H, chunks, V-blocks / NVL): the reverse scan's terms that do not depend on the carried dS, for every
    # chunk at once. dO is read in the caller's [B, T, H, V] layout (strides sd0, sd1, sd2; rows past T read as 0)
    # and also written as the float32 [B, H, T_pad, V] copy the intra-chunk kernel reads. Per V-block:
    #   DD[n]      <- P_n^T dO_n              (the output's share of d delta; the scan adds Kend_n dS)
    #   slot(n)    <- (q Gamma)_n^T dO_n      (the output's share of the state gradient dS_{n-1})
    # where slot(n) is DSN[n - 1] for n > 0 and DS0 for n = 0: the place the scan overwrites with the dS this
    # term belongs to, so each read-modify-write of the scan feeds its store from its own load.
    # WRITE_KEND: the V-block-0 program also writes Kend = k * exp(gamma_C - gamma) for the scan.
    bh = tl.program_id(0)
    n = tl.program_id(1)
    iv = tl.program_id(2)
    NT = tl.num_programs(1)
    TP = NT * C
    b = bh // H
    h = bh % H
    rows = tl.arange(0, C)
    ck = tl.arange(0, K)
    t = n * C + rows
    offk = (bh * TP + n * C) * K + rows[:, None] * K + ck[None, :]
    gam = tl.load(gam_ptr + offk)
    k = tl.load(k_ptr + offk)
    Qg = tl.load(q_ptr + offk) * scale * tl.exp(gam)
    Kg = k * tl.exp(-gam)
    P = _dot(Qg, tl.trans(Kg), PREC)
    P = tl.where(rows[:, None] >= rows[None, :], P, 0.0)
    if WRITE_KEND:
        if iv == 0:
            gamC = tl.load(gam_ptr + (bh * TP + n * C + C - 1) * K + ck)
            tl.store(KEND_ptr + offk, k * tl.exp(gamC[None, :] - gam))
    for j in tl.static_range(NVL):
        cv = (iv * NVL + j) * BV + tl.arange(0, BV)
        do = _load_rows_cols(do_ptr, sd0, sd1, sd2, b, h, t, t < T, cv)
        offv = (bh * TP + n * C) * V + rows[:, None] * V + cv[None, :]
        tl.store(DOI_ptr + offv, do)
        tl.store(DD_ptr + offv, _dot(tl.trans(P), do, PREC))
        Bn = _dot(tl.trans(Qg), do, PREC)
        offS = ck[:, None] * V + cv[None, :]
        if n == 0:
            tl.store(DS0_ptr + bh * K * V + offS, Bn)
        else:
            tl.store(DSN_ptr + (bh * NT + n - 1) * K * V + offS, Bn)


@triton.jit
def state_bwd_kernel(q_ptr, k_ptr, gam_ptr, W_ptr, DO_ptr, DSF_ptr, DSN_ptr, DD_ptr, DS0_ptr, KEND_ptr, scale,
                     NT: tl.constexpr, K: tl.constexpr, V: tl.constexpr, C: tl.constexpr,
                     BV: tl.constexpr, HAS_ERASE: tl.constexpr, HAS_DSF: tl.constexpr, PREC: tl.constexpr,
                     SPLIT: tl.constexpr = False, KEND_IN: tl.constexpr = False):
    # grid (B*H, V-blocks): the reverse scan, dS [K, BV] in float32 registers, the last chunk first.
    # SPLIT False: everything per chunk here, P = tril((q Gamma)(k / Gamma)^T) formed again in every V-block's
    #   program. SPLIT True: state_bwd_local_kernel has stored P^T dO in DD[n] and (q Gamma)^T dO in the slot the
    #   chunk's new dS goes to (DSN[n - 1], DS0 for the first chunk); only the dS-dependent products remain, and
    #   Kend is loaded (KEND_IN, written by the local kernel) or formed from k and gamma.
    bh = tl.program_id(0)
    TP = NT * C
    iv = tl.program_id(1)
    rows = tl.arange(0, C)
    ck = tl.arange(0, K)
    cv = iv * BV + tl.arange(0, BV)
    offS = bh * K * V + ck[:, None] * V + cv[None, :]
    if HAS_DSF:
        dS = tl.load(DSF_ptr + offS)
    else:
        dS = tl.zeros([K, BV], dtype=tl.float32)
    if SPLIT:
        tl.store(DSN_ptr + (bh * NT + NT - 1) * K * V + ck[:, None] * V + cv[None, :], dS)
        for i in range(NT):
            n = NT - 1 - i
            offk = (bh * TP + n * C) * K + rows[:, None] * K + ck[None, :]
            offv = (bh * TP + n * C) * V + rows[:, None] * V + cv[None, :]
            gamC = tl.load(gam_ptr + (bh * TP + n * C + C - 1) * K + ck)
            if KEND_IN:
                Kend = tl.load(KEND_ptr + offk)
            else:
                Kend = tl.load(k_ptr + offk) * tl.exp(gamC[None, :] - tl.load(gam_ptr + offk))
            dd = tl.load(DD_ptr + offv) + _dot(Kend, dS, PREC)
            tl.store(DD_ptr + offv, dd)
            if n == 0:
                offN = offS
                out_ptr = DS0_ptr
            else:
                offN = (bh * NT + n - 1) * K * V + ck[:, None] * V + cv[None, :]
                out_ptr = DSN_ptr
            dS = tl.exp(gamC)[:, None] * dS + tl.load(out_ptr + offN)
            if HAS_ERASE:
                dS = dS - _dot(tl.trans(tl.load(W_ptr + offk)), dd, PREC)
            tl.store(out_ptr + offN, dS)
    else:
        for i in range(NT):
            n = NT - 1 - i
            tl.store(DSN_ptr + (bh * NT + n) * K * V + ck[:, None] * V + cv[None, :], dS)
            offk = (bh * TP + n * C) * K + rows[:, None] * K + ck[None, :]
            offv = (bh * TP + n * C) * V + rows[:, None] * V + cv[None, :]
            gam = tl.load(gam_ptr + offk)
            k = tl.load(k_ptr + offk)
            Qg = tl.load(q_ptr + offk) * scale * tl.exp(gam)
            Kg = k * tl.exp(-gam)
            gamC = tl.load(gam_ptr + (bh * TP + n * C + C - 1) * K + ck)
            Kend = k * tl.exp(gamC[None, :] - gam)
            P = tl.dot(Qg, tl.trans(Kg), input_precision=PREC)
            P = tl.where(rows[:, None] >= rows[None, :], P, 0.0)
            do = tl.load(DO_ptr + offv)
            dd = tl.dot(tl.trans(P), do, input_precision=PREC) + tl.dot(Kend, dS, input_precision=PREC)
            tl.store(DD_ptr + offv, dd)
            dS = tl.exp(gamC)[:, None] * dS + tl.dot(tl.trans(Qg), do, input_precision=PREC)
            if HAS_ERASE:
                dS = dS - tl.dot(tl.trans(tl.load(W_ptr + offk)), dd, input_precision=PREC)
        tl.store(DS0_ptr + offS, dS)


@triton.jit
def intra_bwd_kernel(q_ptr, k_ptr, gam_ptr, e_ptr, u_ptr, T_ptr, H_ptr, D_ptr, DSN_ptr, DD_ptr, DO_ptr,
                     DQ_ptr, DK_ptr, DE_ptr, DU_ptr, DG_ptr, scale,
                     K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr, HAS_ERASE: tl.constexpr,
                     PREC: tl.constexpr):
    bh = tl.program_id(0)
    n = tl.program_id(1)
    NT = tl.num_programs(1)
    TP = NT * C
    rows = tl.arange(0, C)
    ck = tl.arange(0, K)
    offk = (bh * TP + n * C) * K + rows[:, None] * K + ck[None, :]
    gam = tl.load(gam_ptr + offk)
    k = tl.load(k_ptr + offk)
    Gam = tl.exp(gam)
    Qg = tl.load(q_ptr + offk) * scale * Gam
    Kg = k * tl.exp(-gam)
    gamC = tl.load(gam_ptr + (bh * TP + n * C + C - 1) * K + ck)
    expK = tl.exp(gamC[None, :] - gam)
    Kend = k * expK
    if HAS_ERASE:
        Tm = tl.load(T_ptr + (bh * NT + n) * C * C + rows[:, None] * C + rows[None, :])
        TmT = tl.trans(Tm)
    # contractions over V, accumulated one V-block at a time so the full-width tiles never sit in registers
    dP = tl.zeros([C, C], dtype=tl.float32)
    dQg = tl.zeros([C, K], dtype=tl.float32)
    dKend = tl.zeros([C, K], dtype=tl.float32)
    dW = tl.zeros([C, K], dtype=tl.float32)
    dTu = tl.zeros([C, C], dtype=tl.float32)
    dGC = tl.zeros([K], dtype=tl.float32)
    for iv in range(V // BV):
        cv = iv * BV + tl.arange(0, BV)
        offv = (bh * TP + n * C) * V + rows[:, None] * V + cv[None, :]
        offS = (bh * NT + n) * K * V + ck[:, None] * V + cv[None, :]
        S = tl.load(H_ptr + offS)
        dSn = tl.load(DSN_ptr + offS)
        d = tl.load(D_ptr + offv)
        dd = tl.load(DD_ptr + offv)
        do = tl.load(DO_ptr + offv)
        dP += _dot(do, tl.trans(d), PREC)
        dQg += _dot(do, tl.trans(S), PREC)
        dKend += _dot(d, tl.trans(dSn), PREC)
        dGC += tl.sum(S * dSn, 1)
        if HAS_ERASE:
            u = tl.load(u_ptr + offv)
            dW -= _dot(dd, tl.trans(S), PREC)
            dTu += _dot(dd, tl.trans(u), PREC)
            tl.store(DU_ptr + offv, _dot(TmT, dd, PREC))
        else:
            tl.store(DU_ptr + offv, dd)
    dP = tl.where(rows[:, None] >= rows[None, :], dP, 0.0)
    dQg += _dot(dP, Kg, PREC)
    dKg = _dot(tl.trans(dP), Qg, PREC)
    dgamC = tl.sum(dKend * Kend, 0) + dGC * tl.exp(gamC)
    dgam = dQg * Qg - dKend * Kend
    if HAS_ERASE:
        Xe = tl.load(e_ptr + offk) * Gam
        dT = _dot(dW, tl.trans(Xe), PREC) + dTu
        dXe = _dot(TmT, dW, PREC)
        dA = -_dot(_dot(TmT, dT, PREC), TmT, PREC)
        dA = tl.where(rows[:, None] > rows[None, :], dA, 0.0)
        dXe += _dot(dA, Kg, PREC)
        dKg += _dot(tl.trans(dA), Xe, PREC)
        dgam += dXe * Xe
        tl.store(DE_ptr + offk, dXe * Gam)
    dgam -= dKg * Kg
    dgam = tl.where(rows[:, None] == C - 1, dgam + dgamC[None, :], dgam)
    tl.store(DQ_ptr + offk, dQg * Gam * scale)
    tl.store(DK_ptr + offk, dKg * tl.exp(-gam) + dKend * expK)
    tl.store(DG_ptr + offk, dgam)


@triton.jit
def bwd_tail_kernel(dq_ptr, dk_ptr, dgam_ptr, de_ptr, k_ptr, b_ptr, du_ptr, w_ptr, v_ptr,
                    DQ_ptr, DK_ptr, DG_ptr, DB_ptr, DV_ptr, DW_ptr, T, H,
                    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, HAS_ERASE: tl.constexpr):
    # grid (B*H, chunks). In: the intra kernel's float32 [B,H,T_pad,*] gradients. Out: [B,T,H,*] in the
    # caller's dtype, padding rows dropped. d gamma -> dg is a reverse cumulative sum inside the chunk only,
    # because gamma is the chunk-local cumulative log-decay.
    bh = tl.program_id(0)
    n = tl.program_id(1)
    TP = tl.num_programs(1) * C
    bb = bh // H
    h = bh % H
    rows = tl.arange(0, C)
    ck = tl.arange(0, K)
    cv = tl.arange(0, V)
    t = n * C + rows
    live = (t < T)[:, None]
    offk = (bh * TP + n * C) * K + rows[:, None] * K + ck[None, :]
    outk = ((bb * T + t[:, None]) * H + h) * K + ck[None, :]
    dg = tl.cumsum(tl.load(dgam_ptr + offk), axis=0, reverse=True)
    tl.store(DG_ptr + outk, dg.to(DG_ptr.dtype.element_ty), mask=live)
    tl.store(DQ_ptr + outk, tl.load(dq_ptr + offk).to(DQ_ptr.dtype.element_ty), mask=live)
    dk = tl.load(dk_ptr + offk)
    if HAS_ERASE:
        de = tl.load(de_ptr + offk)
        tl.store(DB_ptr + outk, (de * tl.load(k_ptr + offk)).to(DB_ptr.dtype.element_ty), mask=live)
        dk += de * tl.load(b_ptr + offk)
    tl.store(DK_ptr + outk, dk.to(DK_ptr.dtype.element_ty), mask=live)
    offv = (bh * TP + n * C) * V + rows[:, None] * V + cv[None, :]
    outv = ((bb * T + t[:, None]) * H + h) * V + cv[None, :]
    du = tl.load(du_ptr + offv)
    tl.store(DV_ptr + outv, (du * tl.load(w_ptr + offv)).to(DV_ptr.dtype.element_ty), mask=live)
    tl.store(DW_ptr + outv, (du * tl.load(v_ptr + offv)).to(DW_ptr.dtype.element_ty), mask=live)


def _fused_tail(ctx, dq, dk, dgam, de, du):
    """The backward's tail in one launch of ``bwd_tail_kernel``: (dq, dk, dv, dg, db or None, dw)."""
    B, H, TP, K = dq.shape
    V, T, C = du.shape[-1], ctx["T"], ctx["C"]
    has_erase = de is not None
    dev = dq.device
    dQ, dK, dG = (torch.empty(B, T, H, K, device=dev, dtype=grad_dtype(ctx, n)) for n in ("dq", "dk", "dg"))
    dB = torch.empty(B, T, H, K, device=dev, dtype=grad_dtype(ctx, "db")) if has_erase else None
    dV, dW = (torch.empty(B, T, H, V, device=dev, dtype=grad_dtype(ctx, n)) for n in ("dv", "dw"))
    bwd_tail_kernel[(B * H, TP // C)](dq, dk, dgam, de if has_erase else dq, ctx["ki"],
                                      ctx["bi"] if has_erase else dq, du, ctx["wi"], ctx["vi"],
                                      dQ, dK, dG, dB if has_erase else dQ, dV, dW, T, H, K=K, V=V, C=C,
                                      HAS_ERASE=has_erase, **BWD_LAUNCH["bwd_tail_kernel"])
    return dQ, dK, dV, dG, dB, dW


def triton_chunk_bwd(do, ctx, dS_final=None, scan=None, fused_tail=True):
    """Backward on the Triton kernels from the ctx of :func:`triton_chunk_fwd`; same return as ``chunk_bwd``.

    The reverse state scan is ``state_bwd_local_kernel`` + ``state_bwd_kernel`` (SPLIT 1 in its launch entry) or
    ``state_bwd_kernel`` alone (SPLIT 0). ``scan`` replaces it: ``scan(doi, ctx, dS_final)`` returns
    (dS_next ``[B,H,N,K,V]``, d delta ``[B,H,T_pad,V]``, dS0 ``[B,H,K,V]``) in float32, e.g. the native K1
    (:func:`lethe.kernels.gdn.native.api.scan_for_triton_ctx`). ``fused_tail`` (the default) finishes in one
    Triton kernel (``bwd_tail_kernel``); False runs the torch tail instead: same arithmetic, the in-chunk reverse
    sum in another order."""
    qi, ki, gam = ctx["qi"], ctx["ki"], ctx["gam"]
    B, H, TP, K = qi.shape
    V = ctx["ui"].shape[-1]
    C, NT, T, s, prec = ctx["C"], ctx["NT"], ctx["T"], ctx["scale"], ctx["prec"]
    BV = min(V, BWD_LAUNCH["state_bwd_kernel"]["BV"])  # the reverse scan holds more tiles than the forward one
    BVi = min(V, BWD_LAUNCH["intra_bwd_kernel"]["BV"])
    launch = lambda name: {k: BWD_LAUNCH[name][k] for k in ("num_warps", "num_stages")}  # noqa: E731
    prec_intra = intra_precision(prec)
    has_erase = ctx["Tm"] is not None
    dSF = None if dS_final is None else dS_final.float().contiguous()
    if scan is not None:
        doi = to_internal(do, C)
        dSn, dd, dS0 = scan(doi, ctx, dSF)
    else:
        cfg = BWD_LAUNCH["state_bwd_kernel"]
        split = bool(cfg.get("SPLIT", 0))
        dSn = torch.empty_like(ctx["Hs"])
        dS0 = torch.empty(B, H, K, V, device=qi.device, dtype=torch.float32)
        W = ctx["Wi"] if has_erase else ki
        if split:
            kend = bool(cfg.get("KEND", 0))
            doi = torch.empty(B, H, TP, V, device=qi.device, dtype=torch.float32)
            dd = torch.empty_like(doi)
            Kend = torch.empty_like(ki) if kend else ki
            do_ = do if do.stride(-1) == 1 else do.contiguous()
            BVl = min(V, BWD_LAUNCH["state_bwd_local_kernel"]["BV"])
            NVL = max(1, min(BWD_LAUNCH["state_bwd_local_kernel"].get("NVL", 1), V // BVl))
            state_bwd_local_kernel[(B * H, NT, V // (BVl * NVL))](
                qi, ki, gam, do_, *do_.stride()[:3], doi, dd, dSn, dS0, Kend, s, T, H, K=K, V=V, C=C, BV=BVl,
                NVL=NVL, WRITE_KEND=kend, PREC=prec, **launch("state_bwd_local_kernel"))
        else:
            kend = False
            doi = to_internal(do, C)
            dd = torch.empty_like(doi)
            Kend = ki
        state_bwd_kernel[(B * H, V // BV)](qi, ki, gam, W, doi, dS0 if dSF is None else dSF, dSn, dd, dS0, Kend, s,
                                           NT=NT, K=K, V=V, C=C, BV=BV, HAS_ERASE=has_erase,
                                           HAS_DSF=dSF is not None, PREC=prec, SPLIT=split, KEND_IN=kend,
                                           **launch("state_bwd_kernel"))
    dq, dk, dgam = torch.empty_like(qi), torch.empty_like(qi), torch.empty_like(qi)
    de = torch.empty_like(qi) if has_erase else None
    du = torch.empty_like(doi)
    e = ctx["ei"] if has_erase else ki
    Tm = ctx["Tm"] if has_erase else ki
    intra_bwd_kernel[(B * H, NT)](qi, ki, gam, e, ctx["ui"], Tm, ctx["Hs"], ctx["Di"], dSn, dd, doi,
                                  dq, dk, de if has_erase else dq, du, dgam, s, K=K, V=V, C=C, BV=BVi,
                                  HAS_ERASE=has_erase, PREC=prec_intra, **launch("intra_bwd_kernel"))
    ctx["bwd_intra_precision"] = prec_intra
    ctx["bwd_dSn"], ctx["bwd_ddelta"] = dSn, dd  # kept for the ladder's per-stage rung
    dinit = dS0.to(ctx["init_dtype"]) if ctx["has_init"] else None
    if fused_tail:
        return (*_fused_tail(ctx, dq, dk, dgam, de, du), dinit)
    dg = dgam.reshape(B, H, NT, C, K).flip(-2).cumsum(-2).flip(-2).reshape(B, H, TP, K)
    if has_erase:
        db = de * ki
        dk = dk + de * ctx["bi"]
    else:
        db = None
    dv, dw = du * ctx["wi"], du * ctx["vi"]
    out = [from_internal(x, T, grad_dtype(ctx, n)) for n, x in zip(("dq", "dk", "dv", "dg"), (dq, dk, dv, dg),
                                                                    strict=True)]
    out.append(None if db is None else from_internal(db, T, grad_dtype(ctx, "db")))
    out.append(from_internal(dw, T, grad_dtype(ctx, "dw")))
    out.append(dinit)
    return tuple(out)
