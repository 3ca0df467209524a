"""K1, the whole reverse-time state scan, for Blackwell (sm_100a), tcgen05 / TMEM -- compiled, not executed (no B200).

K1 is :func:`lethe.kernels.gdn.chunked.reverse_state_scan`. Per (batch*head), chunks n = N-1 .. 0, with dS the gradient
of the chunk-end state (dS_final before the last chunk):

    dS_next[n] = dS                                   [K, V]   (output ``dSN``)
    dd[n]      = P_n^T dO_n + Kend_n dS               [C, V]   (output ``dd``)
    dS        <- Diag(GC_n) dS + Qg_n^T dO_n - Wm_n^T dd[n]
    dS0        = dS after chunk 0                     [K, V]   (output ``dS0``)

:mod:`.k1_blackwell` has only one of these products (``sum_n Qg_n^T dO_n``); this kernel is all of K1: the decay,
the erase term, the per-chunk outputs and dS_final. One CTA per (batch*head), 128 threads, the chunks in a runtime
loop; **dS stays in tensor memory in float32 for the whole loop** (the property the design rests on): it is read
to registers once per chunk (for dS_next, for its bf16 copy as an MMA operand, and to apply the decay GC, a row
scaling no MMA can do in place) and written back with ``tcgen05.st``; the MMAs accumulate onto it.

The products of one chunk, as tcgen05 MMAs (A operand M x R, B operand N x R, R the reduction; bf16 operands in
shared memory, fp32 accumulators in TMEM):

    Pa  dd  = P^T dO        M=C   N=V  R=C   (A = P^T: MN-major view of P; B = dO: MN-major view)
    Pb  dd += Kend dS       M=C   N=V  R=K   (A = Kend, K-major; B = dS, bf16 copy written by the CTA)
    Pc  dS += Qg^T dO       M=K   N=V  R=C   (A = Qg^T, MN-major view; B = dO, the same buffer as Pa's)
    Pd  dS += Wm^T (-dd)    M=K   N=V  R=C   (A = Wm^T, MN-major view; B = -dd, bf16 copy written by the CTA)

(R/16 ``tcgen05.mma`` each: 20 per chunk; without erase Pd is skipped, 16.) Rounds per chunk: (1) dS: TMEM ->
registers -> dSN[n] (global fp32) and bf16 operand; scaled by GC_n -> TMEM (``tcgen05.st``); (2) TMA loads of P,
Kend, dO, Qg, Wm; Pa, Pb -> commit; (3) dd: TMEM -> registers -> dd[n] (global fp32) and negated bf16 operand;
(4) Pc, Pd -> commit. Mechanics as :mod:`.k2_blackwell`: ONE TMEM allocation (dS at column 0, dd at column V;
2V columns used, allocated as the next power of two >= 32), one relinquish, one free; one TMA barrier and two MMA
barriers, each completing once per chunk and waited on phase ``i % 2``.

Precision: the operands, and the per-chunk copies of dS and dd that feed the MMAs, are bf16; every accumulation
and the carried dS are fp32. The float64 replay of this order is :func:`.k1_scan_model.model` (checked against
``reverse_state_scan`` in the tests). Not tuned: no overlap between the chunks' loads and MMAs, scalar
shared-memory stores of the copies.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import cpasync, tcgen05

THREADS = 128
MMA_K = 16
SUB = 32  # columns of an accumulator slice moved through registers at a time

K_MAJ = tcgen05.OperandMajorMode.K
MN_MAJ = tcgen05.OperandMajorMode.MN


def product_list(K: int = 128, V: int = 128, C: int = 64, erase: bool = True) -> list[dict]:
    """The tcgen05 products of one chunk: name, (M, N, R), the accumulator. Pure Python: the AOT test derives
    the expected ``tcgen05.mma`` count from it (sum of R / 16)."""
    ps = [dict(name="Pa dd=P^T dO", mnr=(C, V, C), acc="dd"),
          dict(name="Pb dd+=Kend dS", mnr=(C, V, K), acc="dd"),
          dict(name="Pc dS+=Qg^T dO", mnr=(K, V, C), acc="dS")]
    if erase:
        ps.append(dict(name="Pd dS+=Wm^T (-dd)", mnr=(K, V, C), acc="dS"))
    return ps


def tmem_plan(V: int = 128) -> tuple[dict, int, int]:
    """Static TMEM column offsets (one fp32 column per accumulator column), columns used, columns allocated."""
    offs = {"dS": 0, "dd": V}
    used = 2 * V
    alloc = 32
    while alloc < used:
        alloc *= 2
    return offs, used, alloc


def smem_bytes(K: int = 128, V: int = 128, C: int = 64) -> int:
    """Dynamic shared memory of the seven bf16 operand buffers: P, Kend, dO, Qg, Wm (TMA) and dS, -dd (written)."""
    return 2 * (C * C + C * K + V * C + K * C + K * C + V * K + V * C)


def expected_mma_count(K: int = 128, V: int = 128, C: int = 64, erase: bool = True) -> int:
    """tcgen05.mma instructions in the chunk loop's body (static count in the PTX)."""
    return sum(p["mnr"][2] // MMA_K for p in product_list(K, V, C, erase))


class ReverseScanBlackwell:
    """Compile-time configuration (K, V, C, erase, dS_final given) of the tcgen05 K1 kernel."""

    def __init__(self, K: int = 128, V: int = 128, C: int = 64, has_erase: bool = True, has_dsf: bool = True):
        if K != 128 or C != 64:
            raise ValueError("this kernel is written for K = 128 (MMA M of Pc/Pd) and chunk C = 64 (of Pa/Pb)")
        if V not in (64, 128):
            raise ValueError("V must be 64 or 128")
        self.K, self.V, self.C = K, V, C
        self.has_erase, self.has_dsf = has_erase, has_dsf
        self.offs, self.cols_used, self.tmem_cols = tmem_plan(V)

    def _mma(self, M, N, a_major, b_major):
        op = tcgen05.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (M, N, MMA_K), tcgen05.CtaGroup.ONE,
                                  tcgen05.OperandSource.SMEM, a_major, b_major)
        return cute.make_tiled_mma(op)

    @cute.jit
    def __call__(self, mP: cute.Tensor, mKend: cute.Tensor, mDO: cute.Tensor, mQg: cute.Tensor, mWm: cute.Tensor,
                 mGC: cute.Tensor, mDSF: cute.Tensor, mDSN: cute.Tensor, mDD: cute.Tensor, mDS0: cute.Tensor,
                 n_chunks: cutlass.Int32, stream):
        """Operand views over per-chunk row-major storage, L = batch*head*N chunks (chunk l = bh*N + n), bf16:
        mP (C, C, L) strides (1, C, C*C) of P [L, C, C] (P^T, MN-major); mKend (C, K, L) strides (K, 1, C*K);
        mDO (V, C, L) strides (1, V, C*V) of dO [L, C, V]; mQg, mWm (K, C, L) strides (1, K, C*K) of [L, C, K].
        float32: mGC (K, L) strides (1, K) of GC [L, K]; mDSF (K, V, BH) of dS_final [BH, K, V]; outputs
        mDSN (K, V, L) of dS_next [L, K, V], mDD (C, V, L) of dd [L, C, V], mDS0 (K, V, BH) of dS0 [BH, K, V]."""
        K, V, C = self.K, self.V, self.C
        bf = cutlass.BFloat16
        mma_a = self._mma(C, V, MN_MAJ, MN_MAJ)   # Pa: A = P^T (MN view), B = dO (MN view)
        mma_b = self._mma(C, V, K_MAJ, MN_MAJ)    # Pb: A = Kend, B = dS copy (written; MN-major: a thread's row is contiguous)
        mma_c = self._mma(K, V, MN_MAJ, MN_MAJ)   # Pc: A = Qg^T (MN view), B = dO (same buffer as Pa's B)
        mma_d = self._mma(K, V, MN_MAJ, MN_MAJ)   # Pd: A = Wm^T (MN view), B = -dd copy (written; MN-major)
        ta, tb, tc = (C, V, C), (C, V, K), (K, V, C)
        lay = dict(
            P=sm100_utils.make_smem_layout_a(mma_a, ta, bf, 1),
            DO=sm100_utils.make_smem_layout_b(mma_a, ta, bf, 1),
            Kend=sm100_utils.make_smem_layout_a(mma_b, tb, bf, 1),
            S=sm100_utils.make_smem_layout_b(mma_b, tb, bf, 1),
            Qg=sm100_utils.make_smem_layout_a(mma_c, tc, bf, 1),
            Wm=sm100_utils.make_smem_layout_a(mma_d, tc, bf, 1),
            D=sm100_utils.make_smem_layout_b(mma_d, tc, bf, 1),
        )
        op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)

        def one(name):
            return cute.select(lay[name], mode=[0, 1, 2])

        tP, gP = cute.nvgpu.make_tiled_tma_atom_A(op, mP, one("P"), ta, mma_a)
        tDO, gDO = cute.nvgpu.make_tiled_tma_atom_B(op, mDO, one("DO"), ta, mma_a)
        tKe, gKe = cute.nvgpu.make_tiled_tma_atom_A(op, mKend, one("Kend"), tb, mma_b)
        tQg, gQg = cute.nvgpu.make_tiled_tma_atom_A(op, mQg, one("Qg"), tc, mma_c)
        tWm, gWm = cute.nvgpu.make_tiled_tma_atom_A(op, mWm, one("Wm"), tc, mma_d)
        BH = mDS0.shape[2]
        self.kernel(mma_a, mma_b, mma_c, mma_d, tP, gP, tDO, gDO, tKe, gKe, tQg, gQg, tWm, gWm,
                    mGC, mDSF, mDSN, mDD, mDS0, n_chunks,
                    lay["P"], lay["DO"], lay["Kend"], lay["S"], lay["Qg"], lay["Wm"], lay["D"]).launch(
            grid=[1, 1, BH], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mma_a: cute.TiledMma, mma_b: cute.TiledMma, mma_c: cute.TiledMma, mma_d: cute.TiledMma,
               tP: cute.CopyAtom, gP: cute.Tensor, tDO: cute.CopyAtom, gDO: cute.Tensor,
               tKe: cute.CopyAtom, gKe: cute.Tensor, tQg: cute.CopyAtom, gQg: cute.Tensor,
               tWm: cute.CopyAtom, gWm: cute.Tensor,
               mGC: cute.Tensor, mDSF: cute.Tensor, mDSN: cute.Tensor, mDD: cute.Tensor, mDS0: cute.Tensor,
               n_chunks: cutlass.Int32,
               lP: cute.ComposedLayout, lDO: cute.ComposedLayout, lKe: cute.ComposedLayout,
               lS: cute.ComposedLayout, lQg: cute.ComposedLayout, lWm: cute.ComposedLayout,
               lD: cute.ComposedLayout):
        K, V, C = self.K, self.V, self.C
        bf = cutlass.BFloat16
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        _, _, bh = cute.arch.block_idx()

        @cute.struct
        class Storage:
            ld_bar: cute.struct.MemRange[cutlass.Int64, 1]
            mma_bar: cute.struct.MemRange[cutlass.Int64, 2]
            tmem_holder: cutlass.Int32

        smem = cutlass.utils.SmemAllocator()
        st = smem.allocate(Storage)

        def sbuf(lay):
            return smem.allocate_tensor(element_type=bf, layout=lay.outer, byte_alignment=128, swizzle=lay.inner)

        sP, sDO, sKe, sS, sQg, sWm, sD = sbuf(lP), sbuf(lDO), sbuf(lKe), sbuf(lS), sbuf(lQg), sbuf(lWm), sbuf(lD)

        tmem = utils.TmemAllocator(st.tmem_holder,
                                   barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=1, num_threads=THREADS))
        tmem.allocate(self.tmem_cols)
        mma_bar = st.mma_bar.data_ptr()
        ld_bar = st.ld_bar.data_ptr()
        if warp == 0:
            for d in (tP, tDO, tKe, tQg, tWm):
                cpasync.prefetch_descriptor(d)
            with cute.arch.elect_one():
                for r in cutlass.range_constexpr(2):
                    cute.arch.mbarrier_init(mma_bar + r, 1)
                cute.arch.mbarrier_init(ld_bar, 1)
            cute.arch.mbarrier_init_fence()

        loaded = (lP, lDO, lKe, lQg, lWm) if cutlass.const_expr(self.has_erase) else (lP, lDO, lKe, lQg)
        load_bytes = 0
        for lay in loaded:
            load_bytes += cute.size_in_bytes(bf, cute.select(lay, mode=[0, 1, 2]))
        # One load barrier, one phase per chunk: the next chunk's loads are issued only after every thread has
        # waited for this chunk's last MMAs (round 4), so the single operand stage is never overwritten in use.
        pipeline.sync(barrier_id=2)

        def tma_parts(atom, gview, sb, tiler, mma, proj, is_a, chunk):
            g = cute.local_tile(gview[None, None, chunk], tiler, (0, 0, None), proj=proj)
            thr = mma.get_slice(0)
            tg = thr.partition_A(g) if is_a else thr.partition_B(g)
            return cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(sb, 0, 3),
                                         cute.group_modes(tg, 0, 3))

        rP, rDOa = mma_a.make_fragment_A(sP), mma_a.make_fragment_B(sDO)
        rKe, rS = mma_b.make_fragment_A(sKe), mma_b.make_fragment_B(sS)
        rQg, rDOc = mma_c.make_fragment_A(sQg), mma_c.make_fragment_B(sDO)
        rWm, rD = mma_d.make_fragment_A(sWm), mma_d.make_fragment_B(sD)

        tmem.wait_for_alloc()
        base = tmem.retrieve_ptr(cutlass.Float32)

        def acc(mma, mn, name):
            frag = mma.make_fragment_C(mma.partition_shape_C(mn))
            assert tcgen05.find_tmem_tensor_col_offset(frag) == mn[1], "TMEM plan: one fp32 column per N"
            return cute.make_tensor(base + self.offs[name], frag.layout)

        aDS, aDD = acc(mma_c, (K, V), "dS"), acc(mma_a, (C, V), "dd")

        def gemm(mma, d, a, b, first_accumulates):
            mma.set(tcgen05.Field.ACCUMULATE, first_accumulates)
            for kb in cutlass.range_constexpr(cute.size(a, mode=[2])):
                cute.gemm(mma, d, a[(None, None, kb, 0)], b[(None, None, kb, 0)], d)
                mma.set(tcgen05.Field.ACCUMULATE, True)

        def commit(bar):
            with cute.arch.elect_one():
                tcgen05.commit(bar)

        # The accumulators are moved through registers in column slices of SUB (64) columns: a whole 128 x 128
        # fp32 row per thread would need the whole register file (ptxas: 255 registers and spills).
        mma_ss = self._mma(K, SUB, MN_MAJ, MN_MAJ)   # layout donors for the slices' TMEM views (never issued)
        mma_ds = self._mma(C, SUB, MN_MAJ, MN_MAJ)

        def tmem_slice(mma, M, name, h):
            """One SUB-column slice of an accumulator: its TMEM view, load copy, source partition, register
            fragment and the fragment's (row, col-within-slice) coordinates."""
            frag = mma.make_fragment_C(mma.partition_shape_C((M, SUB)))
            view = cute.make_tensor(base + self.offs[name] + h * SUB, frag.layout)
            atom = sm100_utils.get_tmem_load_op((M, SUB, MMA_K), utils.LayoutEnum.ROW_MAJOR, cutlass.Float32,
                                                cutlass.Float32, (M, SUB), False)
            a2 = view[((None, None), 0, 0)]
            ld = tcgen05.make_tmem_copy(atom, a2)
            thr = ld.get_slice(tidx)
            crd = thr.partition_D(cute.make_identity_tensor((M, SUB)))
            return a2, ld, thr.partition_S(a2), cute.make_rmem_tensor(crd.shape, cutlass.Float32), crd, thr

        def operand_rows_view(stage, rows, R):
            """A B-operand stage (linear index n + rows * k, checked at trace time) seen as [k, n]: the
            accumulator's (row, col) orientation, so a thread's register slice maps onto it like onto TMEM."""
            assert cute.size(stage, mode=[0, 0]) == rows and cute.size(stage, mode=[0, 1]) == MMA_K
            assert cute.size(stage, mode=[1]) == 1 and cute.size(stage) == rows * R
            return cute.make_tensor(stage.iterator,
                                    cute.composition(stage.layout, cute.make_layout((R, rows), stride=(rows, 1))))

        def to_operand(regs, thr, view, h, R, scale):
            """Registers of slice h -> bf16, into the operand view's matching [R, SUB] tile."""
            rb = cute.make_rmem_tensor(regs.shape, cutlass.BFloat16)
            rb.store((regs.load() * scale).to(cutlass.BFloat16))
            cute.autovec_copy(rb, thr.partition_D(cute.local_tile(view, (R, SUB), (0, h))))

        nsub = V // SUB
        dS_sl = [tmem_slice(mma_ss, K, "dS", h) for h in range(nsub)]
        dd_sl = [tmem_slice(mma_ds, C, "dd", h) for h in range(nsub)]
        dS_st = []
        for a2, ld, src, _regs, _crd, _ in dS_sl:
            st_copy = tcgen05.make_tmem_copy(
                cute.make_copy_atom(tcgen05.St32x32bOp(ld.op.repeat), cutlass.Float32), a2)
            dst = st_copy.get_slice(tidx).partition_D(a2)
            assert cute.size(dst) == cute.size(src), "TMEM load and store of a dS slice partition it alike"
            dS_st.append((st_copy, dst))

        # dS <- dS_final (or zero), into TMEM
        gF = mDSF[None, None, bh]
        for h in cutlass.range_constexpr(nsub):
            _, _, _, rg0, cr0, thr0 = dS_sl[h]
            if cutlass.const_expr(self.has_dsf):
                cute.autovec_copy(thr0.partition_D(cute.local_tile(gF, (K, SUB), (0, h))), rg0)
            else:
                rg0.fill(0.0)
            cute.copy(dS_st[h][0], rg0, dS_st[h][1])
        cute.arch.fence_view_async_tmem_store()
        pipeline.sync(barrier_id=2)

        vS = operand_rows_view(sS[(None, None, None, 0)], V, K)   # dS copy, [k, v]
        vD = operand_rows_view(sD[(None, None, None, 0)], V, C)   # -dd copy, [t, v]
        ta, tb, tc = (C, V, C), (C, V, K), (K, V, C)
        pa, pb = (1, None, 1), (None, 1, 1)
        for i in cutlass.range(n_chunks):
            n = n_chunks - 1 - i
            ch = bh * n_chunks + n
            phase = i % 2
            # ---- round 1: dS -> dS_next[n], its bf16 copy (Pb's B operand), decay by GC in TMEM ----
            gN = mDSN[None, None, ch]
            for h in cutlass.range_constexpr(nsub):
                _, ld_s, src_s, _rg, cr_s, thr_s = dS_sl[h]
                # a fresh fragment per use: one made outside the chunk loop would be carried through it (kept
                # live in registers across every iteration)
                rg_s = cute.make_rmem_tensor(cr_s.shape, cutlass.Float32)
                cute.copy(ld_s, src_s, rg_s)
                cute.autovec_copy(rg_s, thr_s.partition_D(cute.local_tile(gN, (K, SUB), (0, h))))
                to_operand(rg_s, thr_s, vS, h, K, 1.0)
                # 32x32b TMEM access: a thread holds one accumulator row (its TMEM lane), so one decay factor
                r2, _c2 = cr_s[0]
                gc = mGC[r2, ch]
                for j in cutlass.range_constexpr(cute.size(rg_s)):
                    rg_s[j] = rg_s[j] * gc
                cute.copy(dS_st[h][0], rg_s, dS_st[h][1])
            cute.arch.fence_view_async_tmem_store()
            cute.arch.fence_view_async_shared()
            pipeline.sync(barrier_id=2)
            # ---- round 2: this chunk's operands by TMA; Pa, Pb into the dd accumulator ----
            if warp == 0:
                loads = [(tP,) + tuple(tma_parts(tP, gP, sP, ta, mma_a, pa, True, ch)),
                         (tDO,) + tuple(tma_parts(tDO, gDO, sDO, ta, mma_a, pb, False, ch)),
                         (tKe,) + tuple(tma_parts(tKe, gKe, sKe, tb, mma_b, pa, True, ch)),
                         (tQg,) + tuple(tma_parts(tQg, gQg, sQg, tc, mma_c, pa, True, ch))]
                if cutlass.const_expr(self.has_erase):
                    loads.append((tWm,) + tuple(tma_parts(tWm, gWm, sWm, tc, mma_d, pa, True, ch)))
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx(ld_bar, load_bytes)
                for atom, s_part, g_part in loads:
                    cute.copy(atom, g_part[(None, 0)], s_part[(None, 0)], tma_bar_ptr=ld_bar)
                cute.arch.mbarrier_wait(ld_bar, phase)
                gemm(mma_a, aDD, rP, rDOa, False)
                gemm(mma_b, aDD, rKe, rS, True)
                commit(mma_bar + 0)
            cute.arch.mbarrier_wait(mma_bar + 0, phase)
            # ---- round 3: dd -> global, and its negated bf16 copy (Pd's B operand) ----
            gD = mDD[None, None, ch]
            for h in cutlass.range_constexpr(nsub):
                _, ld_d, src_d, _rg, cr_d, thr_d = dd_sl[h]
                rg_d = cute.make_rmem_tensor(cr_d.shape, cutlass.Float32)
                cute.copy(ld_d, src_d, rg_d)
                cute.autovec_copy(rg_d, thr_d.partition_D(cute.local_tile(gD, (C, SUB), (0, h))))
                if cutlass.const_expr(self.has_erase):
                    to_operand(rg_d, thr_d, vD, h, C, -1.0)
            cute.arch.fence_view_async_tmem_load()
            cute.arch.fence_view_async_shared()
            pipeline.sync(barrier_id=2)
            # ---- round 4: Pc, Pd accumulate onto dS in TMEM ----
            if warp == 0:
                gemm(mma_c, aDS, rQg, rDOc, True)
                if cutlass.const_expr(self.has_erase):
                    gemm(mma_d, aDS, rWm, rD, True)
                commit(mma_bar + 1)
            cute.arch.mbarrier_wait(mma_bar + 1, phase)

        # ---- dS0 ----
        g0 = mDS0[None, None, bh]
        for h in cutlass.range_constexpr(nsub):
            _, ld_f, src_f, rg_f, _cr_f, thr_f = dS_sl[h]
            cute.copy(ld_f, src_f, rg_f)
            cute.autovec_copy(rg_f, thr_f.partition_D(cute.local_tile(g0, (K, SUB), (0, h))))

        tmem.relinquish_alloc_permit()
        pipeline.sync(barrier_id=1)
        tmem.free(base)


