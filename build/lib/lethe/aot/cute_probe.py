"""A small Blackwell (sm_100a) tcgen05 / TMEM kernel in the CuTe DSL, used to prove the CPU-only AOT route.

Only importable where ``nvidia-cutlass-dsl`` is installed (the side venv ``cache/venvs/cutlass-dsl-4.8.1``);
:mod:`lethe.aot.cute_dsl` runs it there. Compiled, not executed: there is no B200 here, and nothing checks this
kernel's numbers; it exists so the compile check has a real tcgen05 kernel to look at.

The kernel is one output tile per CTA of C = A @ B^T (bf16 in, fp32 accumulate in tensor memory, bf16 out). It
follows the TMEM discipline the native GDN kernels are meant to keep: **one** allocation sized to the
accumulator (a power of two >= 32 columns), fixed column offsets inside it, one ``relinquish_alloc_permit`` and
one ``free``. Warp 0 issues the TMA loads and the MMAs; all four warps drain the accumulator.

No ``from __future__ import annotations`` here: the DSL reads the struct and kernel annotations as objects.
"""


import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blackwell_helpers as sm100
from cutlass.cute.nvgpu import cpasync, tcgen05

THREADS = 128
IO = cutlass.BFloat16
ACC = cutlass.Float32


def tmem_columns_for(tile_n: int, acc_stages: int) -> int:
    """Columns to allocate: fp32 accumulators of a 128-row MMA take one column per output column."""
    need = tile_n * acc_stages
    cols = 32
    while cols < need:
        cols *= 2
    return cols


