"""K1 of the GDN-family backward in the CUTLASS CuTe DSL: the reverse-time inter-chunk state scan (sm_90a).

What it computes (the same recurrence as :func:`lethe.kernels.gdn.chunked.reverse_state_scan`), per (batch*head):

    for n = N-1 .. 0:
        dS_next[n] = dS                                   # gradient at chunk n's end state
        dd[n]      = P[n]^T dO[n] + Kend[n] dS            # d delta of chunk n       [C, V]
        dS         = Diag(GC[n]) dS + Qg[n]^T dO[n] - Wm[n]^T dd[n]
    dS0 = dS                                              # gradient of the initial state

Why a hand-written kernel: the scan is sequential in n, so its cost is the latency of one chunk step times N;
keeping dS resident on chip in float32 for the whole loop (never round-tripping through HBM between chunks) is
the property the paper's native kernel was built around.

Structure (version 1, deliberately simple and deterministic):

* one CTA per (batch*head, V-tile of ``BV`` columns); ``NT = K * SPLIT`` threads;
* thread t owns dS rows ``k = t % K`` and the ``BV / SPLIT`` columns of group ``t // K``: dS lives in registers
  (float32) for the whole loop and is mirrored to shared memory once per chunk only because the d delta product
  reduces over k, across threads;
* per chunk the CTA stages P, Kend, Qg, Wm, GC and the dO tile in shared memory (plain coalesced loads), then
  two SIMT FMA phases separated by barriers: d delta (each thread a fixed slice of [C, BV]) and the dS update;
* every sum runs in one fixed order, so the result is bitwise reproducible run to run (no atomics, no split-K).

The operands are the float32 chunk-layout tensors of the torch chunked path, flattened over (batch, head):
``P [BH,N,C,C]``, ``Kend/Qg/Wm [BH,N,C,K]``, ``GC [BH,N,K]``, ``dO [BH,N,C,V]``, ``dS_final [BH,K,V]``;
outputs ``dS_next [BH,N,K,V]``, ``dd [BH,N,C,V]``, ``dS0 [BH,K,V]``.
No tensor-core MMA yet: the products are FFMA, the same arithmetic class as the Triton K1 at
``input_precision="ieee"``. The Kend tile is padded by one word per row so the d delta phase, where the 32 lanes
of a warp read 16 different rows at one column, is free of shared-memory bank conflicts.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32


class K1ReverseScan:
    """Compile-time configuration of one K1 instance (shapes, tile, erase on/off, initial gradient on/off)."""

    def __init__(self, K: int = 128, V: int = 128, C: int = 64, BV: int = 32, split: int = 2,
                 has_erase: bool = True, has_dsf: bool = True):
        if BV % split or V % BV:
            raise ValueError("BV must divide V and be a multiple of split")
        self.K, self.V, self.C, self.BV, self.split = K, V, C, BV, split
        self.NT = K * split
        if (C * BV) % self.NT or self.NT % BV:
            raise ValueError("C*BV must be a multiple of the thread count, and BV must divide it")
        if (C * C) % self.NT:
            raise ValueError("C*C staging does not tile the thread count")
        self.DSPT = BV // split          # dS columns per thread
        self.DDPT = C * BV // self.NT    # d delta elements per thread
        self.has_erase, self.has_dsf = has_erase, has_dsf

    def smem_bytes(self) -> int:
        K, C, BV = self.K, self.C, self.BV
        words = C * C + C * (K + 1) + 2 * C * K + K + C * BV + K * BV + C * BV
        return 4 * words + 8 * 16  # alignment slack per buffer

    @cute.jit
    def __call__(self, mP: cute.Tensor, mKend: cute.Tensor, mQg: cute.Tensor, mWm: cute.Tensor,
                 mGC: cute.Tensor, mDO: cute.Tensor, mDSF: cute.Tensor, mDSN: cute.Tensor,
                 mDD: cute.Tensor, mDS0: cute.Tensor, stream):
        BH = mP.shape[0]
        self.kernel(mP, mKend, mQg, mWm, mGC, mDO, mDSF, mDSN, mDD, mDS0).launch(
            grid=[BH, self.V // self.BV, 1], block=[self.NT, 1, 1], smem=self.smem_bytes(), stream=stream)

    @cute.kernel
    def kernel(self, mP: cute.Tensor, mKend: cute.Tensor, mQg: cute.Tensor, mWm: cute.Tensor,
               mGC: cute.Tensor, mDO: cute.Tensor, mDSF: cute.Tensor, mDSN: cute.Tensor,
               mDD: cute.Tensor, mDS0: cute.Tensor):
        K, C, BV, NT = self.K, self.C, self.BV, self.NT
        DSPT, DDPT = self.DSPT, self.DDPT
        tidx, _, _ = cute.arch.thread_idx()
        bh, vt, _ = cute.arch.block_idx()
        v0 = vt * BV
        N = mP.shape[1]

        smem = cutlass.utils.SmemAllocator()
        sP = smem.allocate_tensor(Float32, cute.make_layout((C, C), stride=(C, 1)), 16)
        sKend = smem.allocate_tensor(Float32, cute.make_layout((C, K), stride=(K + 1, 1)), 16)
        sQg = smem.allocate_tensor(Float32, cute.make_layout((C, K), stride=(K, 1)), 16)
        sWm = smem.allocate_tensor(Float32, cute.make_layout((C, K), stride=(K, 1)), 16)
        sGC = smem.allocate_tensor(Float32, cute.make_layout((K,), stride=(1,)), 16)
        sDO = smem.allocate_tensor(Float32, cute.make_layout((C, BV), stride=(BV, 1)), 16)
        sDS = smem.allocate_tensor(Float32, cute.make_layout((K, BV), stride=(BV, 1)), 16)
        sDD = smem.allocate_tensor(Float32, cute.make_layout((C, BV), stride=(BV, 1)), 16)

        # dS ownership: row k, columns [jd, jd + DSPT) of the V-tile
        k = tidx % K
        jd = (tidx // K) * DSPT
        # d delta ownership: row c, columns [je, je + DDPT)
        c_own = tidx // (BV // DDPT)
        je = (tidx % (BV // DDPT)) * DDPT

        dS = cute.make_rmem_tensor((DSPT,), Float32)
        for j in cutlass.range_constexpr(DSPT):
            if cutlass.const_expr(self.has_dsf):
                dS[j] = mDSF[bh, k, v0 + jd + j]
            else:
                dS[j] = Float32(0.0)
        acc = cute.make_rmem_tensor((DDPT,), Float32)

        for i in cutlass.range(N, unroll=1):
            n = N - 1 - i
            # (0) the previous chunk's phases are done with shared memory
            cute.arch.sync_threads()
            for j in cutlass.range_constexpr(DSPT):
                sDS[k, jd + j] = dS[j]
            # stage chunk n: rows strided by NT // width, columns by thread
            for it in cutlass.range_constexpr(C * C // NT):
                e = it * NT + tidx
                sP[e // C, e % C] = mP[bh, n, e // C, e % C]
            for it in cutlass.range_constexpr(C * K // NT):
                e = it * NT + tidx
                r = e // K
                col = e % K
                sKend[r, col] = mKend[bh, n, r, col]
                sQg[r, col] = mQg[bh, n, r, col]
                if cutlass.const_expr(self.has_erase):
                    sWm[r, col] = mWm[bh, n, r, col]
            if tidx < K:
                sGC[tidx] = mGC[bh, n, tidx]
            for it in cutlass.range_constexpr(C * BV // NT):
                e = it * NT + tidx
                sDO[e // BV, e % BV] = mDO[bh, n, e // BV, v0 + e % BV]
            cute.arch.sync_threads()

            # (1) dS_next[n] = dS, written from the shared mirror so the global stores coalesce
            for it in cutlass.range_constexpr(K * BV // NT):
                e = it * NT + tidx
                mDSN[bh, n, e // BV, v0 + e % BV] = sDS[e // BV, e % BV]

            # (2) d delta[c, :] = sum_s P[s, c] dO[s, :] + sum_k Kend[c, k] dS[k, :]
            for j in cutlass.range_constexpr(DDPT):
                acc[j] = Float32(0.0)
            for s in cutlass.range(C, unroll=4):
                p = sP[s, c_own]
                for j in cutlass.range_constexpr(DDPT):
                    acc[j] = acc[j] + p * sDO[s, je + j]
            for kk in cutlass.range(K, unroll=4):
                a = sKend[c_own, kk]
                for j in cutlass.range_constexpr(DDPT):
                    acc[j] = acc[j] + a * sDS[kk, je + j]
            for j in cutlass.range_constexpr(DDPT):
                sDD[c_own, je + j] = acc[j]
                mDD[bh, n, c_own, v0 + je + j] = acc[j]
            cute.arch.sync_threads()

            # (3) dS <- Diag(GC) dS + Qg^T dO - Wm^T d delta  (row k of each product)
            gc = sGC[k]
            for j in cutlass.range_constexpr(DSPT):
                dS[j] = gc * dS[j]
            for c in cutlass.range(C, unroll=2):
                q = sQg[c, k]
                for j in cutlass.range_constexpr(DSPT):
                    dS[j] = dS[j] + q * sDO[c, jd + j]
                if cutlass.const_expr(self.has_erase):
                    w = sWm[c, k]
                    for j in cutlass.range_constexpr(DSPT):
                        dS[j] = dS[j] - w * sDD[c, jd + j]

        for j in cutlass.range_constexpr(DSPT):
            mDS0[bh, k, v0 + jd + j] = dS[j]

