"""Triton forward of the chunked WY form: an input kernel, then three kernels, one per stage of
:mod:`lethe.kernels.gdn.chunked`.

0. ``prep_fwd_kernel`` (grid B*H x N): the inputs in the internal layout, gamma = the chunk-local cumulative
   log-decay, u = w*v and e = b*k, in one pass.
1. the WY step: A = strict_tril((e*Gamma)(k/Gamma)^T), its unit-lower-triangular inverse T = (I + A)^{-1} by
   row-wise forward substitution, then W = T (e*Gamma) and U~ = T (w*v). By default in three kernels
   (``wy_a_kernel``, ``wy_inverse_kernel`` in place, ``wy_apply_kernel``); ``wy_inverse`` selects the one-kernel
   ``wy_fwd_kernel`` ("rows") or ``wy_fwd_blocked_kernel`` instead.
2. ``state_fwd_kernel`` (grid B*H x V-blocks): the sequential inter-chunk pass in float32: per chunk store S_n,
   delta = U~ - W S_n, S <- Diag(Gamma_C) S + Kend^T delta.
3. ``output_fwd_kernel`` (grid B*H x N x V-blocks / NVL): o = (q*Gamma) S_n + tril((q*Gamma)(k/Gamma)^T) delta.

Conventions: all internal tensors are float32 in a ``[B, H, T_pad, D]`` layout. The pairwise decay exp(gamma_t - gamma_s) is factored
as exp(gamma_t) * exp(-gamma_s) with gamma anchored at the chunk start, which is exact in real arithmetic but
overflows float32 once a chunk's cumulative log-decay drops below about -80; the wrapper refuses such inputs
rather than return inf/nan (use smaller chunks or the torch backend for extreme gates).

Loop bounds are ``tl.constexpr`` under ``TRITON_INTERPRET=1`` so the kernels also run on the CPU interpreter
(pitfall: runtime loop bounds fail there). Only the two scan kernels take the chunk count as a constant
(one compile per sequence length); the others read it from their grid. K and V must be powers
of two >= 16 (tl.dot tile minimum). Interpreter mode is trustworthy in float32 only.
"""

import contextlib

import torch
import triton
import triton.language as tl

from .fwd_options import (
    DOT_PRECISIONS,
    OUTPUT_PRECISION_DEFAULT,
    WY_INVERSE_DEFAULT,
    WY_INVERSES,
    resolve_output_precision,
    resolve_precision,
)

GAMMA_FLOOR = -80.0

# Launch configuration per kernel ("BV" is an upper bound: min(V, BV) is used). Chosen from ahead-of-time compiles
# for sm_90a at d_k = 128, chunk 64, d_v in {64, 128} (experiments/gdn/triton_aot.py; results/gdn/triton_aot.json):
# with num_stages=1 every kernel fits the H200's 232,448 B of shared memory per block. Pass it explicitly: Triton's
# default of 3 software-pipelines the chunk loops and multiplies the shared memory (the backward's state_bwd_kernel
# asks for 394,240-443,392 B with it). Within that, the warp count / V-block was picked for the fewest register spills. The
# interpreter ignores num_warps, and for V <= 32 the V-blocks are what they were before: CPU numerics unchanged.
FWD_LAUNCH = {
    "prep_fwd_kernel": dict(num_warps=4, num_stages=1),  # not tuned (memory-bound copy)
    "wy_fwd_kernel": dict(num_warps=8, num_stages=1),
    "wy_fwd_blocked_kernel": dict(num_warps=4, num_stages=1),  # slower than the row kernel on the H200 (docs/native.md)
    # wy_inverse="split" (the default), timed on the H200 (d_v 128, T 4k, 2^20 head-tokens; results/gdn/launch_sweep):
    # A 0.65 ms at 4 warps (0.96 at 8; 64 B of spills at 4), the inverse 1.13 ms at 2 warps (6.62 at 8, 2.36 at 4;
    # 136 registers, no spills), the products 1.87 ms at 4 warps (2.37 at 8)
    # PREC (here and in state_fwd_kernel): the kernel's own tl.dot precision (fwd_options.LAUNCH_PRECISIONS; None:
    # the forward's dot_precision; "auto": "tf32rn" for bf16/fp16 inputs under the default dot_precision, float32-
    # grade otherwise). Why "auto" in A, W/U and the state scan: at the state kernel's entry.
    "wy_a_kernel": dict(num_warps=4, num_stages=1, PREC="auto"),
    "wy_inverse_kernel": dict(num_warps=2, num_stages=1),
    "wy_apply_kernel": dict(num_warps=4, num_stages=1, PREC="auto"),
    # KEND 1: Kend precomputed by the prep kernel (state_fwd_kernel's KEND_IN). On the H200 (2^20 head-tokens,
    # results/gdn/launch_sweep/state_kend) 2.79 vs 3.42 ms at d_v 128 T 4k, 3.59 vs 4.20 at T 32k, 3.62 vs
    # 4.45 at d_v 64 T 32k. BV stays 32: 64 wins at T 4k (2.64) but loses at T 32k (5.96), where a sequential scan
    # needs the programs. Not bitwise the KEND 0 kernel's on the GPU (an FMA contraction there, see state_fwd_kernel;
    # bitwise on the interpreter): adopted on the ladders run with it (docs/native.md).
    # PREC "auto" here and in A and W/U (ninth build): the CPU replay kept each within the pin on all 14 bf16 arms
    # by its bound (results/gdn/fwd_error_sources.json); on the H200 the Triton ladder with all three at "tf32rn"
    # passed every bf16/fp16 arm (28/28, worst 4.84e-3 as before) but not the float32 tile rung (the WY inverse of
    # a float32 tile 9.4e-5 against its 1e-5 pin), hence 16-bit inputs only; the ladders at the adopting commit
    # (results/gdn/ladder.json, ladder_hybrid_tc.json) ran it as the default. Timings: paper/tables/native_profile.md, results/gdn/launch_sweep/.
    "state_fwd_kernel": dict(BV=32, KEND=1, num_warps=4, num_stages=1, PREC="auto"),
    # 4 warps: 3.41 vs 3.66 ms at 8 on the H200 (d_v 128, T 4k, 2^20 head-tokens), results bitwise the same
    # (experiments/gdn/triton_launch_sweep.py, results/gdn/launch_sweep)
    # NVL: V-blocks per program sharing one P = tril(Qg Kg^T): 2 takes 3.13 ms against 3.42 at d_v 128 (at d_v 64
    # there is one V-block: unchanged), outputs and gradients bitwise the same (results/gdn/launch_sweep/output_nvl)
    # DIRECT 1: o written in the caller's layout and dtype by the kernel instead of a float32 buffer that torch casts
    # and transposes (the forward profile's 0.38 ms copy at d_v 128, 2^20 head-tokens). On the H200 (96cb289,
    # results/gdn/launch_sweep/output_direct): outputs and gradients bitwise the DIRECT 0 run's (the conversion
    # rounds to nearest either way), fwd+bwd pass 46.26 vs 46.90 ms at d_v 128 T 4k.
    "output_fwd_kernel": dict(BV=64, NVL=2, DIRECT=1, num_warps=4, num_stages=1),
}


