"""Host side of the native K1 and K2: torch tensors in and out, one compiled kernel per (shape, flags) in a cache.

``native_reverse_state_scan(do_c, ctx, dS_final)`` is a drop-in for
:func:`lethe.kernels.gdn.chunked.reverse_state_scan`: same inputs (the chunked path's ctx), same three outputs
(dS_next ``[B,H,N,K,V]``, d delta ``[B,H,N,C,V]``, dS0 ``[B,H,K,V]``), float32 only (the chunked path accumulates
in float32 for every low-precision input; float64 inputs stay on the torch path).

``native_wy_vjp(dd, ctx)`` is a drop-in for :func:`lethe.kernels.gdn.chunked.wy_vjp_torch` (K2): d delta
``[B,H,N,C,V]`` and the ctx in, (dXe ``[B,H,N,C,K]``, du ``[B,H,N,C,V]``, dA ``[B,H,N,C,C]``) out, float32 only,
through the sm_90a kernel :mod:`.k2_hopper`.

``scan_for_triton_ctx(doi, ctx, dS_final)`` is K1 for the *hybrid* backend: the Triton forward and intra-chunk
backward with the native reverse state scan in place of Triton's ``state_bwd_kernel``;
``wgmma_scan_for_triton_ctx`` is the same slot filled by the Hopper tensor-core K1 (backend ``hybrid-tc``).
"""

from __future__ import annotations

import torch

_CACHE: dict[tuple, object] = {}


