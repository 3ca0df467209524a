"""K2 of the GDN-family backward for Blackwell (sm_100a), tcgen05 / TMEM -- compiled, not executed (no B200).

K2 is the WY / triangular-inverse vector-Jacobian product of :func:`lethe.kernels.gdn.chunked.chunk_bwd` (the block
under ``# WY / triangular-inverse VJP``). Per chunk, with d delta = ``dd`` [C, V] from K1, the chunk's initial
state S0 = ``Hs`` [K, V], the UT inverse T = ``Tm`` [C, C], X = ``Xe`` [C, K] and U = ``uc`` [C, V]:

    dW  = -dd S0^T                 [C, K]
    dT  = dW X^T + dd U^T          [C, C]
    dX  = T^T dW                   [C, K]      (output ``dXe``)
    dU  = T^T dd                   [C, V]      (output ``du``)
    dA  = -(T^T dT T^T) * strict   [C, C]      (output ``dA``, strictly lower triangular)

This kernel computes exactly those matrix products -- all of K2's matrix products, nothing else -- for one
chunk per CTA (grid = one CTA per chunk of every batch*head; C = 64, K = 128, V in {64, 128}). It does NOT do
the pairwise-decay VJP that follows in ``chunk_bwd`` (``_pair_bwd(dA, e, k, E)``: dA -> de, dk, d gamma, an
elementwise [C, C, K] contraction, not a matrix product) nor the elementwise tail (db, dv, dw, cumsum).

The products, as tcgen05 MMAs (A operand M x R, B operand N x R, R the reduction; "T-layout" = the operand
is read transposed from its natural row-major storage, i.e. MN-major in shared memory):

    P1  G    = S0 dd^T          M=K=128 N=C  R=V   (G = -dW^T; written to SMEM as bf16 -G = dW^T twice:
                                                     as P2's A operand and, transposed, as P4a's A operand)
    P2  dX^T = dW^T T           M=128   N=C  R=C   (B = T, MN-major)
    P3  dU^T = dd^T T           M=V     N=C  R=C   (A = dd^T MN-major, B = T MN-major)
    P4b dT   = dd U^T           M=C     N=C  R=V   (first into the dT accumulator) ...
    P4a dT  += dW X^T           M=C     N=C  R=K   (... then accumulates onto it; dT written to SMEM, bf16)
    P5  Y    = T^T dT           M=C     N=C  R=C   (A = T^T, MN-major; Y written to SMEM, bf16)
    P6  Z    = Y T^T            M=C     N=C  R=C   (dA = -Z * strict in the epilogue)

Each product is R/16 ``tcgen05.mma`` instructions (kind f16, bf16 operands, fp32 accumulate): 24 + V/8 per
chunk (32 at V=64, 40 at V=128). Mechanics (same conventions as :mod:`.k1_blackwell`):

* all inputs via TMA (nine bulk tensor loads, one per operand view, on one mbarrier), bf16 in shared memory;
* ONE TMEM allocation (next power of two >= the accumulators' columns: 384 used -> 512 allocated) with a static
  column offset per accumulator (G 0, dX^T 64, dU^T 128, dT 192, Y 256, Z 320), one relinquish, one free;
* the three chained intermediates (dW, dT, Y) go TMEM -> registers (``tcgen05.ld``) -> bf16 -> shared memory
  (the next MMA's operand layout, ``fence.proxy.async`` + CTA barrier); MMA completion is signalled by
  ``tcgen05.commit`` on one mbarrier per round (4 rounds, each waited at phase 0);
* epilogue ``tcgen05.ld`` -> float32 global: dXe [C, K], du [C, V], dA [C, C] (negated, strictly lower).

Precision: operands and the three intermediates are bf16, accumulation fp32 (as :mod:`.k1_blackwell`). The
float64 model of this exact product order is :mod:`.k2_model` (checked against ``chunk_bwd`` in the tests).

Warp 0 issues TMA and MMA; all four warps move TMEM tiles. Not tuned (no overlap between chunks, scalar
shared-memory stores of the intermediates).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import cpasync, tcgen05

THREADS = 128
MMA_K = 16  # bf16 tcgen05.mma reduction per instruction

K_MAJ = tcgen05.OperandMajorMode.K
MN_MAJ = tcgen05.OperandMajorMode.MN


def product_list(K: int = 128, V: int = 128, C: int = 64) -> list[dict]:
    """The tcgen05 products of one chunk: name, (M, N, R), and the accumulator each writes. Pure Python (the
    AOT test derives the expected ``tcgen05.mma`` count from it: sum of R / 16)."""
    return [
        dict(name="P1 G=S0 dd^T", mnr=(K, C, V), acc="G"),
        dict(name="P2 dX^T=dW^T T", mnr=(K, C, C), acc="dXt"),
        dict(name="P3 dU^T=dd^T T", mnr=(V, C, C), acc="dUt"),
        dict(name="P4b dT=dd U^T", mnr=(C, C, V), acc="dT"),
        dict(name="P4a dT+=dW X^T", mnr=(C, C, K), acc="dT"),
        dict(name="P5 Y=T^T dT", mnr=(C, C, C), acc="Y"),
        dict(name="P6 Z=Y T^T", mnr=(C, C, C), acc="Z"),
    ]


def tmem_plan(K: int = 128, V: int = 128, C: int = 64) -> tuple[dict, int, int]:
    """Static TMEM column offsets (one fp32 column per accumulator column, M in {64, 128}, cta_group 1),
    columns used, columns allocated (power of two >= 32)."""
    widths = dict(G=C, dXt=C, dUt=C, dT=C, Y=C, Z=C)
    offs, col = {}, 0
    for name, w in widths.items():
        offs[name] = col
        col += w
    alloc = 32
    while alloc < col:
        alloc *= 2
    return offs, col, alloc


def smem_bytes(K: int = 128, V: int = 128, C: int = 64) -> int:
    """Dynamic shared memory of the 13 bf16 operand buffers (each 128-byte aligned, sizes are multiples of it)."""
    tiles = [K * V, C * V, C * C, V * C, C * V, C * V, C * K, C * C, C * C,  # TMA-loaded: S0 dd dd T dd^T dd U Xe T T
             K * C, C * K, C * C, C * C]                                   # written: dW^T dW dT Y
    return 2 * sum(tiles)


def expected_mma_count(K: int = 128, V: int = 128, C: int = 64) -> int:
    return sum(p["mnr"][2] // MMA_K for p in product_list(K, V, C))


class WYTriInvVJP:
    """Compile-time configuration (K, V, C) of the K2 tcgen05 kernel."""

    def __init__(self, K: int = 128, V: int = 128, C: int = 64):
        if K != 128 or C != 64:
            raise ValueError("this kernel is written for K = 128 (MMA M of P1/P2) and chunk C = 64")
        if V not in (64, 128):
            raise ValueError("V must be 64 or 128")
        self.K, self.V, self.C = K, V, C
        self.offs, self.cols_used, self.tmem_cols = tmem_plan(K, V, C)

    def _mma(self, M, N, a_major, b_major):
        op = tcgen05.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (M, N, MMA_K), tcgen05.CtaGroup.ONE,
                                  tcgen05.OperandSource.SMEM, a_major, b_major)
        return cute.make_tiled_mma(op)

    @cute.jit
    def __call__(self, mS0: cute.Tensor, mDDk: cute.Tensor, mDDmn: cute.Tensor, mTmn: cute.Tensor,
                 mTk: cute.Tensor, mXe: cute.Tensor, mU: cute.Tensor,
                 mDX: cute.Tensor, mDU: cute.Tensor, mDA: cute.Tensor, stream):
        """Operand views, L = number of chunks (batch*head*chunks), bf16, all over row-major per-chunk storage:

        mS0 (K, V, L) of Hs [L, K, V]; mDDk (C, V, L) and mDDmn (V, C, L) of dd [L, C, V];
        mTmn (C, C, L) strides (1, C, C*C) and mTk (C, C, L) strides (C, 1, C*C) of Tm [L, C, C];
        mXe (C, K, L) of Xe [L, C, K]; mU (C, V, L) of U [L, C, V].
        Outputs float32, in accumulator orientation: mDX (K, C, L) strides (1, K, C*K) of dXe [L, C, K];
        mDU (V, C, L) strides (1, V, C*V) of du [L, C, V]; mDA (C, C, L) strides (C, 1, C*C) of dA [L, C, C].
        """
        K, V, C = self.K, self.V, self.C
        bf = cutlass.BFloat16
        mma1 = self._mma(K, C, K_MAJ, K_MAJ)      # P1: A = S0, B = dd
        mma2 = self._mma(K, C, K_MAJ, MN_MAJ)     # P2: A = dW^T (written), B = T (MN)
        mma3 = self._mma(V, C, MN_MAJ, MN_MAJ)    # P3: A = dd^T (MN), B = T (MN)
        mma4 = self._mma(C, C, K_MAJ, K_MAJ)      # P4b: A = dd, B = U
        mma4a = self._mma(C, C, K_MAJ, K_MAJ)     # P4a: A = dW (written), B = Xe (same dT accumulator)
        mma5 = self._mma(C, C, MN_MAJ, K_MAJ)     # P5: A = T^T (MN), B = dT (written)
        mma6 = self._mma(C, C, K_MAJ, K_MAJ)      # P6: A = Y (written), B = T (K)
        t1, t2, t3 = (K, C, V), (K, C, C), (V, C, C)
        t4b, t4a, t5 = (C, C, V), (C, C, K), (C, C, C)
        lay = dict(
            S0=sm100_utils.make_smem_layout_a(mma1, t1, bf, 1),
            DDb=sm100_utils.make_smem_layout_b(mma1, t1, bf, 1),
            Tb=sm100_utils.make_smem_layout_b(mma2, t2, bf, 1),
            DDt=sm100_utils.make_smem_layout_a(mma3, t3, bf, 1),
            DDa=sm100_utils.make_smem_layout_a(mma4, t4b, bf, 1),
            U=sm100_utils.make_smem_layout_b(mma4, t4b, bf, 1),
            Xe=sm100_utils.make_smem_layout_b(mma4, t4a, bf, 1),
            Ta=sm100_utils.make_smem_layout_a(mma5, t5, bf, 1),
            Tk=sm100_utils.make_smem_layout_b(mma6, t5, bf, 1),
            DWt=sm100_utils.make_smem_layout_a(mma2, t2, bf, 1),
            DW=sm100_utils.make_smem_layout_a(mma4, t4a, bf, 1),
            DT=sm100_utils.make_smem_layout_b(mma5, t5, bf, 1),
            Y=sm100_utils.make_smem_layout_a(mma6, t5, bf, 1),
        )
        op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)

        def one(name):
            return cute.select(lay[name], mode=[0, 1, 2])

        tS0, gS0 = cute.nvgpu.make_tiled_tma_atom_A(op, mS0, one("S0"), t1, mma1)
        tDDb, gDDb = cute.nvgpu.make_tiled_tma_atom_B(op, mDDk, one("DDb"), t1, mma1)
        tTb, gTb = cute.nvgpu.make_tiled_tma_atom_B(op, mTmn, one("Tb"), t2, mma2)
        tDDt, gDDt = cute.nvgpu.make_tiled_tma_atom_A(op, mDDmn, one("DDt"), t3, mma3)
        tDDa, gDDa = cute.nvgpu.make_tiled_tma_atom_A(op, mDDk, one("DDa"), t4b, mma4)
        tU, gU = cute.nvgpu.make_tiled_tma_atom_B(op, mU, one("U"), t4b, mma4)
        tXe, gXe = cute.nvgpu.make_tiled_tma_atom_B(op, mXe, one("Xe"), t4a, mma4)
        tTa, gTa = cute.nvgpu.make_tiled_tma_atom_A(op, mTmn, one("Ta"), t5, mma5)
        tTk, gTk = cute.nvgpu.make_tiled_tma_atom_B(op, mTk, one("Tk"), t5, mma6)
        L = mDA.shape[2]
        self.kernel(mma1, mma2, mma3, mma4, mma4a, mma5, mma6,
                    tS0, gS0, tDDb, gDDb, tTb, gTb, tDDt, gDDt, tDDa, gDDa, tU, gU, tXe, gXe, tTa, gTa, tTk, gTk,
                    mDX, mDU, mDA,
                    lay["S0"], lay["DDb"], lay["Tb"], lay["DDt"], lay["DDa"], lay["U"], lay["Xe"], lay["Ta"],
                    lay["Tk"], lay["DWt"], lay["DW"], lay["DT"], lay["Y"]).launch(
            grid=[1, 1, L], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mma1: cute.TiledMma, mma2: cute.TiledMma, mma3: cute.TiledMma, mma4: cute.TiledMma,
               mma4a: cute.TiledMma, mma5: cute.TiledMma, mma6: cute.TiledMma,
               tS0: cute.CopyAtom, gS0: cute.Tensor, tDDb: cute.CopyAtom, gDDb: cute.Tensor,
               tTb: cute.CopyAtom, gTb: cute.Tensor, tDDt: cute.CopyAtom, gDDt: cute.Tensor,
               tDDa: cute.CopyAtom, gDDa: cute.Tensor, tU: cute.CopyAtom, gU: cute.Tensor,
               tXe: cute.CopyAtom, gXe: cute.Tensor, tTa: cute.CopyAtom, gTa: cute.Tensor,
               tTk: cute.CopyAtom, gTk: cute.Tensor,
               mDX: cute.Tensor, mDU: cute.Tensor, mDA: cute.Tensor,
               lS0: cute.ComposedLayout, lDDb: cute.ComposedLayout, lTb: cute.ComposedLayout,
               lDDt: cute.ComposedLayout, lDDa: cute.ComposedLayout, lU: cute.ComposedLayout,
               lXe: cute.ComposedLayout, lTa: cute.ComposedLayout, lTk: cute.ComposedLayout,
               lDWt: cute.ComposedLayout, lDW: cute.ComposedLayout, lDT: cute.ComposedLayout,
               lY: cute.ComposedLayout):
        K, V, C = self.K, self.V, self.C
        bf = cutlass.BFloat16
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        _, _, ch = cute.arch.block_idx()

        @cute.struct
        class Storage:
            ld_bar: cute.struct.MemRange[cutlass.Int64, 2]
            mma_bar: cute.struct.MemRange[cutlass.Int64, 4]
            tmem_holder: cutlass.Int32

        smem = cutlass.utils.SmemAllocator()
        st = smem.allocate(Storage)

        def sbuf(lay):
            return smem.allocate_tensor(element_type=bf, layout=lay.outer, byte_alignment=128, swizzle=lay.inner)

        sS0, sDDb, sTb, sDDt, sDDa = sbuf(lS0), sbuf(lDDb), sbuf(lTb), sbuf(lDDt), sbuf(lDDa)
        sU, sXe, sTa, sTk = sbuf(lU), sbuf(lXe), sbuf(lTa), sbuf(lTk)
        sDWt, sDW, sDT, sY = sbuf(lDWt), sbuf(lDW), sbuf(lDT), sbuf(lY)

        # the single TMEM allocation (power of two >= all accumulators' columns), made by warp 0
        tmem = utils.TmemAllocator(st.tmem_holder,
                                   barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=1, num_threads=THREADS))
        tmem.allocate(self.tmem_cols)
        mma_bar = st.mma_bar.data_ptr()
        if warp == 0:
            for d in (tS0, tDDb, tTb, tDDt, tDDa, tU, tXe, tTa, tTk):
                cpasync.prefetch_descriptor(d)
            with cute.arch.elect_one():
                for r in cutlass.range_constexpr(4):
                    cute.arch.mbarrier_init(mma_bar + r, 1)
            cute.arch.mbarrier_init_fence()

        load_bytes = 0
        for lay in (lS0, lDDb, lTb, lDDt, lDDa, lU, lXe, lTa, lTk):
            load_bytes += cute.size_in_bytes(bf, cute.select(lay, mode=[0, 1, 2]))
        ld_prod, ld_cons = pipeline.PipelineTmaUmma.create(
            num_stages=1, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread), tx_count=load_bytes,
            barrier_storage=st.ld_bar.data_ptr()).make_participants()
        pipeline.sync(barrier_id=2)  # mbarrier inits visible to every warp

        # TMA source/destination partitions of this chunk's operand views (one tile each)
        def tma_parts(atom, gview, sb, tiler, mma, proj, is_a):
            g = cute.local_tile(gview[None, None, ch], tiler, (0, 0, None), proj=proj)
            thr = mma.get_slice(0)
            tg = thr.partition_A(g) if is_a else thr.partition_B(g)
            return cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(sb, 0, 3),
                                         cute.group_modes(tg, 0, 3))

        pa, pb = (1, None, 1), (None, 1, 1)
        t1, t2, t3 = (K, C, V), (K, C, C), (V, C, C)
        t4b, t4a, t5 = (C, C, V), (C, C, K), (C, C, C)
        loads = [
            (tS0,) + tuple(tma_parts(tS0, gS0, sS0, t1, mma1, pa, True)),
            (tDDb,) + tuple(tma_parts(tDDb, gDDb, sDDb, t1, mma1, pb, False)),
            (tTb,) + tuple(tma_parts(tTb, gTb, sTb, t2, mma2, pb, False)),
            (tDDt,) + tuple(tma_parts(tDDt, gDDt, sDDt, t3, mma3, pa, True)),
            (tDDa,) + tuple(tma_parts(tDDa, gDDa, sDDa, t4b, mma4, pa, True)),
            (tU,) + tuple(tma_parts(tU, gU, sU, t4b, mma4, pb, False)),
            (tXe,) + tuple(tma_parts(tXe, gXe, sXe, t4a, mma4, pb, False)),
            (tTa,) + tuple(tma_parts(tTa, gTa, sTa, t5, mma5, pa, True)),
            (tTk,) + tuple(tma_parts(tTk, gTk, sTk, t5, mma6, pb, False)),
        ]

        # MMA operand fragments (single stage) and the accumulators at static TMEM column offsets
        rS0, rDDb = mma1.make_fragment_A(sS0), mma1.make_fragment_B(sDDb)
        rDWt, rTb = mma2.make_fragment_A(sDWt), mma2.make_fragment_B(sTb)
        rDDt, rTb3 = mma3.make_fragment_A(sDDt), mma3.make_fragment_B(sTb)
        rDDa, rU = mma4.make_fragment_A(sDDa), mma4.make_fragment_B(sU)
        rDW, rXe = mma4.make_fragment_A(sDW), mma4.make_fragment_B(sXe)
        rTa, rDT = mma5.make_fragment_A(sTa), mma5.make_fragment_B(sDT)
        rY, rTk = mma6.make_fragment_A(sY), mma6.make_fragment_B(sTk)

        tmem.wait_for_alloc()
        base = tmem.retrieve_ptr(cutlass.Float32)

        def acc(mma, mn, name):
            frag = mma.make_fragment_C(mma.partition_shape_C(mn))
            assert tcgen05.find_tmem_tensor_col_offset(frag) == mn[1], "TMEM plan: one fp32 column per N"
            return cute.make_tensor(base + self.offs[name], frag.layout)

        aG, aDX, aDU = acc(mma1, (K, C), "G"), acc(mma2, (K, C), "dXt"), acc(mma3, (V, C), "dUt")
        aDT, aY, aZ = acc(mma4, (C, C), "dT"), acc(mma5, (C, C), "Y"), acc(mma6, (C, C), "Z")

        def gemm(mma, d, a, b, first_accumulates):
            # one tcgen05.mma per 16-wide slice of the reduction (unrolled at trace time); every product has
            # its own TiledMma, so the ACCUMULATE field set here never escapes the warp-0 branch it is set in
            mma.set(tcgen05.Field.ACCUMULATE, first_accumulates)
            for kb in cutlass.range_constexpr(cute.size(a, mode=[2])):
                cute.gemm(mma, d, a[(None, None, kb, 0)], b[(None, None, kb, 0)], d)
                mma.set(tcgen05.Field.ACCUMULATE, True)

        def commit(bar):
            with cute.arch.elect_one():
                tcgen05.commit(bar)

        def t2r(a, M, N):
            """TMEM accumulator (M x N fp32) -> this thread's registers, and their (row, col) coordinates."""
            atom = sm100_utils.get_tmem_load_op((M, N, MMA_K), utils.LayoutEnum.ROW_MAJOR, cutlass.Float32,
                                                cutlass.Float32, (M, N), False)
            a2 = a[((None, None), 0, 0)]
            tcopy = tcgen05.make_tmem_copy(atom, a2)
            thr = tcopy.get_slice(tidx)
            src = thr.partition_S(a2)
            crd = thr.partition_D(cute.make_identity_tensor((M, N)))
            regs = cute.make_rmem_tensor(crd.shape, cutlass.Float32)
            cute.copy(tcopy, src, regs)
            return regs, crd

        def to_operand(regs, crd, dst, rows, transpose, scale):
            """Registers -> bf16 operand in shared memory. ``dst`` is one MMA-partitioned stage whose linear
            (colexicographic) index is m + rows * k; transpose swaps the accumulator's (row, col) into (k, m)."""
            # trace-time check of that indexing: mode 0 of the partitioned stage is (rows, 16), then 1, R/16
            assert cute.size(dst, mode=[0, 0]) == rows and cute.size(dst, mode=[0, 1]) == MMA_K
            assert cute.size(dst, mode=[1]) == 1
            for i in cutlass.range_constexpr(cute.size(regs)):
                r, c = crd[i]
                v = (regs[i] * scale).to(bf)
                if cutlass.const_expr(transpose):
                    dst[c + rows * r] = v
                else:
                    dst[r + rows * c] = v

        # ---- round 0: loads, then the products that need only inputs (P1, P3, P4b) ----
        if warp == 0:
            slot = ld_prod.acquire_and_advance()
            for atom, s_part, g_part in loads:
                cute.copy(atom, g_part[(None, 0)], s_part[(None, 0)], tma_bar_ptr=slot.barrier)
            full = ld_cons.wait_and_advance()
            gemm(mma1, aG, rS0, rDDb, False)
            gemm(mma3, aDU, rDDt, rTb3, False)
            gemm(mma4, aDT, rDDa, rU, False)
            full.release()
            commit(mma_bar + 0)
        cute.arch.mbarrier_wait(mma_bar + 0, 0)
        regs, crd = t2r(aG, K, C)
        # G = -dW^T: P2 wants dW^T (m = K-row, k = t), P4a wants dW (m = t, k = K-row)
        to_operand(regs, crd, sDWt[(None, None, None, 0)], K, False, -1.0)
        to_operand(regs, crd, sDW[(None, None, None, 0)], C, True, -1.0)
        cute.arch.fence_view_async_shared()
        pipeline.sync(barrier_id=2)

        # ---- round 1: P2, P4a ----
        if warp == 0:
            gemm(mma2, aDX, rDWt, rTb, False)
            gemm(mma4a, aDT, rDW, rXe, True)
            commit(mma_bar + 1)
        cute.arch.mbarrier_wait(mma_bar + 1, 0)
        regs, crd = t2r(aDT, C, C)
        # dT (row t, col s) -> P5's B operand (n = s, k = t)
        to_operand(regs, crd, sDT[(None, None, None, 0)], C, True, 1.0)
        cute.arch.fence_view_async_shared()
        pipeline.sync(barrier_id=2)

        # ---- round 2: P5 ----
        if warp == 0:
            gemm(mma5, aY, rTa, rDT, False)
            commit(mma_bar + 2)
        cute.arch.mbarrier_wait(mma_bar + 2, 0)
        regs, crd = t2r(aY, C, C)
        to_operand(regs, crd, sY[(None, None, None, 0)], C, False, 1.0)
        cute.arch.fence_view_async_shared()
        pipeline.sync(barrier_id=2)

        # ---- round 3: P6 ----
        if warp == 0:
            gemm(mma6, aZ, rY, rTk, False)
            commit(mma_bar + 3)
        cute.arch.mbarrier_wait(mma_bar + 3, 0)

        # ---- epilogue: TMEM -> registers -> float32 global ----
        gDX, gDU, gDA = mDX[None, None, ch], mDU[None, None, ch], mDA[None, None, ch]
        regs, crd = t2r(aDX, K, C)
        for i in cutlass.range_constexpr(cute.size(regs)):
            gDX[crd[i]] = regs[i]
        regs, crd = t2r(aDU, V, C)
        for i in cutlass.range_constexpr(cute.size(regs)):
            gDU[crd[i]] = regs[i]
        regs, crd = t2r(aZ, C, C)
        for i in cutlass.range_constexpr(cute.size(regs)):
            r, c = crd[i]
            z = cutlass.Float32(0.0)
            if c < r:
                z = -regs[i]
            gDA[crd[i]] = z

        tmem.relinquish_alloc_permit()
        pipeline.sync(barrier_id=1)
        tmem.free(base)