def _prec(name: str, dot_precision: str, sixteen_bit_inputs: bool) -> str:
    """The tl.dot precision ``name`` runs at for these inputs: its launch entry's PREC resolved
    (fwd_options.resolve_precision; no PREC: the forward's dot_precision)."""
    try:
        return resolve_precision(FWD_LAUNCH[name].get("PREC"), dot_precision, sixteen_bit_inputs)
    except ValueError as exc:
        raise ValueError(f"FWD_LAUNCH[{name!r}]['PREC']: {exc}") from None


def _launch(name: str) -> dict:
    """num_warps / num_stages of ``name`` (the keyword arguments a launch passes besides the kernel's own)."""
    cfg = FWD_LAUNCH[name]
    return {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}


@triton.jit
def _unit_lower_inverse(A, BT: tl.constexpr):
    """(I + A)^{-1} of a strictly lower BT x BT tile by forward substitution: row i of T = e_i - sum_{j<i} A_ij T_j
    (rows j < i are already final)."""
    rows = tl.arange(0, BT)
    cols = tl.arange(0, BT)
    Tm = tl.where(rows[:, None] == cols[None, :], 1.0, 0.0)
    for i in range(1, BT):
        a_i = tl.sum(tl.where(rows[:, None] == i, A, 0.0), 0)  # row i of A, indexed by column j
        t_i = tl.where(cols == i, 1.0, 0.0) - tl.sum(a_i[:, None] * Tm, 0)
        Tm = tl.where(rows[:, None] == i, t_i[None, :], Tm)
    return Tm


@triton.jit
def _tf32_nearest(x):
    """``x`` rounded to TF32 (10 mantissa bits) to nearest, ties away from zero, as cvt.rna.tf32.f32 does. A
    single-pass TF32 product reads float32 operands by dropping the 13 low bits, a biased truncation: on the
    ladder's inputs rounding first cuts the error it adds to o about threefold (experiments/gdn/fwd_error_sources
    .py). Infinities and NaNs (exponent all ones) pass unchanged: adding to a NaN's payload could carry into the
    sign bit."""
    bits = x.to(tl.int32, bitcast=True)
    rounded = ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)
    return tl.where((bits & 0x7F800000) == 0x7F800000, x, rounded)


@triton.jit
def _dot(a, b, PREC: tl.constexpr):
    # "tf32rn": single-pass TF32 on operands rounded to nearest first; any other PREC is tl.dot's own (the same
    # code as a plain tl.dot call)
    if PREC == "tf32rn":
        return tl.dot(_tf32_nearest(a), _tf32_nearest(b), input_precision="tf32")
    else:
        return tl.dot(a, b, input_precision=PREC)


@triton.jit
def _rn(x, PREC: tl.constexpr):
    """``x`` as a TF32 product reads it under ``PREC``: rounded to nearest once for "tf32rn" (so a tile that feeds
    several products, or an operand stored for later kernels, is rounded once), unchanged otherwise."""
    if PREC == "tf32rn":
        return _tf32_nearest(x)
    else:
        return x


@triton.jit
def _mm(a, b, PREC: tl.constexpr):
    """tl.dot on operands already prepared by :func:`_rn` (or exact in TF32: bf16 / fp16 input tiles, whose 8 / 11
    significant bits fit TF32's 11): with "tf32rn" a single TF32 pass, otherwise ``PREC`` itself. The same result,
    bit for bit, as ``_dot`` on the unrounded operands, since rounding a TF32 value again changes nothing."""
    if PREC == "tf32rn":
        return tl.dot(a, b, input_precision="tf32")
    else:
        return tl.dot(a, b, input_precision=PREC)


@triton.jit
def _raw_dot(a, b, NATIVE: tl.constexpr, PREC: tl.constexpr):
    # a product of two input tiles: for 16-bit inputs the tensor core's own (products exact in float32, float32
    # accumulation); for float32 inputs at the float32 precision
    if NATIVE:
        return tl.dot(a, b)
    else:
        return _dot(a, b, PREC)


@triton.jit
def _tile(ptr, b, h, t, tmask, cols, T, H, D: tl.constexpr):
    """Rows ``t``, columns ``cols`` of head (b, h) of a contiguous [B, T, H, D] tensor in its own dtype; rows past
    T read as 0."""
    return tl.load(ptr + ((b * T + t[:, None]) * H + h) * D + cols[None, :], mask=tmask[:, None], other=0.0)


@triton.jit
def _decay_pairs(gc, r, STRICT: tl.constexpr):
    """exp(gc_t - gc_s) on s < t (STRICT) or s <= t, 0 elsewhere, for one decay per step (the scalar-gate path).
    The exponent is masked before exp: above the diagonal it would be positive and could overflow."""
    if STRICT:
        keep = r[:, None] > r[None, :]
    else:
        keep = r[:, None] >= r[None, :]
    return tl.where(keep, tl.exp(tl.where(keep, gc[:, None] - gc[None, :], 0.0)), 0.0)