def pick_tile(V: int, BH: int, min_ctas: int = 128) -> tuple[int, int]:
    """(BV, split): 64-column tiles when they still give every SM a CTA, else 32 (H200 timings: paper/tables/native_bench.md;
    BV=64 won whenever it gave >= 128 CTAs, BV=32 at B*H=64, d_v=64 where BV=64 gives 64 CTAs for 132 SMs);
    256 threads at K=128."""
    if V % 64 == 0 and BH * (V // 64) >= min_ctas:
        return 64, 2
    return (32, 2) if V % 32 == 0 else (V, 1)


def k1_launch(P, Kend, Qg, Wm, GC, dO, dSF, *, BV=None, split=None, poison=False):
    """Run the native K1 on flattened float32 CUDA tensors (see :mod:`.k1_hopper` for the shapes).

    ``Wm`` None means no erase; ``dSF`` None means a zero final-state gradient. Returns (dSN, dd, dS0).
    ``poison=True`` fills the outputs with NaN first, so an element the kernel fails to write shows up.
    """
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack
    from cutlass.torch import current_stream

    from .k1_hopper import K1ReverseScan

    BH, N, C, K = Kend.shape
    V = dO.shape[-1]
    if BV is None:
        BV, split = pick_tile(V, BH)
    has_erase, has_dsf = Wm is not None, dSF is not None
    tensors = [P, Kend, Qg, Wm if has_erase else Kend, GC, dO, dSF if has_dsf else dO]
    for t in tensors:
        if t.dtype != torch.float32 or not t.is_contiguous() or not t.is_cuda:
            raise ValueError("native K1 takes contiguous float32 CUDA tensors")
    dSN = torch.empty(BH, N, K, V, device=dO.device, dtype=torch.float32)
    dd = torch.empty(BH, N, C, V, device=dO.device, dtype=torch.float32)
    dS0 = torch.empty(BH, K, V, device=dO.device, dtype=torch.float32)
    if poison:
        for t in (dSN, dd, dS0):
            t.fill_(float("nan"))
    if not has_dsf:
        tensors[6] = dS0  # never read: has_dsf is a compile-time flag; any float32 [BH,K,V] fills the slot
    args = [from_dlpack(t, assumed_align=16) for t in tensors + [dSN, dd, dS0]]
    key = (BH, N, C, K, V, BV, split, has_erase, has_dsf, dO.device.index)
    stream = current_stream()
    if key not in _CACHE:
        k1 = K1ReverseScan(K=K, V=V, C=C, BV=BV, split=split, has_erase=has_erase, has_dsf=has_dsf)
        _CACHE[key] = cute.compile(k1, *args, stream)
    _CACHE[key](*args, stream)
    return dSN, dd, dS0


def native_reverse_state_scan(do_c, ctx, dS_final=None, **tile):
    """Drop-in for :func:`lethe.kernels.gdn.chunked.reverse_state_scan` on CUDA float32 (see module docstring)."""
    P, Kend, Qg, GC, Wm = ctx["P"], ctx["Kend"], ctx["Qg"], ctx["GC"], ctx["Wm"]
    B, H, N, C, V = do_c.shape
    K = Qg.shape[-1]

    def flat(x, *tail):
        return x.reshape(B * H, *tail).contiguous()

    dSN, dd, dS0 = k1_launch(flat(P, N, C, C), flat(Kend, N, C, K), flat(Qg, N, C, K),
                             None if Wm is None else flat(Wm, N, C, K), flat(GC, N, K), flat(do_c, N, C, V),
                             None if dS_final is None else flat(dS_final.float(), K, V), **tile)
    return dSN.view(B, H, N, K, V), dd.view(B, H, N, C, V), dS0.view(B, H, K, V)


def k1_wgmma_launch(P, Kend, Qg, Wm, GC, dO, dSF, n_chunks: int, *, split: bool = False, P_lo=None, Qg_lo=None):
    """Run the Hopper tensor-core K1 (:mod:`.k1_hopper_wgmma`; executed on the H200, docs/native.md) on
    flattened CUDA tensors, chunk l = bh * n_chunks + n: P ``[L,C,C]``, Kend/Qg/Wm ``[L,C,K]``, dO ``[L,C,V]``
    (cast to bf16, the kernel's operand type), GC ``[L,K]`` and dS_final ``[BH,K,V]`` (float32; None: zero).
    ``Wm`` None means no erase. ``split``: P and Qg enter as bf16 (hi, lo) pairs, the kernel's split-operand
    mode; the remainders are ``P_lo`` / ``Qg_lo`` when given (bf16, P and Qg then being the bf16 hi parts), else
    computed here from float32 P and Qg. Returns float32 (dSN ``[L,K,V]``, dd ``[L,C,V]``, dS0 ``[BH,K,V]``)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack
    from cutlass.torch import current_stream

    from .k1_hopper_wgmma import ReverseScanHopperWgmma
    from .k1_views import K1_LO_VIEWS, K1_VIEWS

    L, C, K = Kend.shape
    V = dO.shape[-1]
    if L % n_chunks:
        raise ValueError(f"{L} chunks are not a whole number of sequences of {n_chunks}")
    BH = L // n_chunks
    dev = dO.device
    has_erase, has_dsf = Wm is not None, dSF is not None

    def bf(x):
        return x.to(torch.bfloat16).contiguous()

    if split and P_lo is None:
        P_lo, Qg_lo = (x.float() - bf(x).float() for x in (P, Qg))
    P16, Ke16, Qg16, DO16 = bf(P), bf(Kend), bf(Qg), bf(dO)
    Plo16, Qglo16 = (bf(P_lo), bf(Qg_lo)) if split else (P16, Qg16)  # unread without split
    Wm16 = bf(Wm) if has_erase else Qg16  # never read without erase (a compile-time flag)
    GCf = GC.float().contiguous()
    dSFf = dSF.float().contiguous() if has_dsf else torch.zeros(BH, K, V, device=dev)
    dSN = torch.empty(L, K, V, device=dev, dtype=torch.float32)
    dd = torch.empty(L, C, V, device=dev, dtype=torch.float32)
    dS0 = torch.empty(BH, K, V, device=dev, dtype=torch.float32)
    # the kernels' operand views of this storage (.k1_views): transposed uses are strided views, not copies
    storage = [P16, Ke16, DO16, Qg16, Wm16, GCf, dSFf, dSN, dd, dS0, Plo16, Qglo16]
    args = [from_dlpack(t.permute(*perm), assumed_align=16)
            for t, (_, _, _, perm) in zip(storage, K1_VIEWS + K1_LO_VIEWS, strict=True)]
    stream = current_stream()
    key = ("k1_wgmma", L, n_chunks, C, K, V, has_erase, has_dsf, split, dev.index)
    if key not in _CACHE:
        kern = ReverseScanHopperWgmma(K=K, V=V, C=C, has_erase=has_erase, has_dsf=has_dsf, split=split)
        _CACHE[key] = cute.compile(kern, *args, cutlass.Int32(n_chunks), stream)
    _CACHE[key](*args, cutlass.Int32(n_chunks), stream)
    return dSN, dd, dS0


def scan_operands_from_triton_ctx(ctx):
    """K1's operands (P, Kend, Qg, GC, Wm, each ``[B,H,N,...]`` float32; Wm None without erase) rebuilt from the
    Triton forward's ctx, in the factored form the Triton scan kernel uses on chip: Qg = scale q Gamma,
    P = tril(Qg (k / Gamma)^T), Kend = k Gamma_C / Gamma, GC = Gamma_C. The Triton forward keeps only q, k, the
    chunk-local log-decay gam and W, so the hybrid backend pays these few elementwise kernels and one batched
    matmul to hand the native K1 what the torch path would have kept."""
    qi, ki, gam = ctx["qi"], ctx["ki"], ctx["gam"]
    B, H, TP, K = qi.shape
    C = ctx["C"]
    N = TP // C

    def chunks(x):
        return x.reshape(B, H, N, C, K)

    gamc = chunks(gam)
    gam_end = gamc[..., -1:, :]
    Qg = chunks(qi) * ctx["scale"] * torch.exp(gamc)
    kc = chunks(ki)
    P = torch.tril(Qg @ (kc * torch.exp(-gamc)).transpose(-1, -2))
    Kend = kc * torch.exp(gam_end - gamc)
    GC = torch.exp(gam_end[..., 0, :]).contiguous()
    Wm = chunks(ctx["Wi"]) if ctx.get("Wi") is not None else None
    return P, Kend, Qg, GC, Wm


def scan_for_triton_ctx(doi, ctx, dS_final=None, *, native=True):
    """The reverse state scan (K1) for :func:`lethe.kernels.gdn.triton_bwd.triton_chunk_bwd`'s ``scan=`` hook:
    ``doi`` ``[B,H,T_pad,V]`` float32 and the Triton ctx in; (dS_next ``[B,H,N,K,V]``, d delta ``[B,H,T_pad,V]``,
    dS0 ``[B,H,K,V]``) out. ``native=False`` runs the torch scan on the same rebuilt operands (CPU tests)."""
    from .. import chunked

    P, Kend, Qg, GC, Wm = scan_operands_from_triton_ctx(ctx)
    B, H, N, C, K = Qg.shape
    V = doi.shape[-1]
    do_c = doi.reshape(B, H, N, C, V)
    ops = {"P": P, "Kend": Kend, "Qg": Qg, "GC": GC, "Wm": Wm}
    if native:
        dSn, dd, dS0 = native_reverse_state_scan(do_c, ops, dS_final)
    else:
        dSn, dd, dS0 = chunked.reverse_state_scan(do_c, ops, dS_final)
    return dSn.contiguous(), dd.reshape(B, H, N * C, V).contiguous(), dS0.contiguous()


def wgmma_scan_for_triton_ctx(doi, ctx, dS_final=None, *, split: bool = True, k1=None):
    """K1 for the ``hybrid-tc`` backend: the Hopper tensor-core K1 (bf16 operands, fp32 accumulation; ``split``:
    P and Qg as bf16 hi/lo pairs) on operands built by one Triton kernel (:mod:`.k1_operands`); same contract as
    :func:`scan_for_triton_ctx`. ``k1`` stands in for :func:`k1_wgmma_launch` (same arguments and returns), e.g.
    a float64 replay in the CPU tests."""
    from .k1_operands import k1_operands

    P, Kend, Qg, Wm, GC, dO, P_lo, Qg_lo = k1_operands(doi, ctx, split=split)
    B, H, N, C, K = Qg.shape
    V = dO.shape[-1]
    L = B * H * N
    dSF = None if dS_final is None else dS_final.reshape(B * H, K, V)
    lo = dict(split=True, P_lo=P_lo.view(L, C, C), Qg_lo=Qg_lo.view(L, C, K)) if split else {}
    dSN, dd, dS0 = (k1 or k1_wgmma_launch)(P.view(L, C, C), Kend.view(L, C, K), Qg.view(L, C, K),
                                          None if Wm is None else Wm.view(L, C, K), GC.view(L, K),
                                          dO.view(L, C, V), dSF, N, **lo)
    return dSN.view(B, H, N, K, V), dd.view(B, H, N * C, V), dS0.view(B, H, K, V)


def wgmma_supported(K: int, V: int, C: int) -> bool:
    """Shapes :mod:`.k1_hopper_wgmma` is written for (d_k 128, chunk 64, d_v 64 or 128)."""
    return K == 128 and C == 64 and V in (64, 128)


# Largest element count of one tensor in one K2 launch: the kernel's index arithmetic is 32-bit.
_K2_MAX_ELEMS = 2**31 - 1


def k2_launch(dd, Hs, Tm, Xe, uc, *, poison=False):
    """Run the native K2 (:mod:`.k2_hopper`) on flattened float32 CUDA tensors, one CTA per chunk:
    dd ``[L,C,V]``, Hs ``[L,K,V]``, Tm ``[L,C,C]``, Xe ``[L,C,K]``, uc ``[L,C,V]`` -> (dXe ``[L,C,K]``,
    du ``[L,C,V]``, dA ``[L,C,C]``). Chunks are independent, so L is cut into launches that keep every tensor
    under 2^31 elements. ``poison=True`` fills the outputs with NaN first, so an element the kernel fails to
    write shows up."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack
    from cutlass.torch import current_stream

    from .k2_hopper import WYTriInvVJPHopper

    L, C, V = dd.shape
    K = Hs.shape[1]
    for t, shape in ((dd, (L, C, V)), (Hs, (L, K, V)), (Tm, (L, C, C)), (Xe, (L, C, K)), (uc, (L, C, V))):
        if t.dtype != torch.float32 or not t.is_contiguous() or not t.is_cuda or tuple(t.shape) != shape:
            raise ValueError(f"native K2 takes contiguous float32 CUDA tensors of shape {shape}, got "
                             f"{tuple(t.shape)} {t.dtype}")
    dXe = torch.empty(L, C, K, device=dd.device, dtype=torch.float32)
    du = torch.empty(L, C, V, device=dd.device, dtype=torch.float32)
    dA = torch.empty(L, C, C, device=dd.device, dtype=torch.float32)
    if poison:
        for t in (dXe, du, dA):
            t.fill_(float("nan"))
    step = max(1, _K2_MAX_ELEMS // max(K * V, C * K, C * V, C * C))
    stream = current_stream()
    for l0 in range(0, L, step):
        part = [t[l0:l0 + step] for t in (dd, Hs, Tm, Xe, uc, dXe, du, dA)]
        n = part[0].shape[0]
        args = [from_dlpack(t, assumed_align=16) for t in part]
        key = ("k2_hopper", n, C, K, V, dd.device.index)
        if key not in _CACHE:
            _CACHE[key] = cute.compile(WYTriInvVJPHopper(K=K, V=V, C=C), *args, stream)
        _CACHE[key](*args, stream)
    return dXe, du, dA


def k2_wgmma_launch(dd, Hs, Tm, Xe, uc):
    """Run the Hopper tensor-core K2 (:mod:`.k2_hopper_wgmma`; compiled ahead of time, NOT yet executed on a GPU
    when written) on flattened CUDA tensors, one CTA per chunk: same shapes and returns as :func:`k2_launch`
    (float32 out); the operands are cast to bf16, the kernel's operand type. Chunks are cut into launches that
    keep every tensor under 2^31 elements, as in :func:`k2_launch`."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack
    from cutlass.torch import current_stream

    from .k2_hopper_wgmma import WYTriInvVJPHopperWgmma

    L, C, V = dd.shape
    K = Hs.shape[1]
    dev = dd.device
    bf = [x.to(torch.bfloat16).contiguous() for x in (dd, Hs, Tm, Xe, uc)]
    dXe = torch.empty(L, C, K, device=dev, dtype=torch.float32)
    du = torch.empty(L, C, V, device=dev, dtype=torch.float32)
    dA = torch.empty(L, C, C, device=dev, dtype=torch.float32)
    step = max(1, _K2_MAX_ELEMS // max(K * V, C * K, C * V, C * C))
    stream = current_stream()
    for l0 in range(0, L, step):
        d16, h16, t16, x16, u16, oX, oU, oA = (t[l0:l0 + step] for t in (*bf, dXe, du, dA))
        # the kernel's views of this row-major storage (k2_hopper_wgmma.compile_fake lists them)
        views = [h16.permute(1, 2, 0), d16.permute(1, 2, 0), d16.permute(2, 1, 0), t16.permute(2, 1, 0),
                 t16.permute(1, 2, 0), x16.permute(1, 2, 0), u16.permute(1, 2, 0),
                 oX.permute(2, 1, 0), oU.permute(2, 1, 0), oA.permute(1, 2, 0)]
        args = [from_dlpack(v, assumed_align=16) for v in views]
        key = ("k2_wgmma", d16.shape[0], C, K, V, dev.index)
        if key not in _CACHE:
            _CACHE[key] = cute.compile(WYTriInvVJPHopperWgmma(K=K, V=V, C=C), *args, stream)
        _CACHE[key](*args, stream)
    return dXe, du, dA


def native_wy_vjp(dd, ctx, **kw):
    """Drop-in for :func:`lethe.kernels.gdn.chunked.wy_vjp_torch` on CUDA float32 (see module docstring)."""
    B, H, N, C, V = dd.shape
    K = ctx["Hs"].shape[-2]
    L = B * H * N

    def flat(x, *tail):
        return x.reshape(L, *tail).contiguous()

    dXe, du, dA = k2_launch(flat(dd, C, V), flat(ctx["Hs"], K, V), flat(ctx["Tm"], C, C), flat(ctx["Xe"], C, K),
                            flat(ctx["uc"], C, V), **kw)
    return dXe.view(B, H, N, C, K), du.view(B, H, N, C, V), dA.view(B, H, N, C, C)