def compile_fake(cfg: dict):
    """Compile with fake tensors (no GPU): returns (compiled function, facts for the AOT report)."""
    from cutlass.cute.runtime import make_fake_stream

    from .k1_views import fake_args

    BH, N, V = cfg.get("BH", 2), cfg.get("N", 4), cfg["V"]
    K, C = cfg.get("K", 128), cfg.get("C", 64)
    erase, dsf = cfg.get("erase", True), cfg.get("dsf", True)
    kern = ReverseScanBlackwell(K=K, V=V, C=C, has_erase=erase, has_dsf=dsf)
    fn = cute.compile(kern, *fake_args(BH * N, BH, C, K, V), cutlass.Int32(N), make_fake_stream())
    return fn, {"tmem_cols_planned": kern.tmem_cols, "tmem_cols_used": kern.cols_used, "threads": THREADS,
                "tmem_offsets": kern.offs, "has_erase": erase, "has_dsf": dsf,
                "smem_operand_bytes": smem_bytes(K, V, C),
                "expected_tcgen05_mma": expected_mma_count(K, V, C, erase),
                "products": [dict(name=p["name"], mnr=list(p["mnr"])) for p in product_list(K, V, C, erase)],
                "what": "K1: the whole reverse state scan (dS_next, dd per chunk, dS0; decay, erase, dS_final), "
                        "dS resident in TMEM across the chunk loop, one CTA per batch*head"}