@triton.jit
def wy_fwd_kernel(k_ptr, e_ptr, u_ptr, gam_ptr, T_ptr, W_ptr, U_ptr,
                  K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, PREC: tl.constexpr):
    bh = tl.program_id(0)
    n = tl.program_id(1)
    NT = tl.num_programs(1)
    TP = NT * C
    rows = tl.arange(0, C)
    cols = tl.arange(0, C)
    ck = tl.arange(0, K)
    cv = tl.arange(0, V)
    base_k = (bh * TP + n * C) * K
    base_v = (bh * TP + n * C) * V
    offk = base_k + rows[:, None] * K + ck[None, :]
    offv = base_v + rows[:, None] * V + cv[None, :]
    k = tl.load(k_ptr + offk)
    e = tl.load(e_ptr + offk)
    gam = tl.load(gam_ptr + offk)
    u = tl.load(u_ptr + offv)
    Xe = e * tl.exp(gam)
    Kg = k * tl.exp(-gam)
    A = tl.dot(Xe, tl.trans(Kg), input_precision=PREC)
    A = tl.where(rows[:, None] > cols[None, :], A, 0.0)
    Tm = _unit_lower_inverse(A, C)
    tl.store(T_ptr + (bh * NT + n) * C * C + rows[:, None] * C + cols[None, :], Tm)
    tl.store(W_ptr + offk, tl.dot(Tm, Xe, input_precision=PREC))
    tl.store(U_ptr + offv, tl.dot(Tm, u, input_precision=PREC))


@triton.jit
def wy_a_kernel(k_ptr, e_ptr, gam_ptr, T_ptr, K: tl.constexpr, C: tl.constexpr, PREC: tl.constexpr):
    # A = strict_tril((e Gamma)(k / Gamma)^T) of one chunk, written where T will be (wy_inverse_kernel inverts it
    # in place). wy_fwd_kernel split in three (triton_chunk_fwd(wy_inverse="split")): the 63-step substitution is
    # a chain of dependent reductions, latency-bound; on its own it needs no product operand tiles (the row
    # kernel's 255 registers go to those), so more chunks can share an SM and hide each other's latency.
    # A is formed as in wy_fwd_kernel, written out rather than shared through a helper: moving the row kernel's
    # loads into one changes its sm_90a code (spills 320 -> 272 B at d_v 64), and that kernel is the measured one.
    bh = tl.program_id(0)
    n = tl.program_id(1)
    NT = tl.num_programs(1)
    rows = tl.arange(0, C)
    ck = tl.arange(0, K)
    offk = (bh * NT * C + n * C) * K + rows[:, None] * K + ck[None, :]
    gam = tl.load(gam_ptr + offk)
    Xe = tl.load(e_ptr + offk) * tl.exp(gam)
    Kg = tl.load(k_ptr + offk) * tl.exp(-gam)
    A = _dot(Xe, tl.trans(Kg), PREC)
    tl.store(T_ptr + (bh * NT + n) * C * C + rows[:, None] * C + rows[None, :],
             tl.where(rows[:, None] > rows[None, :], A, 0.0))


@triton.jit
def wy_inverse_kernel(T_ptr, C: tl.constexpr):
    # T = (I + A)^{-1} in place, A as wy_a_kernel stored it: the row kernel's substitution, except that row i of A
    # is read from memory (an independent load the compiler can issue early) instead of cut out of the register
    # tile by a cross-thread reduction, leaving one reduction per step on the dependent chain instead of two. The
    # extracted row was a sum of one value and zeros, so the arithmetic is the same bit for bit.
    base = tl.program_id(0) * C * C
    rows = tl.arange(0, C)
    cols = tl.arange(0, C)
    Tm = tl.where(rows[:, None] == cols[None, :], 1.0, 0.0)
    for i in range(1, C):
        a_i = tl.load(T_ptr + base + i * C + cols)  # row i of A, indexed by column j (zero from column i on)
        t_i = tl.where(cols == i, 1.0, 0.0) - tl.sum(a_i[:, None] * Tm, 0)
        Tm = tl.where(rows[:, None] == i, t_i[None, :], Tm)
    # every row of A was read before the last step's reduction, which every thread waits for: no overlap
    tl.store(T_ptr + base + rows[:, None] * C + cols[None, :], Tm)


@triton.jit
def wy_apply_kernel(e_ptr, u_ptr, gam_ptr, T_ptr, W_ptr, U_ptr,
                    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, PREC: tl.constexpr):
    # wy_fwd_kernel's second half: W = T (e Gamma), U = T u from the stored T.
    bh = tl.program_id(0)
    n = tl.program_id(1)
    NT = tl.num_programs(1)
    rows = tl.arange(0, C)
    ck = tl.arange(0, K)
    cv = tl.arange(0, V)
    offk = (bh * NT * C + n * C) * K + rows[:, None] * K + ck[None, :]
    offv = (bh * NT * C + n * C) * V + rows[:, None] * V + cv[None, :]
    Tm = tl.load(T_ptr + (bh * NT + n) * C * C + rows[:, None] * C + rows[None, :])
    Xe = tl.load(e_ptr + offk) * tl.exp(tl.load(gam_ptr + offk))
    tl.store(W_ptr + offk, _dot(Tm, Xe, PREC))
    tl.store(U_ptr + offv, _dot(Tm, tl.load(u_ptr + offv), PREC))


@triton.jit
def _xg(k_ptr, e_ptr, gam_ptr, row0, K: tl.constexpr, BT: tl.constexpr):
    """BT chunk rows from ``row0``: (e Gamma, k / Gamma)."""
    offk = (row0 + tl.arange(0, BT))[:, None] * K + tl.arange(0, K)[None, :]
    gam = tl.load(gam_ptr + offk)
    return tl.load(e_ptr + offk) * tl.exp(gam), tl.load(k_ptr + offk) * tl.exp(-gam)


@triton.jit
def _a_block(k_ptr, e_ptr, gam_ptr, rowi, rowj, K: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr):
    """A_ij = (e Gamma)_i (k / Gamma)_j^T, a BT x BT block of the chunk's A (unmasked)."""
    Xi, _ = _xg(k_ptr, e_ptr, gam_ptr, rowi, K, BT)
    _, Gj = _xg(k_ptr, e_ptr, gam_ptr, rowj, K, BT)
    return tl.dot(Xi, tl.trans(Gj), input_precision=PREC)


