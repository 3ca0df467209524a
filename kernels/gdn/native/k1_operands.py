"""K1's bf16 operands for the Hopper tensor-core K1 (:mod:`.k1_hopper_wgmma`), built from the Triton forward's ctx
by one Triton kernel.

The Triton forward keeps q, k, the chunk-local log-decay gamma and W (float32, ``[B, H, T_pad, K]``), not the
products K1 reads. :func:`lethe.kernels.gdn.native.api.scan_operands_from_triton_ctx` rebuilds them with a handful of
torch kernels and a batched matmul (about 3.7 ms at 2^20 head-tokens on the H200); this kernel does it in one pass
per chunk and writes the operands directly in the wgmma kernel's storage: bf16, chunk-flattened (chunk l = bh * N
+ n), which is the ``[B, H, N, C, *]`` layout flattened, so no copy follows.

    Qg = scale q Gamma,  P = tril(Qg (k / Gamma)^T),  Kend = k Gamma_C / Gamma,  GC = Gamma_C (float32),
    Wm = W,  dO (bf16 copy of the float32 internal dO);  with ``split``: P_lo = P - bf16(P), Qg_lo likewise

Same factored arithmetic as the Triton scan kernel (``state_bwd_kernel``) and the torch rebuild: P is a float32
dot (``PREC``), rounded to bf16 once at the store.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LAUNCH = dict(num_warps=8, num_stages=1)


@triton.jit
def k1_operands_kernel(q_ptr, k_ptr, gam_ptr, W_ptr, DO_ptr, P_ptr, KE_ptr, QG_ptr, WM_ptr, DO16_ptr, GC_ptr,
                       PLO_ptr, QGLO_ptr, scale, K: tl.constexpr, V: tl.constexpr, C: tl.constexpr,
                       HAS_ERASE: tl.constexpr, SPLIT: tl.constexpr, PREC: tl.constexpr):
    bh = tl.program_id(0)
    n = tl.program_id(1)
    NT = tl.num_programs(1)
    TP = NT * C
    rows = tl.arange(0, C)
    ck = tl.arange(0, K)
    cv = tl.arange(0, V)
    offk = (bh * TP + n * C) * K + rows[:, None] * K + ck[None, :]
    offv = (bh * TP + n * C) * V + rows[:, None] * V + cv[None, :]
    gam = tl.load(gam_ptr + offk)
    k = tl.load(k_ptr + offk)
    Qg = tl.load(q_ptr + offk) * scale * tl.exp(gam)
    gamC = tl.load(gam_ptr + (bh * TP + n * C + C - 1) * K + ck)
    P = tl.dot(Qg, tl.trans(k * tl.exp(-gam)), input_precision=PREC)
    P = tl.where(rows[:, None] >= rows[None, :], P, 0.0)
    offp = (bh * NT + n) * C * C + rows[:, None] * C + rows[None, :]
    P_hi = P.to(tl.bfloat16)
    Qg_hi = Qg.to(tl.bfloat16)
    tl.store(P_ptr + offp, P_hi)
    tl.store(QG_ptr + offk, Qg_hi)
    if SPLIT:  # the remainders, exact in float32, rounded once more
        tl.store(PLO_ptr + offp, (P - P_hi.to(tl.float32)).to(tl.bfloat16))
        tl.store(QGLO_ptr + offk, (Qg - Qg_hi.to(tl.float32)).to(tl.bfloat16))
    tl.store(KE_ptr + offk, (k * tl.exp(gamC[None, :] - gam)).to(tl.bfloat16))
    tl.store(GC_ptr + (bh * NT + n) * K + ck, tl.exp(gamC))
    if HAS_ERASE:
        tl.store(WM_ptr + offk, tl.load(W_ptr + offk).to(tl.bfloat16))
    tl.store(DO16_ptr + offv, tl.load(DO_ptr + offv).to(tl.bfloat16))


def k1_operands(doi, ctx, split: bool = False):
    """(P ``[B,H,N,C,C]``, Kend, Qg, Wm or None ``[B,H,N,C,K]``, dO ``[B,H,N,C,V]`` in bf16; GC ``[B,H,N,K]``
    float32; P_lo, Qg_lo: the bf16 remainders P - bf16(P), Qg - bf16(Qg) (``split``) or None) from the Triton forward's ctx
    and the float32 internal dO ``[B,H,T_pad,V]``."""
    qi, ki, gam = ctx["qi"], ctx["ki"], ctx["gam"]
    B, H, TP, K = qi.shape
    V, C = doi.shape[-1], ctx["C"]
    N = TP // C
    has_erase = ctx.get("Wi") is not None
    dev = qi.device
    bf = torch.bfloat16
    P = torch.empty(B, H, N, C, C, device=dev, dtype=bf)
    Kend, Qg = (torch.empty(B, H, N, C, K, device=dev, dtype=bf) for _ in range(2))
    Wm = torch.empty(B, H, N, C, K, device=dev, dtype=bf) if has_erase else None
    dO = torch.empty(B, H, N, C, V, device=dev, dtype=bf)
    GC = torch.empty(B, H, N, K, device=dev, dtype=torch.float32)
    P_lo = torch.empty_like(P) if split else None
    Qg_lo = torch.empty_like(Qg) if split else None
    k1_operands_kernel[(B * H, N)](qi, ki, gam, ctx["Wi"] if has_erase else ki, doi, P, Kend, Qg,
                                   Wm if has_erase else Qg, dO, GC, P_lo if split else P, Qg_lo if split else Qg,
                                   ctx["scale"], K=K, V=V, C=C, HAS_ERASE=has_erase, SPLIT=split,
                                   PREC=ctx["prec"], **LAUNCH)
    return P, Kend, Qg, Wm, GC, dO, P_lo, Qg_lo
