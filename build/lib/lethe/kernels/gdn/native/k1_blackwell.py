"""A Blackwell (sm_100a) tcgen05 / TMEM kernel for one of K1's matrix products -- compiled, not executed (no B200).

What it is, exactly (and what it is not): the smallest honest tcgen05 piece of K1. K1 updates, per chunk n in
reverse, ``dS <- Diag(GC_n) dS + Qg_n^T dO_n - Wm_n^T dd_n``. For the LA member (no decay: GC = 1, Qg = q*scale;
no erase: no Wm term) the scan collapses to ``dS0 = dS_final + sum_n Qg_n^T dO_n``. This kernel computes
``sum_n Qg_n^T dO_n`` for every (batch*head): the reduction runs over all T = N*C time steps, one chunk
(C = 64 rows) per pipeline stage, and the dS tile ``[K=128, V]`` stays resident in tensor memory (TMEM) in
float32 across the whole chunk loop -- the property the full K1 relies on. It does not compute the per-chunk
outputs dS_next / d delta, the decay, the erase term, or add dS_final; the Hopper kernel (:mod:`.k1_hopper`) is
the complete K1.

Blackwell mechanics it exercises and that the AOT test checks from the generated PTX:

* ``tcgen05.mma`` (kind f16: bf16 operands from shared memory, float32 accumulator in TMEM), one CTA,
  instruction shape 128 x V x 16: A = Qg^T (M-major: Qg is stored ``[T, K]``), B = dO (N-major: ``[T, V]``);
* TMA bulk tensor loads of each chunk's Qg and dO into a multi-stage shared-memory ring (TMA -> UMMA pipeline);
* TMEM: ONE allocation of exactly the accumulator's columns (V fp32 columns for a 128-row tile, <= 512), the
  accumulator at static column offset 0, a single ``relinquish_alloc_permit`` and a single free;
* epilogue: ``tcgen05.ld`` (32 lanes x 32 bit) TMEM -> registers -> global float32.

Shapes: Qg ``[BH, T, K]`` bf16, dO ``[BH, T, V]`` bf16, out ``[BH, K, V]`` float32; K = 128, V in {64, 128, 256},
T a multiple of 64. Grid: one CTA per (batch*head), 128 threads (warp 0 issues TMA and MMA; all four warps
drain TMEM, one TMEM lane per thread).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import cpasync, tcgen05

AB_STAGES = 3
THREADS = 128


class QgTdOAccumulate:
    """Compile-time configuration (K, V, C) of the tcgen05 accumulation kernel."""

    def __init__(self, K: int = 128, V: int = 128, C: int = 64):
        if K != 128:
            raise ValueError("one-CTA tcgen05 tile: K (the MMA M) must be 128")
        if V not in (64, 128, 256):
            raise ValueError("V must be 64, 128 or 256 (MMA N, and a power-of-two TMEM allocation)")
        self.K, self.V, self.C = K, V, C
        self.mma_inst = (K, V, 16)
        self.tiler = (K, V, C)  # one chunk of C time steps per pipeline stage
        self.tmem_cols = V      # float32 accumulator 128 lanes x V columns, allocated once

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mDO: cute.Tensor, mOut: cute.Tensor, stream):
        """mQ: (K, T, BH) M-major view of Qg; mDO: (V, T, BH) N-major view of dO; mOut: (K, V, BH)."""
        op = tcgen05.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, self.mma_inst, tcgen05.CtaGroup.ONE,
                                  tcgen05.OperandSource.SMEM, tcgen05.OperandMajorMode.MN,
                                  tcgen05.OperandMajorMode.MN)
        tiled_mma = cute.make_tiled_mma(op)
        a_layout = sm100_utils.make_smem_layout_a(tiled_mma, self.tiler, mQ.element_type, AB_STAGES)
        b_layout = sm100_utils.make_smem_layout_b(tiled_mma, self.tiler, mDO.element_type, AB_STAGES)
        a_one = cute.select(a_layout, mode=[0, 1, 2])
        b_one = cute.select(b_layout, mode=[0, 1, 2])
        tma_op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
        tma_a, tma_q = cute.nvgpu.make_tiled_tma_atom_A(tma_op, mQ, a_one, self.tiler, tiled_mma)
        tma_b, tma_do = cute.nvgpu.make_tiled_tma_atom_B(tma_op, mDO, b_one, self.tiler, tiled_mma)
        BH = mOut.shape[2]
        self.kernel(tiled_mma, tma_a, tma_q, tma_b, tma_do, mOut, a_layout, b_layout).launch(
            grid=[1, 1, BH], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mQ: cute.Tensor, tma_b: cute.CopyAtom,
               mDO: cute.Tensor, mOut: cute.Tensor, a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        _, _, bh = cute.arch.block_idx()
        tile_coord = (0, 0, None)

        @cute.struct
        class Storage:
            ab_bar: cute.struct.MemRange[cutlass.Int64, AB_STAGES * 2]
            acc_bar: cute.struct.MemRange[cutlass.Int64, 2]
            tmem_holder: cutlass.Int32

        smem = cutlass.utils.SmemAllocator()
        st = smem.allocate(Storage)
        sA = smem.allocate_tensor(element_type=cutlass.BFloat16, layout=a_layout.outer, byte_alignment=128,
                                  swizzle=a_layout.inner)
        sB = smem.allocate_tensor(element_type=cutlass.BFloat16, layout=b_layout.outer, byte_alignment=128,
                                  swizzle=b_layout.inner)

        # the single TMEM allocation: exactly the accumulator's columns, made by warp 0
        tmem = utils.TmemAllocator(st.tmem_holder,
                                   barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=1, num_threads=THREADS))
        tmem.allocate(self.tmem_cols)
        if warp == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)

        stage_bytes = (cute.size_in_bytes(cutlass.BFloat16, cute.select(a_layout, mode=[0, 1, 2]))
                       + cute.size_in_bytes(cutlass.BFloat16, cute.select(b_layout, mode=[0, 1, 2])))
        ab_prod, ab_cons = pipeline.PipelineTmaUmma.create(
            num_stages=AB_STAGES, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread), tx_count=stage_bytes,
            barrier_storage=st.ab_bar.data_ptr()).make_participants()
        acc_prod, acc_cons = pipeline.PipelineUmmaAsync.create(
            num_stages=1, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, THREADS),
            barrier_storage=st.acc_bar.data_ptr()).make_participants()

        # this (batch*head)'s operands, tiled by chunk along time: (bM, bK, chunks) and (bN, bK, chunks)
        gQ = cute.local_tile(mQ[None, None, bh], self.tiler, tile_coord, proj=(1, None, 1))
        gDO = cute.local_tile(mDO[None, None, bh], self.tiler, tile_coord, proj=(None, 1, 1))
        gOut = cute.local_tile(mOut[None, None, bh], self.tiler, tile_coord, proj=(1, 1, None))
        thr = tiled_mma.get_slice(0)
        tCgQ = thr.partition_A(gQ)
        tCgDO = thr.partition_B(gDO)
        tCgOut = thr.partition_C(gOut)
        tCrA = tiled_mma.make_fragment_A(sA)
        tCrB = tiled_mma.make_fragment_B(sB)
        tCtAcc = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C(self.tiler[:2]))
        tAsA, tAgQ = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 3),
                                           cute.group_modes(tCgQ, 0, 3))
        tBsB, tBgDO = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 3),
                                            cute.group_modes(tCgDO, 0, 3))

        tmem.wait_for_alloc()
        # static column offset 0 of the one allocation holds the whole dS tile for the whole loop
        tCtAcc = cute.make_tensor(tmem.retrieve_ptr(cutlass.Float32), tCtAcc.layout)

        n_chunks = cute.size(gQ, mode=[2])
        if warp == 0:
            acc_empty = acc_prod.acquire_and_advance()
            for _n in cutlass.range(n_chunks, prefetch_stages=AB_STAGES - 2):
                slot = ab_prod.acquire_and_advance()
                cute.copy(tma_a, tAgQ[(None, slot.count)], tAsA[(None, slot.index)], tma_bar_ptr=slot.barrier)
                cute.copy(tma_b, tBgDO[(None, slot.count)], tBsB[(None, slot.index)], tma_bar_ptr=slot.barrier)
                full = ab_cons.wait_and_advance()
                for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
                    crd = (None, None, kb, full.index)
                    cute.gemm(tiled_mma, tCtAcc, tCrA[crd], tCrB[crd], tCtAcc)
                    # the first product of the first chunk initializes TMEM; every later one accumulates
                    tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                full.release()
            acc_empty.commit()

        tmem.relinquish_alloc_permit()
        acc_full = acc_cons.wait_and_advance()
        # TMEM -> registers (one TMEM lane = one dS row per thread) -> global float32
        ld = cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x32), cutlass.Float32)
        sub = 32
        tiler_epi = ((cute.size(tCtAcc, mode=[0, 0]), cute.size(tCtAcc, mode=[0, 1]) // (self.V // sub)),)
        tAcc_epi = cute.zipped_divide(tCtAcc, tiler_epi)
        gOut_epi = cute.zipped_divide(tCgOut, tiler_epi)
        tcopy = tcgen05.make_tmem_copy(ld, tAcc_epi[None, 0])
        tthr = tcopy.get_slice(tidx)
        tDt = tthr.partition_S(tAcc_epi)
        tDg = tthr.partition_D(gOut_epi)
        regs = cute.make_rmem_tensor(tDg[None, None, 0].shape, cutlass.Float32)
        for i in cutlass.range(cute.size(tDt, mode=[2])):
            cute.copy(tcopy, tDt[None, None, i], regs)
            cute.autovec_copy(regs, tDg[None, None, i])
        acc_full.release()
        pipeline.sync(barrier_id=1)
        tmem.free(tCtAcc.iterator)


def compile_fake(cfg: dict):
    """Compile with fake tensors (no GPU): returns (compiled function, facts for the AOT report)."""
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    BH, T, K, V = cfg["BH"], cfg["T"], cfg.get("K", 128), cfg["V"]
    kern = QgTdOAccumulate(K=K, V=V, C=cfg.get("C", 64))
    q = make_fake_tensor(cutlass.BFloat16, (K, T, BH), (1, K, T * K), assumed_align=16)
    do = make_fake_tensor(cutlass.BFloat16, (V, T, BH), (1, V, T * V), assumed_align=16)
    out = make_fake_tensor(cutlass.Float32, (K, V, BH), (V, 1, K * V), assumed_align=16)
    fn = cute.compile(kern, q, do, out, make_fake_stream())
    return fn, {"tmem_cols_planned": kern.tmem_cols, "ab_stages": AB_STAGES, "threads": THREADS,
                "mma_inst_shape": list(kern.mma_inst), "what": "sum_n Qg_n^T dO_n (LA member's dS0 - dS_final)"}
