"""K2 of the GDN-family backward for Hopper (sm_90a) in the CUTLASS CuTe DSL: the WY / triangular-inverse VJP.

K2 is the block of :func:`lethe.kernels.gdn.chunked.chunk_bwd` under ``# WY / triangular-inverse VJP`` (computed
there by :func:`lethe.kernels.gdn.chunked.wy_vjp_torch`). Per chunk, from the float32 operands

    dd [C, V]  (d delta, from K1)      Hs [K, V]  (state at the chunk's start)      T [C, C]  (UT inverse)
    Xe [C, K]  (e * Gamma)             u  [C, V]  (w * v)

it produces, exactly as chunk_bwd does (dW and dT are chunk-local intermediates, never written to HBM):

    dW  = -(dd Hs^T)                   [C, K]
    dT  = dW Xe^T + dd u^T             [C, C]
    dXe = T^T dW                       [C, K]     output
    du  = T^T dd                       [C, V]     output
    dA  = -(T^T dT T^T) * strict       [C, C]     output, strictly lower (diagonal and upper part are 0)

Structure (SIMT, float32 FFMA with float32 accumulation; no tensor cores: TF32 wgmma would round the operands
to 10 mantissa bits and miss the 1e-5 agreement with the float32 torch path this kernel is held to):

* one CTA per chunk (grid = B*H*N), 256 threads; operands are staged in shared memory with plain coalesced
  loads, T once, dd / u / Hs one V-tile of 64 columns at a time, Xe after phase 1;
* every product is a register-tiled outer-product loop ``out[m, n] = sum_r A(m, r) B(n, r)``: thread
  (a, b) = (tid // 16, tid % 16) owns the TM x TN outputs at rows ``a + 16 i`` and columns ``b + 16 j``
  (4 x 8 for the [64, 128] products, 4 x 4 for the [64, 64] ones and for each [64, 64] tile of du);
* every operand is read in its natural row-major layout: each shared buffer has the odd row stride width + 1,
  so the 16 rows a warp reads at one reduction index fall in 16 distinct banks whether the reduction runs
  along the buffer's rows or its columns; no transposed copies are made;
* the reduction of every output runs sequentially over r = 0 .. R-1 in one thread (dT: first over V for
  dd u^T, then over K for dW Xe^T, onto the same accumulator); no atomics, no split reduction, so the result is
  bitwise reproducible run to run;
* shared memory: region T (T, all along) and region X, reused phase by phase (a V-tile of dd, u, Hs; then
  dW and Xe; then dT and Y): 83,200 B for every V that is a multiple of 64 (K = 128, C = 64), under sm_90a's
  232,448 B per block and small enough for two CTAs per SM; the launch asks for two CTAs per SM
  (``min_blocks_per_mp=2``), which caps ptxas at 128 registers per thread (no spills at d_v 64 / 128).

Expected bottleneck (from the instruction counts, not measured): every multiply-add reads its operands from
shared memory with scalar loads (4 + TN loads per 4 * TN FMAs), so the kernel is bound by shared-memory
wavefronts (~6,400 per thread per chunk at d_v = 128 against ~14,300 FFMA) rather than by the FMA pipe.

Phases (each ``|`` a CTA barrier; phase 1 is a loop over the V-tiles, with a barrier before each tile):

    stage T, tile of dd/u/Hs | du tile = T^T dd -> HBM, dT += dd u^T, acc += dd Hs^T |
    write dW = -acc, stage Xe | dT += dW Xe^T, dXe = T^T dW -> HBM | write dT | Y = T^T dT, write Y beside dT |
    Z = Y T^T, dA = -Z where s < t else 0 -> HBM

The float64 replay of this order is :mod:`.k2_hopper_model` (checked against chunk_bwd in the CPU tests).
Tensors are the chunk-layout float32 tensors of the torch chunked path, flattened over (batch, head, chunk):
``dd [L,C,V]``, ``Hs [L,K,V]``, ``T [L,C,C]``, ``Xe [L,C,K]``, ``u [L,C,V]`` -> ``dXe [L,C,K]``, ``du [L,C,V]``,
``dA [L,C,C]`` (contiguous; the host wrapper keeps every launch under 2^31 elements per tensor).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32

from .k2_hopper_plan import TCOLS, THREADS, check, flops_per_chunk, smem_bytes, smem_words, tile_plan, v_tile


class WYTriInvVJPHopper:
    """Compile-time configuration (K, V, C) of the sm_90a K2 kernel (SIMT FFMA, one CTA per chunk)."""

    def __init__(self, K: int = 128, V: int = 128, C: int = 64):
        check(K, V, C)
        self.K, self.V, self.C = K, V, C
        self.BV = v_tile(V)
        self.NVT = V // self.BV
        self.plan = tile_plan(K, V, C)
        self.words = smem_words(K, V, C)

    def smem_bytes(self) -> int:
        return smem_bytes(self.K, self.V, self.C)

    @cute.jit
    def __call__(self, mDD: cute.Tensor, mHs: cute.Tensor, mT: cute.Tensor, mXe: cute.Tensor, mU: cute.Tensor,
                 mDX: cute.Tensor, mDU: cute.Tensor, mDA: cute.Tensor, stream):
        L = mDD.shape[0]
        self.kernel(mDD, mHs, mT, mXe, mU, mDX, mDU, mDA).launch(
            grid=[L, 1, 1], block=[THREADS, 1, 1], smem=self.smem_bytes(), stream=stream,
            min_blocks_per_mp=2, preferred_smem_carveout=100)  # two CTAs per SM: <= 128 registers per thread

    @cute.kernel
    def kernel(self, mDD: cute.Tensor, mHs: cute.Tensor, mT: cute.Tensor, mXe: cute.Tensor, mU: cute.Tensor,
               mDX: cute.Tensor, mDU: cute.Tensor, mDA: cute.Tensor):
        K, C, BV = self.K, self.C, self.BV
        tidx, _, _ = cute.arch.thread_idx()
        ch, _, _ = cute.arch.block_idx()
        a_row = tidx // TCOLS   # output-row group of this thread in every product
        b_col = tidx % TCOLS    # output-column group

        smem = cutlass.utils.SmemAllocator()
        rT = smem.allocate_tensor(Float32, cute.make_layout(self.words["T"]), 16)
        rX = smem.allocate_tensor(Float32, cute.make_layout(self.words["X"]), 16)

        def view(region, rows, cols, offset=0):
            """Row-major [rows, cols] view with the odd row stride cols + 1, at a word offset in a region."""
            return cute.make_tensor(region.iterator + offset, cute.make_layout((rows, cols), stride=(cols + 1, 1)))

        sT = view(rT, C, C)
        # phase 1: one V-tile of dd, u, Hs
        sDD = view(rX, C, BV)
        sU = view(rX, C, BV, C * (BV + 1))
        sHs = view(rX, K, BV, 2 * C * (BV + 1))
        # phase 2: dW, Xe
        sDW = view(rX, C, K)
        sXe = view(rX, C, K, C * (K + 1))
        # phase 3: dT, Y
        sDT = view(rX, C, C)
        sY = view(rX, C, C, C * (C + 1))

        # The helpers take everything as arguments (no closure over the kernel's locals: the DSL does not allow
        # closures inside its staged loops).
        def stage(dst, src, rows, cols, col0, tidx, ch):
            """Global [rows, col0 : col0 + cols] of chunk ch -> shared; consecutive threads take consecutive
            columns (coalesced reads)."""
            for it in cutlass.range_constexpr(rows * cols // THREADS):
                e = it * THREADS + tidx
                dst[e // cols, e % cols] = src[ch, e // cols, col0 + e % cols]

        def product(acc, A, a_rm, B, b_rn, M, R, TM, TN, first, a_row, b_col):
            """acc[i*TN + j] (+)= sum_{r < R} A(m_i, r) * B(n_j, r), m_i = a_row + i*M/TM, n_j = b_col + 16 j,
            one FMA per term in increasing r (the fixed reduction order). A(m, r) is A[r, m] if a_rm else
            A[m, r]; B(n, r) is B[r, n] if b_rn else B[n, r]."""
            MA = M // TM
            if cutlass.const_expr(first):
                for q in cutlass.range_constexpr(TM * TN):
                    acc[q] = Float32(0.0)
            av = cute.make_rmem_tensor((TM,), Float32)
            bv = cute.make_rmem_tensor((TN,), Float32)
            for r in cutlass.range(R, unroll=4):
                for i in cutlass.range_constexpr(TM):
                    if cutlass.const_expr(a_rm):
                        av[i] = A[r, a_row + i * MA]
                    else:
                        av[i] = A[a_row + i * MA, r]
                for j in cutlass.range_constexpr(TN):
                    if cutlass.const_expr(b_rn):
                        bv[j] = B[r, b_col + j * TCOLS]
                    else:
                        bv[j] = B[b_col + j * TCOLS, r]
                for i in cutlass.range_constexpr(TM):
                    for j in cutlass.range_constexpr(TN):
                        acc[i * TN + j] = acc[i * TN + j] + av[i] * bv[j]

        TM, TN1, TNs, TNu = 4, K // TCOLS, C // TCOLS, BV // TCOLS
        MA = C // TM  # every product's M is C
        acc1 = cute.make_rmem_tensor((TM * TN1,), Float32)   # P1, then P3
        acc2 = cute.make_rmem_tensor((TM * TNs,), Float32)   # dT (phases 1-2), then Y, then Z
        accu = cute.make_rmem_tensor((TM * TNu,), Float32)   # du of one V-tile

        stage(sT, mT, C, C, 0, tidx, ch)
        for q in cutlass.range_constexpr(TM * TN1):
            acc1[q] = Float32(0.0)
        for q in cutlass.range_constexpr(TM * TNs):
            acc2[q] = Float32(0.0)
        # ---- phase 1, per V-tile [v0, v0 + BV): du tile, dT += dd u^T, acc1 += dd Hs^T ----
        for vt in cutlass.range(self.NVT, unroll=1):
            v0 = vt * BV
            cute.arch.sync_threads()  # everyone is done with the previous tile (a no-op wait on the first)
            stage(sDD, mDD, C, BV, v0, tidx, ch)
            stage(sU, mU, C, BV, v0, tidx, ch)
            stage(sHs, mHs, K, BV, v0, tidx, ch)
            cute.arch.sync_threads()
            # P4: du[t, v] = sum_r T[r, t] dd[r, v] -> HBM
            product(accu, sT, True, sDD, True, C, C, TM, TNu, True, a_row, b_col)
            for i in cutlass.range_constexpr(TM):
                for j in cutlass.range_constexpr(TNu):
                    mDU[ch, a_row + i * MA, v0 + b_col + j * TCOLS] = accu[i * TNu + j]
            # P2 (first part): dT[t, s] += sum_v dd[t, v] u[s, v]
            product(acc2, sDD, False, sU, False, C, BV, TM, TNs, False, a_row, b_col)
            # P1: acc1[c, k] += sum_v dd[c, v] Hs[k, v]
            product(acc1, sDD, False, sHs, False, C, BV, TM, TN1, False, a_row, b_col)
        cute.arch.sync_threads()  # everyone is done with the last tile

        # ---- phase 2: dW = -acc1 and Xe to shared memory; dT += dW Xe^T; dXe = T^T dW -> HBM ----
        for i in cutlass.range_constexpr(TM):
            for j in cutlass.range_constexpr(TN1):
                sDW[a_row + i * MA, b_col + j * TCOLS] = -acc1[i * TN1 + j]
        stage(sXe, mXe, C, K, 0, tidx, ch)
        cute.arch.sync_threads()
        product(acc2, sDW, False, sXe, False, C, K, TM, TNs, False, a_row, b_col)
        product(acc1, sT, True, sDW, True, C, C, TM, TN1, True, a_row, b_col)
        for i in cutlass.range_constexpr(TM):
            for j in cutlass.range_constexpr(TN1):
                mDX[ch, a_row + i * MA, b_col + j * TCOLS] = acc1[i * TN1 + j]
        cute.arch.sync_threads()  # everyone is done with dW and Xe

        # ---- phase 3: dT to shared memory; Y = T^T dT; Z = Y T^T; dA = -Z strictly lower -> HBM ----
        for i in cutlass.range_constexpr(TM):
            for j in cutlass.range_constexpr(TNs):
                sDT[a_row + i * MA, b_col + j * TCOLS] = acc2[i * TNs + j]
        cute.arch.sync_threads()
        product(acc2, sT, True, sDT, True, C, C, TM, TNs, True, a_row, b_col)
        for i in cutlass.range_constexpr(TM):
            for j in cutlass.range_constexpr(TNs):
                sY[a_row + i * MA, b_col + j * TCOLS] = acc2[i * TNs + j]  # Y sits beside dT: no barrier needed
        cute.arch.sync_threads()
        product(acc2, sY, False, sT, False, C, C, TM, TNs, True, a_row, b_col)
        for i in cutlass.range_constexpr(TM):
            for j in cutlass.range_constexpr(TNs):
                t = a_row + i * MA
                s = b_col + j * TCOLS
                z = Float32(0.0)
                if s < t:
                    z = -acc2[i * TNs + j]
                mDA[ch, t, s] = z


def compile_fake(cfg: dict):
    """Compile with fake tensors (no GPU) for the architecture in ``CUTE_DSL_ARCH``: (compiled fn, facts)."""
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

    L, K, V, C = cfg.get("L", 4), cfg.get("K", 128), cfg["V"], cfg.get("C", 64)
    kern = WYTriInvVJPHopper(K=K, V=V, C=C)

    def fake(*shape):
        return make_fake_compact_tensor(Float32, shape, assumed_align=16)

    fn = cute.compile(kern, fake(L, C, V), fake(L, K, V), fake(L, C, C), fake(L, C, K), fake(L, C, V),
                      fake(L, C, K), fake(L, C, V), fake(L, C, C), make_fake_stream())
    return fn, {"smem_dynamic_bytes": kern.smem_bytes(), "threads": THREADS,
                "flops_per_chunk": flops_per_chunk(K, V, C),
                "tile_plan": {k: list(v) for k, v in kern.plan.items()},
                "what": "K2 (Hopper, SIMT fp32): dXe = T^T dW, du = T^T dd, dA = -(T^T dT T^T)*strict with "
                        "dW = -dd Hs^T, dT = dW Xe^T + dd u^T, one chunk per CTA"}
