"""The ``hybrid-tc`` backend's CPU-checkable parts (Triton interpreter): the fused backward tail, the bf16 K1
operands built by one Triton kernel, and the plumbing around the tensor-core K1 with a float64 replay standing in
for the GPU kernel. The wgmma kernel itself is checked on the GPU (tests/kernels/gdn_native/test_native_gpu.py)."""

import functools
import os

import pytest
import torch
from gdn_helpers import make_inputs, rel_err
from lethe.kernels.gdn.native.api import (
    scan_for_triton_ctx,
    scan_operands_from_triton_ctx,
    wgmma_scan_for_triton_ctx,
)
from lethe.kernels.gdn.native.k1_operands import k1_operands
from lethe.kernels.gdn.native.k1_scan_model import model
from lethe.kernels.gdn.triton_bwd import triton_chunk_bwd
from lethe.kernels.gdn.triton_fwd import triton_chunk_fwd

NAMES = ("dq", "dk", "dv", "dg", "db", "dw", "dS0")
# Triton's CPU interpreter truncates float32 -> bf16 (the GPU rounds to nearest even, as torch does): on the CPU a
# bf16 value from a kernel may sit one bf16 step (2^-7 relative) toward zero from torch's rounding of the same value.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def within_one_bf16_step(got, ref, slack=0.0):
    """Every element of ``got`` (bf16) is ``ref`` rounded to bf16: within one bf16 step of it (a truncating
    cast), plus ``slack`` of max |ref| where ref itself was computed in another float32 order."""
    got, ref = got.double(), ref.double()
    return bool(((got - ref).abs() <= ref.abs() * 2**-7 + slack * ref.abs().max()).all())


def _forward(T, erase, dtype=torch.float32, K=16, V=32, C=16):
    q, k, v, g, b, w, _ = make_inputs(T=T, K=K, V=V)
    f = lambda x: None if x is None else x.to(dtype)  # noqa: E731
    return triton_chunk_fwd(*(f(x) for x in (q, k, v, g, b if erase else None, w)), chunk=C, bv=16)[2]


@pytest.mark.parametrize("erase,final", [(True, True), (False, False)])
def test_fused_tail_gives_the_torch_tail_gradients_float32(erase, final):
    # T = 40 with chunk 16: the last chunk is padded, and the fused tail must drop the padding rows
    ctx = _forward(40, erase)
    gen = torch.Generator().manual_seed(3)
    do = torch.randn(1, 40, 2, 32, generator=gen)
    dS = torch.randn(1, 2, 16, 32, generator=gen) if final else None
    base = triton_chunk_bwd(do, ctx, dS, fused_tail=False)
    fused = triton_chunk_bwd(do, ctx, dS, fused_tail=True)
    for name, a, c in zip(NAMES, base, fused, strict=True):
        if a is None:
            assert c is None, name
            continue
        assert c.shape == a.shape and c.dtype == a.dtype and c.is_contiguous(), name
        # same products; only dg's in-chunk reverse sum runs in another order
        assert rel_err(c, a) < (1e-6 if name == "dg" else 0.0) or torch.equal(c, a), name


def test_fused_tail_casts_to_the_input_dtype_once():
    ctx = _forward(32, True, dtype=torch.bfloat16)
    do = torch.randn(1, 32, 2, 32, generator=torch.Generator().manual_seed(4)).bfloat16()
    base = triton_chunk_bwd(do, ctx, fused_tail=False)
    fused = triton_chunk_bwd(do, ctx, fused_tail=True)
    for name, a, c in zip(NAMES, base, fused, strict=True):
        if a is None:
            continue
        assert c.dtype == torch.bfloat16, name
        if name == "dg" or INTERPRETED:  # another float32 summation order / the interpreter's truncating cast
            assert within_one_bf16_step(c, a.float(), slack=1e-6), name
        else:
            assert torch.equal(c, a), name


@pytest.mark.parametrize("erase", [True, False])
def test_k1_operands_are_the_rebuilt_operands_rounded_to_bf16(erase):
    ctx = _forward(48, erase)
    doi = torch.randn(1, 2, 48, 32, generator=torch.Generator().manual_seed(6))
    P, Kend, Qg, Wm, GC, dO, P_lo, Qg_lo = k1_operands(doi, ctx, split=True)
    rP, rKend, rQg, rGC, rWm = scan_operands_from_triton_ctx(ctx)
    for name, hi, lo, ref in (("P", P, P_lo, rP), ("Qg", Qg, Qg_lo, rQg)):  # hi + lo: ~16 bits, not ~8
        assert lo.dtype == torch.bfloat16 and rel_err(hi.double() + lo.double(), ref) < 2**-14, name
    assert k1_operands(doi, ctx)[6:] == (None, None)
    for name, got, ref in (("P", P, rP), ("Kend", Kend, rKend), ("Qg", Qg, rQg)):
        assert got.dtype == torch.bfloat16 and got.shape == ref.shape, name
        assert within_one_bf16_step(got, ref, slack=1e-6), name  # one bf16 rounding of the same float32 value
    assert GC.dtype == torch.float32 and rel_err(GC, rGC) < 1e-6
    same = within_one_bf16_step if INTERPRETED else (lambda got, ref: torch.equal(got, ref.bfloat16()))
    assert same(dO, doi.reshape(dO.shape))
    if erase:
        assert same(Wm, rWm)
    else:
        assert Wm is None