def compile_fake(cfg: dict):
    """Compile with fake tensors (no GPU): returns (compiled function, facts for the AOT report)."""
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    L, K, V, C = cfg["L"], cfg.get("K", 128), cfg["V"], cfg.get("C", 64)
    kern = WYTriInvVJP(K=K, V=V, C=C)
    bf, f32 = cutlass.BFloat16, cutlass.Float32

    def ft(dt, shape, stride):
        return make_fake_tensor(dt, shape, stride, assumed_align=16)

    args = [
        ft(bf, (K, V, L), (V, 1, K * V)),      # S0 = Hs [L, K, V]
        ft(bf, (C, V, L), (V, 1, C * V)),      # dd [L, C, V], K-major views
        ft(bf, (V, C, L), (1, V, C * V)),      # dd^T (MN-major view)
        ft(bf, (C, C, L), (1, C, C * C)),      # Tm, MN-major view
        ft(bf, (C, C, L), (C, 1, C * C)),      # Tm, K-major view
        ft(bf, (C, K, L), (K, 1, C * K)),      # Xe [L, C, K]
        ft(bf, (C, V, L), (V, 1, C * V)),      # U [L, C, V]
        ft(f32, (K, C, L), (1, K, C * K)),     # dXe [L, C, K] (accumulator orientation)
        ft(f32, (V, C, L), (1, V, C * V)),     # du [L, C, V]
        ft(f32, (C, C, L), (C, 1, C * C)),     # dA [L, C, C]
    ]
    fn = cute.compile(kern, *args, make_fake_stream())
    return fn, {"tmem_cols_planned": kern.tmem_cols, "tmem_cols_used": kern.cols_used, "threads": THREADS,
                "tmem_offsets": kern.offs,
                "smem_operand_bytes": smem_bytes(K, V, C), "expected_tcgen05_mma": expected_mma_count(K, V, C),
                "products": [dict(name=p["name"], mnr=list(p["mnr"])) for p in product_list(K, V, C)],
                "what": "K2: dXe = T^T dW, du = T^T dd, dA = -(T^T dT T^T)*strict with dW = -dd S0^T, "
                        "dT = dW Xe^T + dd U^T (all K2 matrix products, one chunk per CTA)"}