@triton.jit
def _apply_row(k_ptr, e_ptr, u_ptr, gam_ptr, W_ptr, U_ptr, base, bi: tl.constexpr, t0, t1, t2, t3,
               K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr):
    """Block row ``bi`` of W = T (e Gamma) and U = T u from T's blocks t0..t3 of that row (blocks right of the
    diagonal are zero and skipped), stored at once so only one block row is live."""
    r = tl.arange(0, BT)
    cv = tl.arange(0, V)
    X, _ = _xg(k_ptr, e_ptr, gam_ptr, base, K, BT)
    W = tl.dot(t0, X, input_precision=PREC)
    U = tl.dot(t0, tl.load(u_ptr + (base + r)[:, None] * V + cv[None, :]), input_precision=PREC)
    if bi >= 1:
        X, _ = _xg(k_ptr, e_ptr, gam_ptr, base + BT, K, BT)
        W += tl.dot(t1, X, input_precision=PREC)
        U += tl.dot(t1, tl.load(u_ptr + (base + BT + r)[:, None] * V + cv[None, :]), input_precision=PREC)
    if bi >= 2:
        X, _ = _xg(k_ptr, e_ptr, gam_ptr, base + 2 * BT, K, BT)
        W += tl.dot(t2, X, input_precision=PREC)
        U += tl.dot(t2, tl.load(u_ptr + (base + 2 * BT + r)[:, None] * V + cv[None, :]), input_precision=PREC)
    if bi >= 3:
        X, _ = _xg(k_ptr, e_ptr, gam_ptr, base + 3 * BT, K, BT)
        W += tl.dot(t3, X, input_precision=PREC)
        U += tl.dot(t3, tl.load(u_ptr + (base + 3 * BT + r)[:, None] * V + cv[None, :]), input_precision=PREC)
    rows = base + bi * BT + r
    tl.store(W_ptr + rows[:, None] * K + tl.arange(0, K)[None, :], W)
    tl.store(U_ptr + rows[:, None] * V + cv[None, :], U)


@triton.jit
def _store_row(ptr, b0, b1, b2, b3, BT: tl.constexpr):
    """One block row of T: four BT x BT blocks side by side from ``ptr`` (a [BT, BT] pointer tile)."""
    tl.store(ptr, b0)
    tl.store(ptr + BT, b1)
    tl.store(ptr + 2 * BT, b2)
    tl.store(ptr + 3 * BT, b3)


@triton.jit
def wy_fwd_blocked_kernel(k_ptr, e_ptr, u_ptr, gam_ptr, T_ptr, W_ptr, U_ptr,
                          K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, PREC: tl.constexpr):
    # wy_fwd_kernel's T, W, U with the inverse taken blockwise: four diagonal blocks of C/4 rows by forward
    # substitution (C/4 - 1 steps each instead of C - 1 on the whole tile), the blocks below the diagonal from
    # T_ij = -D_i sum_{j<=k<i} A_ik T_kj, all as dots; operand rows are re-read where needed so that only small
    # blocks stay live. Opt-in (triton_chunk_fwd(wy_inverse="blocked")): written after the H200 time was spent,
    # checked on the CPU interpreter and compiled for sm_90a, speed not measured.
    bh = tl.program_id(0)
    n = tl.program_id(1)
    NT = tl.num_programs(1)
    BT: tl.constexpr = C // 4
    r = tl.arange(0, BT)
    base = bh * NT * C + n * C
    strict = r[:, None] > r[None, :]
    D0 = _unit_lower_inverse(tl.where(strict, _a_block(k_ptr, e_ptr, gam_ptr, base, base, K, BT, PREC), 0.0), BT)
    D1 = _unit_lower_inverse(tl.where(strict, _a_block(k_ptr, e_ptr, gam_ptr, base + BT, base + BT, K, BT, PREC),
                                      0.0), BT)
    D2 = _unit_lower_inverse(tl.where(strict, _a_block(k_ptr, e_ptr, gam_ptr, base + 2 * BT, base + 2 * BT, K, BT,
                                                       PREC), 0.0), BT)
    D3 = _unit_lower_inverse(tl.where(strict, _a_block(k_ptr, e_ptr, gam_ptr, base + 3 * BT, base + 3 * BT, K, BT,
                                                       PREC), 0.0), BT)
    A10 = _a_block(k_ptr, e_ptr, gam_ptr, base + BT, base, K, BT, PREC)
    A20 = _a_block(k_ptr, e_ptr, gam_ptr, base + 2 * BT, base, K, BT, PREC)
    A21 = _a_block(k_ptr, e_ptr, gam_ptr, base + 2 * BT, base + BT, K, BT, PREC)
    A30 = _a_block(k_ptr, e_ptr, gam_ptr, base + 3 * BT, base, K, BT, PREC)
    A31 = _a_block(k_ptr, e_ptr, gam_ptr, base + 3 * BT, base + BT, K, BT, PREC)
    A32 = _a_block(k_ptr, e_ptr, gam_ptr, base + 3 * BT, base + 2 * BT, K, BT, PREC)
    T10 = -tl.dot(D1, tl.dot(A10, D0, input_precision=PREC), input_precision=PREC)
    T21 = -tl.dot(D2, tl.dot(A21, D1, input_precision=PREC), input_precision=PREC)
    T32 = -tl.dot(D3, tl.dot(A32, D2, input_precision=PREC), input_precision=PREC)
    T20 = -tl.dot(D2, tl.dot(A20, D0, input_precision=PREC) + tl.dot(A21, T10, input_precision=PREC),
                  input_precision=PREC)
    T31 = -tl.dot(D3, tl.dot(A31, D1, input_precision=PREC) + tl.dot(A32, T21, input_precision=PREC),
                  input_precision=PREC)
    T30 = -tl.dot(D3, tl.dot(A30, D0, input_precision=PREC) + tl.dot(A31, T10, input_precision=PREC)
                  + tl.dot(A32, T20, input_precision=PREC), input_precision=PREC)
    zero = tl.zeros([BT, BT], dtype=tl.float32)
    offT = (bh * NT + n) * C * C + r[:, None] * C + r[None, :]
    _store_row(T_ptr + offT, D0, zero, zero, zero, BT)
    _store_row(T_ptr + offT + BT * C, T10, D1, zero, zero, BT)
    _store_row(T_ptr + offT + 2 * BT * C, T20, T21, D2, zero, BT)
    _store_row(T_ptr + offT + 3 * BT * C, T30, T31, T32, D3, BT)
    _apply_row(k_ptr, e_ptr, u_ptr, gam_ptr, W_ptr, U_ptr, base, 0, D0, zero, zero, zero, K, V, BT, PREC)
    _apply_row(k_ptr, e_ptr, u_ptr, gam_ptr, W_ptr, U_ptr, base, 1, T10, D1, zero, zero, K, V, BT, PREC)
    _apply_row(k_ptr, e_ptr, u_ptr, gam_ptr, W_ptr, U_ptr, base, 2, T20, T21, D2, zero, K, V, BT, PREC)
    _apply_row(k_ptr, e_ptr, u_ptr, gam_ptr, W_ptr, U_ptr, base, 3, T30, T31, T32, D3, K, V, BT, PREC)