def _replay_launch(P, Kend, Qg, Wm, GC, dO, dSF, n_chunks, split=False, P_lo=None, Qg_lo=None):
    """Stand-in for api.k1_wgmma_launch: the kernel's float64 replay on the flattened operands it is handed."""
    if split:
        P, Qg = P.double() + P_lo.double(), Qg.double() + Qg_lo.double()
    L, C, K = Kend.shape
    V = dO.shape[-1]
    BH = L // n_chunks

    def unflat(x):
        return None if x is None else x.double().reshape(1, BH, n_chunks, *x.shape[1:])

    dSN, dd, dS0 = model(unflat(P), unflat(Kend), unflat(Qg), unflat(Wm), unflat(GC), unflat(dO),
                         None if dSF is None else dSF.double().reshape(1, BH, K, V))
    return dSN.float().reshape(L, K, V), dd.float().reshape(L, C, V), dS0.float().reshape(BH, K, V)


@pytest.mark.parametrize("erase,final,split", [(True, True, True), (False, False, True), (True, False, False)])
def test_tensor_core_scan_plumbing_matches_the_float32_scan_within_bf16(erase, final, split):
    ctx = _forward(64, erase)
    gen = torch.Generator().manual_seed(7)
    doi = torch.randn(1, 2, 64, 32, generator=gen)
    dS = torch.randn(1, 2, 16, 32, generator=gen) if final else None
    ref = scan_for_triton_ctx(doi, ctx, dS, native=False)
    got = wgmma_scan_for_triton_ctx(doi, ctx, dS, split=split, k1=_replay_launch)
    for name, a, c in zip(("dS_next", "dd", "dS0"), ref, got, strict=True):
        assert c.shape == a.shape and c.dtype == torch.float32, name
        # bf16 operands: a few bf16 roundings (2^-9 each) accumulate over 4 chunks; a misplaced chunk or head
        # would be O(1)
        assert rel_err(c, a) < 2e-2, name


def test_hybrid_tc_backend_is_selectable_and_keeps_the_triton_scan_off_the_gpu(monkeypatch):
    from lethe.kernels.gdn.autograd import BACKENDS, chunk_family
    from lethe.kernels.gdn.native.backend import HybridTensorCoreGDN

    assert "hybrid-tc" in BACKENDS
    q, k, v, g, b, w, _ = make_inputs(T=32, K=16, V=16, dtype=torch.float32)
    leaves = [x.float().clone().requires_grad_() for x in (q, k, v, g, b, w)]
    o, _ = chunk_family(*leaves, member="gdn", backend="hybrid-tc", chunk=16)
    got = torch.autograd.grad(o.sum(), leaves)
    ref_leaves = [x.float().clone().requires_grad_() for x in (q, k, v, g, b, w)]
    o2, _ = chunk_family(*ref_leaves, member="gdn", backend="triton", chunk=16)
    ref = torch.autograd.grad(o2.sum(), ref_leaves)
    assert torch.equal(o, o2)
    for a, c in zip(got, ref, strict=True):
        assert rel_err(a, c) < 1e-6
    # which K1 a CUDA ctx would get on an sm_90 GPU with the CuTe DSL: tensor cores only for bf16 inputs at the
    # kernel's shapes
    import lethe.kernels.gdn.native as native

    monkeypatch.setattr(native, "hopper_native_ok", lambda device: None)
    cuda_like = functools.partial(dict, qi=type("T", (), {"is_cuda": True, "shape": (1, 1, 64, 128),
                                                           "device": "cuda:0"})(),
                                  ui=type("T", (), {"shape": (1, 1, 64, 128)})(), C=64)
    assert HybridTensorCoreGDN.k1_choice(cuda_like(dtype=torch.bfloat16)) == "wgmma"
    assert HybridTensorCoreGDN.k1_choice(cuda_like(dtype=torch.float16)) == "simt"  # dO would not be exact
    assert HybridTensorCoreGDN.k1_choice(cuda_like(dtype=torch.float32)) == "simt"
    assert HybridTensorCoreGDN.k1_choice(cuda_like(dtype=torch.bfloat16, C=32)) == "simt"

    # any other GPU (or no CuTe DSL): the Triton scan, whatever the dtype
    monkeypatch.setattr(native, "hopper_native_ok", lambda device: "this GPU is sm_100")
    assert HybridTensorCoreGDN.k1_choice(cuda_like(dtype=torch.bfloat16)) == "triton"


def test_explicit_native_backends_refuse_a_gpu_they_were_not_built_for(monkeypatch):
    import lethe.kernels.gdn.native as native
    from lethe.kernels.gdn.native.backend import _require_hopper

    assert native.hopper_native_ok("cpu") == "not a CUDA device"
    monkeypatch.setattr(native, "hopper_native_ok", lambda device: "built for sm_90a, this GPU is sm_100")
    with pytest.raises(RuntimeError, match="native GDN backward unavailable: built for sm_90a"):
        _require_hopper("cuda:0")
