"""K2, the WY / triangular-inverse VJP, on Hopper tensor cores (sm_90a: TMA + wgmma) -- compiled ahead of time on
the CPU, NOT yet executed (written after the fifth build's H200 time was spent).

The same seven products, orientation, order and bf16 rounding points as the Blackwell K2 (:mod:`.k2_blackwell`),
so :mod:`.k2_model` replays this kernel too. Per chunk (C = 64, K = 128, V in {64, 128}), with d delta ``dd``
[C, V], S0 = ``Hs`` [K, V], T = ``Tm`` [C, C], X = ``Xe`` [C, K], U = ``uc`` [C, V]:

    P1  G    = S0 dd^T          M=K   N=C  R=V   (G = -dW^T, written to shared memory as bf16 dW^T and dW)
    P2  dX^T = dW^T T           M=K   N=C  R=C
    P3  dU^T = dd^T T           M=V   N=C  R=C
    P4b dT   = dd U^T           M=C   N=C  R=V
    P4a dT  += dW X^T           M=C   N=C  R=K   (dT written as bf16)
    P5  Y    = T^T dT           M=C   N=C  R=C   (Y written as bf16)
    P6  Z    = Y T^T            M=C   N=C  R=C   (dA = -Z, strictly lower, in the epilogue)

One CTA per chunk, 256 threads = two warpgroups. Products with M = 128 split their rows over the warpgroups (two
64-row wgmma atoms), those with M = 64 their columns. Accumulators live in registers (no TMEM on Hopper); the
chained intermediates go registers -> bf16 -> shared memory in the next product's operand layout (a strided view
of the buffer in the accumulator's orientation, so each thread writes its own fragment). Inputs arrive by TMA
(nine bulk loads on one mbarrier; transposed uses are MN-major views of the row-major storage). Four rounds, each
ended by ``wait_group 0`` and a CTA barrier. Outputs float32 in accumulator orientation (strided views of dXe
[C, K], du [C, V], dA [C, C]). bf16 operands with fp32 accumulation: the error class of fla's WY backward and of
the Blackwell K2, not of our float32 kernels.

Why: the SIMT K2 (:mod:`.k2_hopper`) runs its products as float32 FFMA; this is the tensor-core version the issue
asks for on Hopper. Not tuned: one chunk per CTA, no overlap of one chunk's loads with another's products.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.utils import LayoutEnum

from .hopper_wgmma_common import acc_view, store_scaled, tma_chunk_parts, wgmma_product
from .k2_blackwell import MMA_K, product_list

THREADS = 256
KM = LayoutEnum.ROW_MAJOR   # K-major operand (the reduction contiguous)
MN = LayoutEnum.COL_MAJOR   # MN-major operand


def expected_wgmma_count(K: int = 128, V: int = 128, C: int = 64) -> int:
    """wgmma instructions per warpgroup per chunk: one per 16 of each product's reduction (the Blackwell K2's
    tcgen05.mma count, since every product is split over the two warpgroups rather than repeated)."""
    return sum(p["mnr"][2] // MMA_K for p in product_list(K, V, C))


def smem_bytes(K: int = 128, V: int = 128, C: int = 64) -> int:
    """The 13 bf16 operand buffers: nine TMA-loaded views (S0, dd x3, T x3, U, Xe) and four written (dW^T, dW,
    dT, Y)."""
    return 2 * (K * V + 3 * C * V + 3 * C * C + C * V + C * K + K * C + C * K + 2 * C * C)


class WYTriInvVJPHopperWgmma:
    """Compile-time configuration (K, V, C)."""

    def __init__(self, K: int = 128, V: int = 128, C: int = 64):
        if K != 128 or C != 64:
            raise ValueError("written for K = 128 (two 64-row wgmma atoms in P1/P2) and chunk C = 64")
        if V not in (64, 128):
            raise ValueError("V must be 64 or 128")
        self.K, self.V, self.C = K, V, C

    @cute.jit
    def __call__(self, mS0: cute.Tensor, mDDk: cute.Tensor, mDDmn: cute.Tensor, mTmn: cute.Tensor,
                 mTk: cute.Tensor, mXe: cute.Tensor, mU: cute.Tensor,
                 mDX: cute.Tensor, mDU: cute.Tensor, mDA: cute.Tensor, stream):
        """The Blackwell K2's views (:func:`.k2_blackwell.compile_fake`): A operands (M, R, L), B operands
        (N, R, L), bf16; outputs float32 in accumulator orientation."""
        K, V, C = self.K, self.V, self.C
        bf, f32 = cutlass.BFloat16, cutlass.Float32

        def tiled(a, b, M, N):
            # M = 128: rows over the two warpgroups; M = 64: columns
            atoms, tile = ((2, 1, 1), (M // 2, N)) if M == 128 else ((1, 2, 1), (M, N // 2))
            return sm90_utils.make_trivial_tiled_mma(bf, bf, a.sm90_mma_major_mode(), b.sm90_mma_major_mode(), f32,
                                                     atoms, tile)

        mma1 = tiled(KM, KM, K, C)     # P1: A = S0, B = dd
        mma2 = tiled(KM, MN, K, C)     # P2: A = dW^T (written), B = T (MN)
        mma3 = tiled(MN, MN, V, C)     # P3: A = dd^T (MN), B = T (MN)
        mma4 = tiled(KM, KM, C, C)     # P4b: A = dd, B = U; P4a: A = dW (written), B = Xe
        mma5 = tiled(MN, KM, C, C)     # P5: A = T^T (MN), B = dT (written)
        mma6 = tiled(KM, KM, C, C)     # P6: A = Y (written), B = T (K)
        t1, t2, t3 = (K, C, V), (K, C, C), (V, C, C)
        t4b, t4a, t5 = (C, C, V), (C, C, K), (C, C, C)
        lay = dict(
            S0=sm90_utils.make_smem_layout_a(KM, t1, bf, 1),
            DDb=sm90_utils.make_smem_layout_b(KM, t1, bf, 1),
            Tb=sm90_utils.make_smem_layout_b(MN, t2, bf, 1),
            DDt=sm90_utils.make_smem_layout_a(MN, t3, bf, 1),
            DDa=sm90_utils.make_smem_layout_a(KM, t4b, bf, 1),
            U=sm90_utils.make_smem_layout_b(KM, t4b, bf, 1),
            Xe=sm90_utils.make_smem_layout_b(KM, t4a, bf, 1),
            Ta=sm90_utils.make_smem_layout_a(MN, t5, bf, 1),
            Tk=sm90_utils.make_smem_layout_b(KM, t5, bf, 1),
            DWt=sm90_utils.make_smem_layout_a(KM, t2, bf, 1),
            DW=sm90_utils.make_smem_layout_a(KM, t4a, bf, 1),
            DT=sm90_utils.make_smem_layout_b(KM, t5, bf, 1),
            Y=sm90_utils.make_smem_layout_a(KM, t5, bf, 1),
        )
        op = cpasync.CopyBulkTensorTileG2SOp()

        def tma(m, name, tile):
            return cpasync.make_tiled_tma_atom(op, m, cute.slice_(lay[name], (None, None, 0)), tile)

        tS0, gS0 = tma(mS0, "S0", (K, V))
        tDDb, gDDb = tma(mDDk, "DDb", (C, V))
        tTb, gTb = tma(mTmn, "Tb", (C, C))
        tDDt, gDDt = tma(mDDmn, "DDt", (V, C))
        tDDa, gDDa = tma(mDDk, "DDa", (C, V))
        tU, gU = tma(mU, "U", (C, V))
        tXe, gXe = tma(mXe, "Xe", (C, K))
        tTa, gTa = tma(mTmn, "Ta", (C, C))
        tTk, gTk = tma(mTk, "Tk", (C, C))
        L = mDA.shape[2]
        self.kernel(mma1, mma2, mma3, mma4, mma5, mma6,
                    tS0, gS0, tDDb, gDDb, tTb, gTb, tDDt, gDDt, tDDa, gDDa, tU, gU, tXe, gXe, tTa, gTa, tTk, gTk,
                    mDX, mDU, mDA,
                    lay["S0"], lay["DDb"], lay["Tb"], lay["DDt"], lay["DDa"], lay["U"], lay["Xe"], lay["Ta"],
                    lay["Tk"], lay["DWt"], lay["DW"], lay["DT"], lay["Y"]).launch(
            grid=[1, 1, L], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mma1: cute.TiledMma, mma2: cute.TiledMma, mma3: cute.TiledMma, mma4: cute.TiledMma,
               mma5: cute.TiledMma, mma6: cute.TiledMma,
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
        bf, f32 = cutlass.BFloat16, cutlass.Float32
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = cute.arch.make_warp_uniform(tidx // 128)
        _, _, ch = cute.arch.block_idx()

        @cute.struct
        class Storage:
            ld_bar: cute.struct.MemRange[cutlass.Int64, 1]

        smem = cutlass.utils.SmemAllocator()
        st = smem.allocate(Storage)

        def sbuf(lay):
            return smem.allocate_tensor(element_type=bf, layout=lay.outer, byte_alignment=128, swizzle=lay.inner)

        sS0, sDDb, sTb, sDDt, sDDa = sbuf(lS0), sbuf(lDDb), sbuf(lTb), sbuf(lDDt), sbuf(lDDa)
        sU, sXe, sTa, sTk = sbuf(lU), sbuf(lXe), sbuf(lTa), sbuf(lTk)
        sDWt, sDW, sDT, sY = sbuf(lDWt), sbuf(lDW), sbuf(lDT), sbuf(lY)
        ld_bar = st.ld_bar.data_ptr()
        atoms = (tS0, tDDb, tTb, tDDt, tDDa, tU, tXe, tTa, tTk)
        if warp == 0:
            for d in atoms:
                cpasync.prefetch_descriptor(d)
            with cute.arch.elect_one():
                cute.arch.mbarrier_init(ld_bar, 1)
            cute.arch.mbarrier_init_fence()
        load_bytes = 0
        for lay in (lS0, lDDb, lTb, lDDt, lDDa, lU, lXe, lTa, lTk):
            load_bytes += cute.size_in_bytes(bf, cute.slice_(lay, (None, None, 0)))
        cute.arch.sync_threads()

        loads = [
            (tS0, tma_chunk_parts(tS0, gS0, sS0, (K, V))), (tDDb, tma_chunk_parts(tDDb, gDDb, sDDb, (C, V))),
            (tTb, tma_chunk_parts(tTb, gTb, sTb, (C, C))), (tDDt, tma_chunk_parts(tDDt, gDDt, sDDt, (V, C))),
            (tDDa, tma_chunk_parts(tDDa, gDDa, sDDa, (C, V))), (tU, tma_chunk_parts(tU, gU, sU, (C, V))),
            (tXe, tma_chunk_parts(tXe, gXe, sXe, (C, K))), (tTa, tma_chunk_parts(tTa, gTa, sTa, (C, C))),
            (tTk, tma_chunk_parts(tTk, gTk, sTk, (C, C))),
        ]
        if warp == 0:
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(ld_bar, load_bytes)
            for atom, part in loads:
                cute.copy(atom, part[1][(None, ch)], part[0][(None, 0)], tma_bar_ptr=ld_bar)

        # warpgroup slices: operand fragments; thread slices: accumulators and their (row, col) coordinates
        w1, w2, w3 = mma1.get_slice(wg * 128), mma2.get_slice(wg * 128), mma3.get_slice(wg * 128)
        w4, w5, w6 = mma4.get_slice(wg * 128), mma5.get_slice(wg * 128), mma6.get_slice(wg * 128)
        rS0, rDDb = mma1.make_fragment_A(w1.partition_A(sS0)), mma1.make_fragment_B(w1.partition_B(sDDb))
        rDWt, rTb = mma2.make_fragment_A(w2.partition_A(sDWt)), mma2.make_fragment_B(w2.partition_B(sTb))
        rDDt, rTb3 = mma3.make_fragment_A(w3.partition_A(sDDt)), mma3.make_fragment_B(w3.partition_B(sTb))
        rDDa, rU = mma4.make_fragment_A(w4.partition_A(sDDa)), mma4.make_fragment_B(w4.partition_B(sU))
        rDW, rXe = mma4.make_fragment_A(w4.partition_A(sDW)), mma4.make_fragment_B(w4.partition_B(sXe))
        rTa, rDT = mma5.make_fragment_A(w5.partition_A(sTa)), mma5.make_fragment_B(w5.partition_B(sDT))
        rY, rTk = mma6.make_fragment_A(w6.partition_A(sY)), mma6.make_fragment_B(w6.partition_B(sTk))
        th1, th2, th3 = mma1.get_slice(tidx), mma2.get_slice(tidx), mma3.get_slice(tidx)
        th4, th5, th6 = mma4.get_slice(tidx), mma5.get_slice(tidx), mma6.get_slice(tidx)

        def acc(th, M, N):
            return cute.make_rmem_tensor(th.partition_C(cute.make_identity_tensor((M, N))).shape, f32)

        aG, aDX, aDU = acc(th1, K, C), acc(th2, K, C), acc(th3, V, C)
        aDT, aY, aZ = acc(th4, C, C), acc(th5, C, C), acc(th6, C, C)

        def sync_smem():
            cute.arch.fence_view_async_shared()
            cute.arch.sync_threads()

        # ---- round 0: the products that need only inputs (P1, P3, P4b) ----
        cute.arch.mbarrier_wait(ld_bar, 0)
        warpgroup.fence()
        wgmma_product(mma1, aG, rS0, rDDb, False)
        wgmma_product(mma3, aDU, rDDt, rTb3, False)
        wgmma_product(mma4, aDT, rDDa, rU, False)
        warpgroup.commit_group()
        warpgroup.wait_group(0)
        # G = -dW^T: P2 reads dW^T (rows K, cols t: G's orientation), P4a reads dW (rows t, cols K: transposed)
        store_scaled(aG, th1.partition_C(acc_view(sDWt, False)), bf, -1.0)
        store_scaled(aG, th1.partition_C(acc_view(sDW, True)), bf, -1.0)
        sync_smem()

        # ---- round 1: P2, P4a ----
        warpgroup.fence()
        wgmma_product(mma2, aDX, rDWt, rTb, False)
        wgmma_product(mma4, aDT, rDW, rXe, True)
        warpgroup.commit_group()
        warpgroup.wait_group(0)
        # dT (row t, col s) -> P5's B operand (n = s, r = t): the buffer seen as (r, n)
        store_scaled(aDT, th4.partition_C(acc_view(sDT, True)), bf, 1.0)
        sync_smem()

        # ---- round 2: P5 ----
        warpgroup.fence()
        wgmma_product(mma5, aY, rTa, rDT, False)
        warpgroup.commit_group()
        warpgroup.wait_group(0)
        store_scaled(aY, th5.partition_C(acc_view(sY, False)), bf, 1.0)
        sync_smem()

        # ---- round 3: P6 ----
        warpgroup.fence()
        wgmma_product(mma6, aZ, rY, rTk, False)
        warpgroup.commit_group()
        warpgroup.wait_group(0)

        # ---- epilogue: registers -> float32 global, in accumulator orientation ----
        cute.autovec_copy(aDX, th2.partition_C(mDX[None, None, ch]))
        cute.autovec_copy(aDU, th3.partition_C(mDU[None, None, ch]))
        cZ = th6.partition_C(cute.make_identity_tensor((C, C)))
        for j in cutlass.range_constexpr(cute.size(aZ)):
            r, c = cZ[j]
            z = cutlass.Float32(0.0)
            if c < r:
                z = -aZ[j]
            aZ[j] = z
        cute.autovec_copy(aZ, th6.partition_C(mDA[None, None, ch]))


def compile_fake(cfg: dict):
    """Compile with fake tensors (no GPU, CUTE_DSL_ARCH=sm_90a): (compiled function, facts for the AOT report)."""
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    L, K, V, C = cfg.get("L", 2), cfg.get("K", 128), cfg["V"], cfg.get("C", 64)
    kern = WYTriInvVJPHopperWgmma(K=K, V=V, C=C)
    bf, f32 = cutlass.BFloat16, cutlass.Float32

    def ft(dt, shape, stride):
        return make_fake_tensor(dt, shape, stride, assumed_align=16)

    args = [  # the Blackwell K2's views of the same row-major per-chunk storage
        ft(bf, (K, V, L), (V, 1, K * V)),      # S0 = Hs [L, K, V]
        ft(bf, (C, V, L), (V, 1, C * V)),      # dd [L, C, V], K-major
        ft(bf, (V, C, L), (1, V, C * V)),      # dd^T, MN-major
        ft(bf, (C, C, L), (1, C, C * C)),      # Tm, MN-major view
        ft(bf, (C, C, L), (C, 1, C * C)),      # Tm, K-major view
        ft(bf, (C, K, L), (K, 1, C * K)),      # Xe [L, C, K]
        ft(bf, (C, V, L), (V, 1, C * V)),      # U [L, C, V]
        ft(f32, (K, C, L), (1, K, C * K)),     # dXe [L, C, K] (accumulator orientation)
        ft(f32, (V, C, L), (1, V, C * V)),     # du [L, C, V]
        ft(f32, (C, C, L), (C, 1, C * C)),     # dA [L, C, C]
    ]
    fn = cute.compile(kern, *args, make_fake_stream())
    return fn, {"threads": THREADS, "smem_operand_bytes": smem_bytes(K, V, C),
                "expected_wgmma": expected_wgmma_count(K, V, C),
                "products": [dict(name=p["name"], mnr=list(p["mnr"])) for p in product_list(K, V, C)],
                "what": "K2 on Hopper tensor cores: TMA loads, wgmma (bf16 operands, fp32 accumulation), the "
                        "Blackwell K2's products and rounding points; compiled, not yet executed"}