@triton.jit
def state_fwd_kernel(k_ptr, gam_ptr, W_ptr, U_ptr, S0_ptr, H_ptr, D_ptr, SF_ptr, kend_ptr, T, H, NT: tl.constexpr,
                     K: tl.constexpr, V: tl.constexpr, C: tl.constexpr,
                     BV: tl.constexpr, HAS_ERASE: tl.constexpr, HAS_INIT: tl.constexpr, PREC: tl.constexpr,
                     KEND_IN: tl.constexpr, SCALAR_GATE: tl.constexpr = False):
    # KEND_IN: Kend = k * exp(gamma_C - gamma) comes precomputed (prep_fwd_kernel, WRITE_KEND) instead of being
    # rebuilt here: the chunk loop is sequential and every V-block's program repeats it, so this takes one [C, K]
    # load and C*K exponentials per step off the chain. The same values bit for bit on the interpreter, not on the
    # GPU: computed here, k * exp(..) is contracted into the 3xTF32 split's low part (an FMA on the unrounded
    # product), while a loaded Kend is the float32-rounded value (results/gdn/launch_sweep/state_kend/
    # WHY_NOT_BITWISE.md); o then differs by one bf16 step in places, so the choice rested on the ladders.
    # SCALAR_GATE: the scalar-gate path's scan (kernels/gdn/scalar_gate.py; grid V-blocks x B*H, HAS_ERASE, no
    # KEND_IN). gam is then gc [B*H, T_pad], one decay per head and step, and k the caller's [B, T, H, K] tensor
    # (T, H its sizes) in its own dtype. A scalar decay moves from Kend's columns onto delta's rows,
    # S <- exp(gc_C) S + k^T (exp(gc_C - gc) delta), so k enters as it is; W arrives TF32-rounded under "tf32rn",
    # so only S is rounded for W S_n (_mm / _rn). T and H are unused otherwise. Each variant keeps its own offset
    # expressions (see output_fwd_kernel).
    if SCALAR_GATE:
        iv = tl.program_id(0)
        bh = tl.program_id(1)
        b = bh // H
        h = bh % H
    else:
        bh = tl.program_id(0)
        iv = tl.program_id(1)
    TP = NT * C
    rows = tl.arange(0, C)
    ck = tl.arange(0, K)
    cv = iv * BV + tl.arange(0, BV)
    offS = bh * K * V + ck[:, None] * V + cv[None, :]
    if HAS_INIT:
        S = tl.load(S0_ptr + offS)
    else:
        S = tl.zeros([K, BV], dtype=tl.float32)
    for n in range(NT):
        tl.store(H_ptr + (bh * NT + n) * K * V + ck[:, None] * V + cv[None, :], S)
        if SCALAR_GATE:
            t = n * C + rows
            row = bh * TP + n * C + rows
            offv = row[:, None] * V + cv[None, :]
        else:
            offk = (bh * TP + n * C) * K + rows[:, None] * K + ck[None, :]
            offv = (bh * TP + n * C) * V + rows[:, None] * V + cv[None, :]
        d = tl.load(U_ptr + offv)
        if HAS_ERASE:
            if SCALAR_GATE:
                d = d - _mm(tl.load(W_ptr + row[:, None] * K + ck[None, :]), _rn(S, PREC), PREC)
            else:
                d = d - _dot(tl.load(W_ptr + offk), S, PREC)
        tl.store(D_ptr + offv, d)
        if SCALAR_GATE:
            gc = tl.load(gam_ptr + row)
            gcC = tl.load(gam_ptr + bh * TP + n * C + C - 1)
            k = _tile(k_ptr, b, h, t, t < T, ck, T, H, K).to(tl.float32)
            S = tl.exp(gcC) * S + _mm(tl.trans(k), _rn(d * tl.exp(gcC - gc)[:, None], PREC), PREC)
        else:
            if KEND_IN:
                gamC = tl.load(gam_ptr + (bh * TP + n * C + C - 1) * K + ck)
                Kend = tl.load(kend_ptr + offk)
            else:
                k = tl.load(k_ptr + offk)
                gam = tl.load(gam_ptr + offk)
                gamC = tl.load(gam_ptr + (bh * TP + n * C + C - 1) * K + ck)
                Kend = k * tl.exp(gamC[None, :] - gam)
            S = tl.exp(gamC)[:, None] * S + _dot(tl.trans(Kend), d, PREC)
    tl.store(SF_ptr + offS, S)


