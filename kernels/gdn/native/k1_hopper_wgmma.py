"""K1, the reverse-time state scan, on Hopper tensor cores (sm_90a: TMA + wgmma), run on the H200 as the K1 of the
``hybrid-tc`` backend (results/native/bench.json, docs/native.md).

Same K1 as :mod:`.k1_hopper` (the SIMT float32 kernel that runs on the H200) and as :mod:`.k1_blackwell_scan`
(its Blackwell twin, whose product order this kernel shares, so :func:`.k1_scan_model.model` replays both):

    dS_next[n] = dS;   dd[n] = P_n^T dO_n + Kend_n dS;   dS <- Diag(GC_n) dS + Qg_n^T dO_n - Wm_n^T dd[n]

Why: the kernel profile on the H200 (paper/tables/native_profile.md) puts our Triton scan far behind fla's at 2^20
head-tokens, and the SIMT kernel is shared-memory bound. This one runs the four products on wgmma (bf16
operands, fp32 accumulation) with **dS resident in registers in fp32 across the whole chunk loop**.

One CTA per (batch*head), 256 threads = two warpgroups. dS [K=128, V] is the accumulator of a tiled MMA with two
64-row atoms (warpgroup w owns rows 64w..64w+63); dd [C=64, V] is split by columns (warpgroup w owns V/2 of them).
Per chunk: (1) dS -> dS_next[n] (global fp32) and a bf16 copy in shared memory, then the decay GC_n in registers;
(2) TMA loads of P, Kend, dO, Qg, Wm (one mbarrier, phase i % 2); ``dd = P^T dO`` (4 wgmma per warpgroup) and
``dd += Kend dS`` (8); (3) dd -> dd[n] (global fp32) and a negated bf16 copy; (4) ``dS += Qg^T dO`` (4) and
``dS += Wm^T (-dd)`` (4). Each round ends with ``wait_group 0`` and a CTA barrier: no overlap yet (not tuned).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.utils import LayoutEnum

from .hopper_wgmma_common import acc_view, store_scaled, tma_chunk_parts, wgmma_product

THREADS = 256
MMA_K = 16
KM = LayoutEnum.ROW_MAJOR   # K-major operand
MN = LayoutEnum.COL_MAJOR   # MN-major operand


def expected_wgmma_count(K: int = 128, V: int = 128, C: int = 64, erase: bool = True, split: bool = False) -> int:
    """wgmma instructions per warpgroup in the chunk loop's body (static count in the PTX): one per 16 of each
    product's reduction (the Blackwell K1's count); ``split`` adds the remainder products P_lo^T dO and
    Qg_lo^T dO."""
    return (C // MMA_K + K // MMA_K + C // MMA_K + (C // MMA_K if erase else 0)
            + (2 * (C // MMA_K) if split else 0))


def smem_bytes(K: int = 128, V: int = 128, C: int = 64, split: bool = False) -> int:
    """The bf16 operand buffers: P, Kend, dO, Qg, Wm (TMA) and the dS, -dd copies; P_lo, Qg_lo with ``split``."""
    return 2 * (C * C + C * K + V * C + K * C + K * C + V * K + V * C + ((C * C + K * C) if split else 0))


class ReverseScanHopperWgmma:
    """Compile-time configuration (K, V, C, erase, dS_final given)."""

    def __init__(self, K: int = 128, V: int = 128, C: int = 64, has_erase: bool = True, has_dsf: bool = True,
                 split: bool = False):
        if K != 128 or C != 64:
            raise ValueError("written for K = 128 (two 64-row wgmma atoms) and chunk C = 64")
        if V not in (64, 128):
            raise ValueError("V must be 64 or 128")
        self.K, self.V, self.C = K, V, C
        self.has_erase, self.has_dsf = has_erase, has_dsf
        # split: P and Qg arrive as bf16 pairs (hi, lo = x - hi), so P^T dO and Qg^T dO -- whose other operand,
        # dO, is exact in bf16 for bf16 models -- lose ~16 bits instead of ~8. On GDN data the rounding of P
        # dominates dd's error and that of Qg dominates dS0's (docs/native.md).
        self.split = split

    @cute.jit
    def __call__(self, mP: cute.Tensor, mKend: cute.Tensor, mDO: cute.Tensor, mQg: cute.Tensor, mWm: cute.Tensor,
                 mGC: cute.Tensor, mDSF: cute.Tensor, mDSN: cute.Tensor, mDD: cute.Tensor, mDS0: cute.Tensor,
                 mPlo: cute.Tensor, mQglo: cute.Tensor, n_chunks: cutlass.Int32, stream):
        """Views as :class:`.k1_blackwell_scan.ReverseScanBlackwell` (bf16 operands over per-chunk row-major
        storage, chunk l = bh * N + n; float32 GC, dS_final and outputs)."""
        K, V, C = self.K, self.V, self.C
        bf, f32 = cutlass.BFloat16, cutlass.Float32
        # Pa: A = P^T (MN), B = dO (MN); Pb: A = Kend (K), B = dS copy (MN); both onto the dd accumulator,
        # whose two warpgroups split the V columns. Pc / Pd: A = Qg^T / Wm^T (MN), B = dO / -dd copy (MN), onto
        # dS, whose two warpgroups split the K rows.
        mma_pa = sm90_utils.make_trivial_tiled_mma(bf, bf, MN.sm90_mma_major_mode(), MN.sm90_mma_major_mode(),
                                                   f32, (1, 2, 1), (C, V // 2))
        mma_pb = sm90_utils.make_trivial_tiled_mma(bf, bf, KM.sm90_mma_major_mode(), MN.sm90_mma_major_mode(),
                                                   f32, (1, 2, 1), (C, V // 2))
        mma_ds = sm90_utils.make_trivial_tiled_mma(bf, bf, MN.sm90_mma_major_mode(), MN.sm90_mma_major_mode(),
                                                   f32, (2, 1, 1), (K // 2, V))
        ta, tb, tc = (C, V, C), (C, V, K), (K, V, C)
        lay = dict(
            P=sm90_utils.make_smem_layout_a(MN, ta, bf, 1),
            DO=sm90_utils.make_smem_layout_b(MN, ta, bf, 1),
            Kend=sm90_utils.make_smem_layout_a(KM, tb, bf, 1),
            S=sm90_utils.make_smem_layout_b(MN, tb, bf, 1),
            Qg=sm90_utils.make_smem_layout_a(MN, tc, bf, 1),
            Wm=sm90_utils.make_smem_layout_a(MN, tc, bf, 1),
            D=sm90_utils.make_smem_layout_b(MN, tc, bf, 1),
        )
        op = cpasync.CopyBulkTensorTileG2SOp()

        def tma(m, name, tile):
            return cpasync.make_tiled_tma_atom(op, m, cute.slice_(lay[name], (None, None, 0)), tile)

        tP, gP = tma(mP, "P", (C, C))
        tDO, gDO = tma(mDO, "DO", (V, C))
        tKe, gKe = tma(mKend, "Kend", (C, K))
        tQg, gQg = tma(mQg, "Qg", (K, C))
        tWm, gWm = tma(mWm, "Wm", (K, C))
        tPlo, gPlo = tma(mPlo, "P", (C, C))
        tQglo, gQglo = tma(mQglo, "Qg", (K, C))
        BH = mDS0.shape[2]
        self.kernel(mma_pa, mma_pb, mma_ds, tP, gP, tDO, gDO, tKe, gKe, tQg, gQg, tWm, gWm, tPlo, gPlo, tQglo, gQglo,
                    mGC, mDSF, mDSN, mDD, mDS0, n_chunks,
                    lay["P"], lay["DO"], lay["Kend"], lay["S"], lay["Qg"], lay["Wm"], lay["D"]).launch(
            grid=[1, 1, BH], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mma_pa: cute.TiledMma, mma_pb: cute.TiledMma, mma_ds: cute.TiledMma,
               tP: cute.CopyAtom, gP: cute.Tensor, tDO: cute.CopyAtom, gDO: cute.Tensor,
               tKe: cute.CopyAtom, gKe: cute.Tensor, tQg: cute.CopyAtom, gQg: cute.Tensor,
               tWm: cute.CopyAtom, gWm: cute.Tensor, tPlo: cute.CopyAtom, gPlo: cute.Tensor,
               tQglo: cute.CopyAtom, gQglo: cute.Tensor,
               mGC: cute.Tensor, mDSF: cute.Tensor, mDSN: cute.Tensor, mDD: cute.Tensor, mDS0: cute.Tensor,
               n_chunks: cutlass.Int32,
               lP: cute.ComposedLayout, lDO: cute.ComposedLayout, lKe: cute.ComposedLayout,
               lS: cute.ComposedLayout, lQg: cute.ComposedLayout, lWm: cute.ComposedLayout,
               lD: cute.ComposedLayout):
        K, V, C = self.K, self.V, self.C
        bf, f32 = cutlass.BFloat16, cutlass.Float32
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = cute.arch.make_warp_uniform(tidx // 128)
        _, _, bh = cute.arch.block_idx()

        @cute.struct
        class Storage:
            ld_bar: cute.struct.MemRange[cutlass.Int64, 1]

        smem = cutlass.utils.SmemAllocator()
        st = smem.allocate(Storage)

        def sbuf(lay):
            return smem.allocate_tensor(element_type=bf, layout=lay.outer, byte_alignment=128, swizzle=lay.inner)

        sP, sDO, sKe, sS, sQg, sWm, sD = sbuf(lP), sbuf(lDO), sbuf(lKe), sbuf(lS), sbuf(lQg), sbuf(lWm), sbuf(lD)
        sPlo, sQglo = sP, sQg  # replaced below in split mode; unread otherwise
        if cutlass.const_expr(self.split):
            sPlo, sQglo = sbuf(lP), sbuf(lQg)
        ld_bar = st.ld_bar.data_ptr()
        if warp == 0:
            for d in (tP, tDO, tKe, tQg, tWm):
                cpasync.prefetch_descriptor(d)
            with cute.arch.elect_one():
                cute.arch.mbarrier_init(ld_bar, 1)
            cute.arch.mbarrier_init_fence()
        loaded = (lP, lDO, lKe, lQg, lWm) if cutlass.const_expr(self.has_erase) else (lP, lDO, lKe, lQg)
        if cutlass.const_expr(self.split):
            loaded = loaded + (lP, lQg)
        load_bytes = 0
        for lay in loaded:
            load_bytes += cute.size_in_bytes(bf, cute.slice_(lay, (None, None, 0)))
        cute.arch.sync_threads()

        # TMA partitions of the chunk-indexed operand views: (tile, chunk)
        pP, pDO = tma_chunk_parts(tP, gP, sP, (C, C)), tma_chunk_parts(tDO, gDO, sDO, (V, C))
        pKe, pQg = tma_chunk_parts(tKe, gKe, sKe, (C, K)), tma_chunk_parts(tQg, gQg, sQg, (K, C))
        pWm = tma_chunk_parts(tWm, gWm, sWm, (K, C))
        pPlo, pQglo = tma_chunk_parts(tPlo, gPlo, sPlo, (C, C)), tma_chunk_parts(tQglo, gQglo, sQglo, (K, C))

        # operand fragments (warpgroup slices) and per-thread accumulator partitions
        wpa, wpb, wds = mma_pa.get_slice(wg * 128), mma_pb.get_slice(wg * 128), mma_ds.get_slice(wg * 128)
        rP, rDOa = mma_pa.make_fragment_A(wpa.partition_A(sP)), mma_pa.make_fragment_B(wpa.partition_B(sDO))
        rKe, rS = mma_pb.make_fragment_A(wpb.partition_A(sKe)), mma_pb.make_fragment_B(wpb.partition_B(sS))
        rQg, rDOc = mma_ds.make_fragment_A(wds.partition_A(sQg)), mma_ds.make_fragment_B(wds.partition_B(sDO))
        rWm, rD = mma_ds.make_fragment_A(wds.partition_A(sWm)), mma_ds.make_fragment_B(wds.partition_B(sD))
        rPlo, rQglo = mma_pa.make_fragment_A(wpa.partition_A(sPlo)), mma_ds.make_fragment_A(wds.partition_A(sQglo))
        tds, tdd = mma_ds.get_slice(tidx), mma_pa.get_slice(tidx)
        cS = tds.partition_C(cute.make_identity_tensor((K, V)))
        accS = cute.make_rmem_tensor(cS.shape, f32)
        accD = cute.make_rmem_tensor(tdd.partition_C(cute.make_identity_tensor((C, V))).shape, f32)
        vS, vD = acc_view(sS, True), acc_view(sD, True)   # the bf16 copies in accumulator orientation
        tS_s, tD_s = tds.partition_C(vS), tdd.partition_C(vD)

        if cutlass.const_expr(self.has_dsf):
            cute.autovec_copy(tds.partition_C(mDSF[None, None, bh]), accS)
        else:
            accS.fill(0.0)
        accD.fill(0.0)

        for i in cutlass.range(n_chunks):
            n = n_chunks - 1 - i
            ch = bh * n_chunks + n
            # ---- round 1: dS -> dS_next[n] and its bf16 copy; the decay, in registers ----
            cute.autovec_copy(accS, tds.partition_C(mDSN[None, None, ch]))
            store_scaled(accS, tS_s, cutlass.BFloat16, 1.0)
            for j in cutlass.range_constexpr(cute.size(accS)):
                r, _c = cS[j]
                accS[j] = accS[j] * mGC[r, ch]
            cute.arch.fence_view_async_shared()
            cute.arch.sync_threads()
            # ---- round 2: this chunk's operands by TMA; Pa, Pb into dd ----
            if warp == 0:
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx(ld_bar, load_bytes)
                cute.copy(tP, pP[1][(None, ch)], pP[0][(None, 0)], tma_bar_ptr=ld_bar)
                cute.copy(tDO, pDO[1][(None, ch)], pDO[0][(None, 0)], tma_bar_ptr=ld_bar)
                cute.copy(tKe, pKe[1][(None, ch)], pKe[0][(None, 0)], tma_bar_ptr=ld_bar)
                cute.copy(tQg, pQg[1][(None, ch)], pQg[0][(None, 0)], tma_bar_ptr=ld_bar)
                if cutlass.const_expr(self.has_erase):
                    cute.copy(tWm, pWm[1][(None, ch)], pWm[0][(None, 0)], tma_bar_ptr=ld_bar)
                if cutlass.const_expr(self.split):
                    cute.copy(tPlo, pPlo[1][(None, ch)], pPlo[0][(None, 0)], tma_bar_ptr=ld_bar)
                    cute.copy(tQglo, pQglo[1][(None, ch)], pQglo[0][(None, 0)], tma_bar_ptr=ld_bar)
            cute.arch.mbarrier_wait(ld_bar, i % 2)
            warpgroup.fence()
            wgmma_product(mma_pa, accD, rP, rDOa, False)
            if cutlass.const_expr(self.split):
                wgmma_product(mma_pa, accD, rPlo, rDOa, True)
            wgmma_product(mma_pb, accD, rKe, rS, True)
            warpgroup.commit_group()
            warpgroup.wait_group(0)
            # ---- round 3: dd -> dd[n] and its negated bf16 copy ----
            cute.autovec_copy(accD, tdd.partition_C(mDD[None, None, ch]))
            if cutlass.const_expr(self.has_erase):
                store_scaled(accD, tD_s, cutlass.BFloat16, -1.0)
            cute.arch.fence_view_async_shared()
            cute.arch.sync_threads()
            # ---- round 4: Pc, Pd onto dS ----
            warpgroup.fence()
            wgmma_product(mma_ds, accS, rQg, rDOc, True)
            if cutlass.const_expr(self.split):
                wgmma_product(mma_ds, accS, rQglo, rDOc, True)
            if cutlass.const_expr(self.has_erase):
                wgmma_product(mma_ds, accS, rWm, rD, True)
            warpgroup.commit_group()
            warpgroup.wait_group(0)
            cute.arch.sync_threads()   # both warpgroups done with this chunk's operand buffers

        cute.autovec_copy(accS, tds.partition_C(mDS0[None, None, bh]))


def compile_fake(cfg: dict):
    """Compile with fake tensors (no GPU, CUTE_DSL_ARCH=sm_90a): (compiled function, facts for the AOT report)."""
    from cutlass.cute.runtime import make_fake_stream

    from .k1_views import fake_args

    BH, N, V = cfg.get("BH", 2), cfg.get("N", 4), cfg["V"]
    K, C = cfg.get("K", 128), cfg.get("C", 64)
    erase, dsf, split = cfg.get("erase", True), cfg.get("dsf", True), cfg.get("split", False)
    kern = ReverseScanHopperWgmma(K=K, V=V, C=C, has_erase=erase, has_dsf=dsf, split=split)
    fn = cute.compile(kern, *fake_args(BH * N, BH, C, K, V, lo=True), cutlass.Int32(N), make_fake_stream())
    return fn, {"threads": THREADS, "has_erase": erase, "has_dsf": dsf, "split": split,
                "smem_operand_bytes": smem_bytes(K, V, C, split),
                "expected_wgmma": expected_wgmma_count(K, V, C, erase, split),
                "what": "K1 on Hopper tensor cores: TMA loads, wgmma (bf16 operands, fp32 accumulation), dS in "
                        "registers across the chunk loop; compiled ahead of time (executed on the H200: results/native/bench.json)"}