def make_probe(tile_n: int = 128, tile_k: int = 64, stages: int = 3):
    """Build the @cute.jit host function for one tile shape (128 x tile_n x tile_k, `stages` smem stages)."""
    mma_tiler = (128, tile_n, tile_k)
    inst_shape = (128, tile_n, 16)
    tmem_cols = tmem_columns_for(tile_n, 1)

    @cute.struct
    class Shared:
        ab_bars: cute.struct.MemRange[cutlass.Int64, stages * 2]
        acc_bars: cute.struct.MemRange[cutlass.Int64, 2]
        tmem_addr: cutlass.Int32

    @cute.kernel
    def probe_kernel(mma: cute.TiledMma, tma_a: cute.CopyAtom, ga_full: cute.Tensor, tma_b: cute.CopyAtom,
                     gb_full: cute.Tensor, gc_full: cute.Tensor, a_layout: cute.ComposedLayout,
                     b_layout: cute.ComposedLayout):
        tid, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        bx, by, _ = cute.arch.block_idx()
        tile = (bx, by, None)

        smem = utils.SmemAllocator()
        shared = smem.allocate(Shared)
        sa = smem.allocate_tensor(element_type=IO, layout=a_layout.outer, byte_alignment=128,
                                  swizzle=a_layout.inner)
        sb = smem.allocate_tensor(element_type=IO, layout=b_layout.outer, byte_alignment=128,
                                  swizzle=b_layout.inner)

        # The single TMEM allocation of this kernel.
        tmem = utils.TmemAllocator(shared.tmem_addr,
                                   barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=1, num_threads=THREADS))
        tmem.allocate(tmem_cols)

        stage_bytes = (cute.size_in_bytes(IO, cute.select(a_layout, mode=[0, 1, 2]))
                       + cute.size_in_bytes(IO, cute.select(b_layout, mode=[0, 1, 2])))
        load_prod, load_cons = pipeline.PipelineTmaUmma.create(
            num_stages=stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            tx_count=stage_bytes,
            barrier_storage=shared.ab_bars.data_ptr(),
        ).make_participants()
        acc_prod, acc_cons = pipeline.PipelineUmmaAsync.create(
            num_stages=1,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, THREADS),
            barrier_storage=shared.acc_bars.data_ptr(),
        ).make_participants()

        ga = cute.local_tile(ga_full, mma_tiler, tile, proj=(1, None, 1))
        gb = cute.local_tile(gb_full, mma_tiler, tile, proj=(None, 1, 1))
        gc = cute.local_tile(gc_full, mma_tiler, tile, proj=(1, 1, None))
        part = mma.get_slice(0)
        frag_a = mma.make_fragment_A(sa)
        frag_b = mma.make_fragment_B(sb)
        acc_layout = mma.make_fragment_C(mma.partition_shape_C(mma_tiler[:2])).layout
        ta_s, ta_g = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sa, 0, 3),
                                           cute.group_modes(part.partition_A(ga), 0, 3))
        tb_s, tb_g = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sb, 0, 3),
                                           cute.group_modes(part.partition_B(gb), 0, 3))

        tmem.wait_for_alloc()
        base = tmem.retrieve_ptr(ACC)
        acc = cute.make_tensor(base, acc_layout)  # column offset 0 of the allocation, fixed at compile time

        if warp == 0:
            acc_slot = acc_prod.acquire_and_advance()
            for _k in cutlass.range(cute.size(ga, mode=[2])):
                slot = load_prod.acquire_and_advance()
                cute.copy(tma_a, ta_g[(None, slot.count)], ta_s[(None, slot.index)], tma_bar_ptr=slot.barrier)
                cute.copy(tma_b, tb_g[(None, slot.count)], tb_s[(None, slot.index)], tma_bar_ptr=slot.barrier)
                full = load_cons.wait_and_advance()
                for kb in cutlass.range_constexpr(cute.size(frag_a, mode=[2])):
                    cute.gemm(mma, acc, frag_a[(None, None, kb, full.index)], frag_b[(None, None, kb, full.index)],
                              acc)
                    mma.set(tcgen05.Field.ACCUMULATE, True)
                full.release()
            acc_slot.commit()

        tmem.relinquish_alloc_permit()

        # Drain: TMEM -> registers -> global, 32 columns per step.
        chunks = tile_n // 32
        epi = ((cute.size(acc, mode=[0, 0]), cute.size(acc, mode=[0, 1]) // chunks),)
        acc_epi = cute.zipped_divide(acc, epi)
        gc_epi = cute.zipped_divide(part.partition_C(gc), epi)
        ld = tcgen05.make_tmem_copy(cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x32), ACC),
                                    acc_epi[None, 0])
        thr = ld.get_slice(tid)
        src = thr.partition_S(acc_epi)
        dst = thr.partition_D(gc_epi)
        regs = cute.make_rmem_tensor(dst[None, None, 0].shape, ACC)
        out = cute.make_rmem_tensor(dst[None, None, 0].shape, IO)
        ready = acc_cons.wait_and_advance()
        for i in cutlass.range(cute.size(src, mode=[2])):
            cute.copy(ld, src[None, None, i], regs)
            out.store(regs.load().to(IO))
            cute.autovec_copy(out, dst[None, None, i])
        ready.release()

        pipeline.sync(barrier_id=1)
        tmem.free(base)

    @cute.jit
    def host(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor):
        mma = cute.make_tiled_mma(tcgen05.MmaF16BF16Op(
            IO, ACC, inst_shape, tcgen05.CtaGroup.ONE, tcgen05.OperandSource.SMEM,
            tcgen05.OperandMajorMode.K, tcgen05.OperandMajorMode.K))
        a_layout = sm100.make_smem_layout_a(mma, mma_tiler, a.element_type, stages)
        b_layout = sm100.make_smem_layout_b(mma, mma_tiler, b.element_type, stages)
        g2s = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
        tma_a, ga = cute.nvgpu.make_tiled_tma_atom_A(g2s, a, cute.select(a_layout, mode=[0, 1, 2]), mma_tiler, mma)
        tma_b, gb = cute.nvgpu.make_tiled_tma_atom_B(g2s, b, cute.select(b_layout, mode=[0, 1, 2]), mma_tiler, mma)
        grid = cute.ceil_div((*c.layout.shape, 1), mma_tiler[:2])
        probe_kernel(mma, tma_a, ga, tma_b, gb, c, a_layout, b_layout).launch(grid=grid, block=(THREADS, 1, 1))

    return host, tmem_cols