@triton.jit
def output_fwd_kernel(q_ptr, k_ptr, gam_ptr, H_ptr, D_ptr, O_ptr, scale, T, H,
                      K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr, NVL: tl.constexpr,
                      PREC: tl.constexpr, DIRECT: tl.constexpr, SCALAR_GATE: tl.constexpr = False,
                      NATIVE: tl.constexpr = False):
    """Grid B*H x N x V/(BV*NVL). Each program forms Qg and the masked P = tril(Qg Kg^T) once and then serves NVL
    V-blocks of BV columns in turn: with NVL > 1 the [C, K] loads and the P product are shared by the V-blocks
    instead of repeated per program; every output element is computed by the same operations either way.
    DIRECT: o goes straight into the caller's [B, T, H, V] tensor in its dtype (rows past T dropped) instead of a
    float32 [B, H, T_pad, V] buffer that torch then casts and transposes in a kernel of its own.
    SCALAR_GATE: the scalar-gate path's output (kernels/gdn/scalar_gate.py; grid N x B*H, one program for all
    V / BV = NVL V-blocks, DIRECT). q and k are the caller's [B, T, H, K] tensors in their own dtype and gam is gc
    [B*H, T_pad], one decay per head and step, so the decays leave the products: o = scale exp(gc) (q S_n) +
    P delta with P = scale (q k^T) * exp(gc_t - gc_s) on s <= t, q k^T a product of the raw tiles (NATIVE: the
    tensor core's for 16-bit inputs, :func:`_raw_dot`) and every float32 operand rounded once (:func:`_rn`).
    Each variant keeps its own offset expressions: the same addresses written the other variant's way compile to
    other address arithmetic (and register use) than the kernel that was measured."""
    if SCALAR_GATE:
        n = tl.program_id(0)
        bh = tl.program_id(1)
        NT = tl.num_programs(0)
        b = bh // H
        h = bh % H
        iv: tl.constexpr = 0
    else:
        bh = tl.program_id(0)
        n = tl.program_id(1)
        NT = tl.num_programs(1)
        TP = NT * C
        iv = tl.program_id(2)
    rows = tl.arange(0, C)
    ck = tl.arange(0, K)
    if SCALAR_GATE:
        t = n * C + rows
        tmask = t < T
        q = _tile(q_ptr, b, h, t, tmask, ck, T, H, K)
        k = _tile(k_ptr, b, h, t, tmask, ck, T, H, K)
        gc = tl.load(gam_ptr + bh * NT * C + n * C + rows)
        P = _rn(_raw_dot(q, tl.trans(k), NATIVE, PREC) * scale * _decay_pairs(gc, rows, False), PREC)
        qf = _rn(q.to(tl.float32), PREC)
        sq = scale * tl.exp(gc)
    else:
        offk = (bh * TP + n * C) * K + rows[:, None] * K + ck[None, :]
        gam = tl.load(gam_ptr + offk)
        Qg = tl.load(q_ptr + offk) * scale * tl.exp(gam)
        Kg = tl.load(k_ptr + offk) * tl.exp(-gam)
        P = _dot(Qg, tl.trans(Kg), PREC)
        P = tl.where(rows[:, None] >= rows[None, :], P, 0.0)
    for j in tl.static_range(NVL):
        cv = (iv * NVL + j) * BV + tl.arange(0, BV)
        if SCALAR_GATE:
            S = tl.load(H_ptr + (bh * NT + n) * K * V + ck[:, None] * V + cv[None, :])
            d = tl.load(D_ptr + (bh * NT * C + n * C + rows)[:, None] * V + cv[None, :])
            o = sq[:, None] * _mm(qf, _rn(S, PREC), PREC) + _mm(P, _rn(d, PREC), PREC)
            tl.store(O_ptr + ((b * T + t[:, None]) * H + h) * V + cv[None, :], o.to(O_ptr.dtype.element_ty),
                     mask=tmask[:, None])
        else:
            offv = (bh * TP + n * C) * V + rows[:, None] * V + cv[None, :]
            S = tl.load(H_ptr + (bh * NT + n) * K * V + ck[:, None] * V + cv[None, :])
            d = tl.load(D_ptr + offv)
            o = _dot(Qg, S, PREC) + _dot(P, d, PREC)
            if DIRECT:
                t = n * C + rows
                b = bh // H
                h = bh % H
                offo = ((b * T + t[:, None]) * H + h) * V + cv[None, :]
                tl.store(O_ptr + offo, o.to(O_ptr.dtype.element_ty), mask=t[:, None] < T)
            else:
                tl.store(O_ptr + offv, o)


@triton.jit
def _load_rows(x_ptr, sb, st, sh, b, h, t, tmask, D: tl.constexpr):
    """Rows ``t`` of head (b, h) of a [B, T, H, D] tensor with any strides, as float32; rows past T read as 0."""
    cd = tl.arange(0, D)
    x = tl.load(x_ptr + b * sb + t[:, None] * st + h * sh + cd[None, :], mask=tmask[:, None], other=0.0)
    return x.to(tl.float32)


@triton.jit
def prep_fwd_kernel(q_ptr, k_ptr, g_ptr, v_ptr, w_ptr, b_ptr,
                    sq0, sq1, sq2, sk0, sk1, sk2, sg0, sg1, sg2, sv0, sv1, sv2, sw0, sw1, sw2, sb0, sb1, sb2,
                    qi_ptr, ki_ptr, gam_ptr, vi_ptr, wi_ptr, ui_ptr, bi_ptr, ei_ptr, kend_ptr, T, H,
                    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, HAS_ERASE: tl.constexpr,
                    WRITE_KEND: tl.constexpr):
    # The forward's inputs in its internal layout, one chunk of one head per program, in one pass: q, k, v, w,
    # b as float32 [B, H, T_pad, D] (padding rows 0), gamma = the chunk-local cumulative sum of g, u = w * v and
    # e = b * k. Replaces a cast-and-transpose copy per tensor, two products and a cumsum in torch (the forward
    # profile's torch kernels). s*0, s*1, s*2 are the (batch, time, head) strides of each input. WRITE_KEND: also
    # Kend = k * exp(gamma_C - gamma) (gamma_C = the chunk's last row), which the sequential state kernel would
    # otherwise rebuild from k and gamma in every V-block's program (see state_fwd_kernel).
    bh = tl.program_id(0)
    n = tl.program_id(1)
    NT = tl.num_programs(1)
    b = bh // H
    h = bh % H
    r = tl.arange(0, C)
    t = n * C + r
    tmask = t < T
    ck = tl.arange(0, K)
    cv = tl.arange(0, V)
    row = bh * NT * C + n * C + r
    offk = row[:, None] * K + ck[None, :]
    offv = row[:, None] * V + cv[None, :]
    tl.store(qi_ptr + offk, _load_rows(q_ptr, sq0, sq1, sq2, b, h, t, tmask, K))
    k = _load_rows(k_ptr, sk0, sk1, sk2, b, h, t, tmask, K)
    tl.store(ki_ptr + offk, k)
    gam = tl.cumsum(_load_rows(g_ptr, sg0, sg1, sg2, b, h, t, tmask, K), 0)
    tl.store(gam_ptr + offk, gam)
    if WRITE_KEND:
        gamC = tl.sum(tl.where(r[:, None] == C - 1, gam, 0.0), 0)  # one value plus zeros: the stored row exactly
        tl.store(kend_ptr + offk, k * tl.exp(gamC[None, :] - gam))
    v = _load_rows(v_ptr, sv0, sv1, sv2, b, h, t, tmask, V)
    w = _load_rows(w_ptr, sw0, sw1, sw2, b, h, t, tmask, V)
    tl.store(vi_ptr + offv, v)
    tl.store(wi_ptr + offv, w)
    tl.store(ui_ptr + offv, w * v)
    if HAS_ERASE:
        e = _load_rows(b_ptr, sb0, sb1, sb2, b, h, t, tmask, K)
        tl.store(bi_ptr + offk, e)
        tl.store(ei_ptr + offk, e * k)


