"""Pieces the two Hopper tensor-core kernels (:mod:`.k1_hopper_wgmma`, :mod:`.k2_hopper_wgmma`) share: how an
operand buffer is seen from the accumulator that writes it, one wgmma product over a reduction, an accumulator
fragment rounded into shared memory, and the TMA partitions of a chunk-indexed operand view. Called from inside
their ``@cute.kernel`` bodies (traced inline, no runtime call)."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync, warpgroup


def acc_view(s, swap: bool):
    """An operand buffer (rows, cols, stage) as its stage-0 tile, its two modes swapped when the accumulator that
    writes it has the transposed orientation (e.g. a B operand (N, R) written by an (R, N) accumulator)."""
    if swap:
        return cute.make_tensor(s.iterator, cute.select(s.layout, mode=[1, 0, 2]))[None, None, 0]
    return s[None, None, 0]


@cute.jit
def wgmma_product(tiled: cute.TiledMma, acc: cute.Tensor, a: cute.Tensor, b: cute.Tensor,
                  first_accumulates: cutlass.Constexpr):
    """One product: a wgmma per 16-wide slice of the reduction, accumulating after the first (a DSL function, so
    that its ``range_constexpr`` is unrolled at trace time like the kernels' own)."""
    tiled.set(warpgroup.Field.ACCUMULATE, first_accumulates)
    for kb in cutlass.range_constexpr(cute.size(a, mode=[2])):
        cute.gemm(tiled, acc, a[(None, None, kb, 0)], b[(None, None, kb, 0)], acc)
        tiled.set(warpgroup.Field.ACCUMULATE, True)


def store_scaled(regs, dst, dtype, scale):
    """A thread's accumulator fragment -> ``dst`` (its partition of a tensor in the accumulator's orientation),
    scaled, then converted to ``dtype``."""
    r = cute.make_rmem_tensor(regs.shape, dtype)
    r.store((regs.load() * scale).to(dtype))
    cute.autovec_copy(r, dst)


def tma_chunk_parts(atom, g, sb, tile):
    """TMA (shared, global) partitions of a chunk-indexed operand view ``g`` (tile, chunk) into buffer ``sb``."""
    gt = cute.local_tile(g, tile, (0, 0, None))
    return cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(sb, 0, 2),
                                 cute.group_modes(gt, 0, 2))