def prepare_inputs(q, k, g, v, w, b, C: int, kend: bool = False) -> dict:
    """The forward's internal float32 operands from [B, T, H, D] inputs in one kernel (``prep_fwd_kernel``):
    qi, ki, gam (chunk-local cumulative log-decay), vi, wi, ui = w*v, with an erase gate bi and ei = b*k, and with
    ``kend`` the state kernel's Kend = k * exp(gamma_C - gamma) (else None).
    Equal to :func:`to_internal` of each input and the torch products / cumsum (the cumsum may round in another
    order)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    TP = T + (-T) % C
    dev = q.device
    f32 = dict(device=dev, dtype=torch.float32)
    out = {n: torch.empty(B, H, TP, K, **f32) for n in ("qi", "ki", "gam")}
    out.update({n: torch.empty(B, H, TP, V, **f32) for n in ("vi", "wi", "ui")})
    has_erase = b is not None
    out.update({n: (torch.empty(B, H, TP, K, **f32) if has_erase else None) for n in ("bi", "ei")})
    out["kend"] = torch.empty(B, H, TP, K, **f32) if kend else None
    bb = b if has_erase else k  # any valid pointer; HAS_ERASE=False never reads it
    q, k, g, v, w, bb = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, g, v, w, bb))
    strides = [s_ for x in (q, k, g, v, w, bb) for s_ in x.stride()[:3]]
    prep_fwd_kernel[(B * H, TP // C)](q, k, g, v, w, bb, *strides,
                                      out["qi"], out["ki"], out["gam"], out["vi"], out["wi"], out["ui"],
                                      out["bi"] if has_erase else out["qi"], out["ei"] if has_erase else out["qi"],
                                      out["kend"] if kend else out["qi"], T, H, K=K, V=V, C=C,
                                      HAS_ERASE=has_erase, WRITE_KEND=kend, **_launch("prep_fwd_kernel"))
    return out


def to_internal(x: torch.Tensor, C: int) -> torch.Tensor:
    """[B, T, H, D] (any float dtype) -> contiguous float32 [B, H, T_pad, D], zero-padded to a chunk multiple.
    One strided copy that casts and transposes at once (the profile counted a cast, a pad and a transpose, three
    passes, per input), the padding rows zeroed apart."""
    B, T, H, D = x.shape
    TP = T + (-T) % C
    out = torch.empty(B, H, TP, D, device=x.device, dtype=torch.float32)
    if TP > T:
        out[:, :, T:].zero_()
    out[:, :, :T].copy_(x.transpose(1, 2))
    return out


def from_internal(x: torch.Tensor, T: int, dtype: torch.dtype) -> torch.Tensor:
    """The inverse layout change, in ``dtype``: one strided copy that casts and transposes at once."""
    B, H, _, D = x.shape
    out = torch.empty(B, T, H, D, device=x.device, dtype=dtype)
    out.copy_(x[:, :, :T].transpose(1, 2))
    return out


_FLOOR_CHECK = {"on": True}


@contextlib.contextmanager
def decay_floor_check_off():
    """Skip the decay-floor check inside the block: for recording launches without running them
    (``lethe.aot.record_launches(execute=False)``), when the prepared gamma is uninitialised memory."""
    _FLOOR_CHECK["on"] = False
    try:
        yield
    finally:
        _FLOOR_CHECK["on"] = True


def _check_dims(K: int, V: int, C: int) -> None:
    for name, d in (("K", K), ("V", V), ("chunk", C)):
        if d < 16 or d & (d - 1):
            raise ValueError(f"the Triton path needs {name} a power of two >= 16, got {d}")


# The kernels compute element offsets in 32-bit integers (program ids and integer arguments are int32), so no
# tensor they index may hold more elements than an int32 reaches; past that an offset wraps and the kernel reads or
# writes the wrong place (or faults) instead of failing cleanly.
INDEX_LIMIT = 2**31 - 1


def check_index_range(B: int, H: int, T: int, K: int, V: int, C: int) -> None:
    """Refuse a problem whose largest tensor in the Triton forward or backward exceeds INDEX_LIMIT elements: per
    token the chunk states ([B, H, T/C, K, V], K*V/C per token), the chunk matrices ([.., C, C]) or a K- or V-wide
    row, T padded to whole chunks. The CuTe kernels of the hybrid backends index the same tensors."""
    t_pad = -(-T // C) * C
    per_token = max(K, V, C, K * V // C)
    largest = B * H * t_pad * per_token
    if largest > INDEX_LIMIT:
        fit = INDEX_LIMIT // (H * t_pad * per_token)
        advice = (f"run at most {fit} sequence(s) per call (split the batch)" if fit else
                  "even one sequence is too large: split the heads over calls")
        raise ValueError(
            f"B={B}, H={H}, T={T}, d_k={K}, d_v={V}, chunk {C}: the largest internal tensor would hold {largest:,} "
            f"elements, more than the kernels' 32-bit indices reach ({INDEX_LIMIT:,}); {advice}, or use "
            "backend='torch'")


def triton_chunk_fwd(q, k, v, g, b, w, scale=None, chunk: int = 64, initial_state=None, dot_precision="tf32x3",
                     bv: int | None = None, wy_inverse: str = WY_INVERSE_DEFAULT,
                     output_precision: str | None = OUTPUT_PRECISION_DEFAULT):
    """Forward on the Triton kernels; returns ``(o, final_state, ctx)`` like :func:`chunked.chunk_fwd`.
    ``wy_inverse`` (one of ``fwd_options.WY_INVERSES``): "split" (the default: ``wy_a_kernel`` writes A,
    ``wy_inverse_kernel`` inverts it in place, ``wy_apply_kernel`` forms W and U), "rows" (the same arithmetic in
    one kernel, ``wy_fwd_kernel``), "blocked" (the inverse blockwise, ``wy_fwd_blocked_kernel``; chunk >= 64 so
    its blocks meet tl.dot's 16-row minimum on a GPU). Timings: kernels/gdn/fwd_options.py. ``output_precision``:
    the output kernel's tl.dot precision (None: ``dot_precision``; "auto", the default: "tf32rn" for bf16/fp16
    inputs under the default ``dot_precision``); its products feed only o. ``ctx["prec_output"]`` says which ran.
    A, W/U and the state scan take theirs from their launch entries' ``PREC`` (``"auto"``: the same rule;
    ``fwd_options.resolve_precision``); ``ctx["prec_kernels"]`` says what every such kernel launched ran at."""
    if dot_precision not in DOT_PRECISIONS:
        raise ValueError(f"dot_precision must be one of {DOT_PRECISIONS}, got {dot_precision!r}")
    sixteen = q.dtype in (torch.bfloat16, torch.float16)
    out_prec = resolve_output_precision(output_precision, dot_precision, sixteen)
    # the kernels with a PREC of their own that this call launches (the row and blocked WY kernels run dot_precision)
    own = ("wy_a_kernel", "wy_apply_kernel", "state_fwd_kernel") if b is not None and wy_inverse == "split" else (
        "state_fwd_kernel",)
    precs = {n: _prec(n, dot_precision, sixteen) for n in own}
    B, T, H, K = q.shape
    V = v.shape[-1]
    C = chunk
    _check_dims(K, V, C)
    check_index_range(B, H, T, K, V, C)
    s = K**-0.5 if scale is None else float(scale)
    # KEND (0/1) in the state kernel's launch entry: the prep kernel writes Kend for it
    kend = bool(FWD_LAUNCH["state_fwd_kernel"].get("KEND", 0))
    x = prepare_inputs(q, k, g, v, w, b, C, kend=kend)
    qi, ki, gam, vi, wi, ui, bi, ei = (x[n] for n in ("qi", "ki", "gam", "vi", "wi", "ui", "bi", "ei"))
    TP = qi.shape[2]
    NT = TP // C
    if _FLOOR_CHECK["on"] and gam.numel() and float(gam.min()) < GAMMA_FLOOR:
        raise ValueError(
            f"chunk-local cumulative log-decay reaches {float(gam.min()):.1f} < {GAMMA_FLOOR}: the factored "
            "decay would overflow float32; use a smaller chunk or the torch backend"
        )
    has_erase = b is not None
    dev = q.device
    if has_erase:
        Tm = torch.empty(B, H, NT, C, C, device=dev, dtype=torch.float32)
        Wi = torch.empty_like(ki)
        Ui = torch.empty_like(ui)
        if wy_inverse not in WY_INVERSES:
            raise ValueError(f"wy_inverse must be one of {WY_INVERSES}, got {wy_inverse!r}")
        if wy_inverse == "split":
            wy_a_kernel[(B * H, NT)](ki, ei, gam, Tm, K=K, C=C, PREC=precs["wy_a_kernel"],
                                     **_launch("wy_a_kernel"))
            wy_inverse_kernel[(B * H * NT,)](Tm, C=C, **_launch("wy_inverse_kernel"))
            wy_apply_kernel[(B * H, NT)](ei, ui, gam, Tm, Wi, Ui, K=K, V=V, C=C,
                                         PREC=precs["wy_apply_kernel"], **_launch("wy_apply_kernel"))
        else:
            name = "wy_fwd_kernel" if wy_inverse == "rows" else "wy_fwd_blocked_kernel"
            kern = wy_fwd_kernel if wy_inverse == "rows" else wy_fwd_blocked_kernel
            kern[(B * H, NT)](ki, ei, ui, gam, Tm, Wi, Ui, K=K, V=V, C=C, PREC=dot_precision, **_launch(name))
    else:
        Tm = None
        Wi, Ui = ki, ui  # W unused when HAS_ERASE is False
    BVs = bv or min(V, FWD_LAUNCH["state_fwd_kernel"]["BV"])
    BV = bv or min(V, FWD_LAUNCH["output_fwd_kernel"]["BV"])
    Hs = torch.empty(B, H, NT, K, V, device=dev, dtype=torch.float32)
    Di = torch.empty_like(ui)
    SF = torch.empty(B, H, K, V, device=dev, dtype=torch.float32)
    S0 = initial_state.float().contiguous() if initial_state is not None else SF
    state_fwd_kernel[(B * H, V // BVs)](ki, gam, Wi, Ui, S0, Hs, Di, SF, x["kend"] if kend else ki, T, H, NT=NT, K=K,
                                        V=V, C=C, BV=BVs, HAS_ERASE=has_erase, HAS_INIT=initial_state is not None,
                                        PREC=precs["state_fwd_kernel"], KEND_IN=kend,
                                        **_launch("state_fwd_kernel"))
    del x  # Kend (when written) is not kept: only the state kernel reads it
    direct = bool(FWD_LAUNCH["output_fwd_kernel"].get("DIRECT", 0))
    o = torch.empty(B, T, H, V, device=dev, dtype=q.dtype) if direct else torch.empty_like(ui)
    NVL = max(1, min(FWD_LAUNCH["output_fwd_kernel"].get("NVL", 1), V // BV))
    output_fwd_kernel[(B * H, NT, V // (BV * NVL))](qi, ki, gam, Hs, Di, o, s, T, H, K=K, V=V, C=C, BV=BV, NVL=NVL,
                                                    PREC=out_prec, DIRECT=direct,
                                                    **_launch("output_fwd_kernel"))
    ctx = dict(qi=qi, ki=ki, gam=gam, ui=ui, vi=vi, wi=wi, bi=bi, ei=ei, Tm=Tm,
               Wi=Wi if has_erase else None, Hs=Hs, Di=Di, scale=s, T=T, C=C, NT=NT, TP=TP, BV=BV, BV_state=BVs,
               dtype=q.dtype, has_init=initial_state is not None, prec=dot_precision, prec_output=out_prec,
               prec_kernels={**precs, "output_fwd_kernel": out_prec},
               init_dtype=None if initial_state is None else initial_state.dtype)
    return (o if direct else from_internal(o, T, q.dtype)), SF, ctx
