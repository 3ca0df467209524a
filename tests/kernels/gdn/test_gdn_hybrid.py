"""The hybrid backend's plumbing on the CPU (Triton interpreter): K1's operands rebuilt from the Triton forward's
ctx equal the torch chunked path's, and the Triton backward with the scan swapped through ``scan=`` gives the
Triton backward's gradients. The native K1 itself is checked on the GPU (tests/kernels/gdn_native)."""

import functools

import pytest
import torch
from gdn_helpers import make_inputs, rel_err
from lethe.kernels.gdn import chunked
from lethe.kernels.gdn.native.api import scan_for_triton_ctx, scan_operands_from_triton_ctx
from lethe.kernels.gdn.triton_bwd import triton_chunk_bwd
from lethe.kernels.gdn.triton_fwd import triton_chunk_fwd

TOL = 2e-5


@pytest.mark.parametrize("erase", [True, False])
def test_operands_from_the_triton_ctx_match_the_chunked_path(erase):
    q, k, v, g, b, w, _ = make_inputs(T=40, K=16, V=32)
    bb = b if erase else None
    _, _, ctx = chunked.chunk_fwd(q, k, v, g, bb, w, chunk=16)
    f = lambda x: None if x is None else x.float()  # noqa: E731
    _, _, tctx = triton_chunk_fwd(*(f(x) for x in (q, k, v, g, bb, w)), chunk=16, bv=16)
    P, Kend, Qg, GC, Wm = scan_operands_from_triton_ctx(tctx)
    # the padded tail chunk: the chunked path pads the same way (zeros), so whole tensors compare
    for name, got in (("P", P), ("Kend", Kend), ("Qg", Qg), ("GC", GC)):
        assert got.shape == ctx[name].shape, name
        assert rel_err(got, ctx[name]) < TOL, name
    if erase:
        assert rel_err(Wm, ctx["Wm"]) < TOL
    else:
        assert Wm is None


@pytest.mark.parametrize("erase,final", [(True, True), (False, False)])
def test_triton_backward_with_the_scan_swapped_gives_the_same_gradients(erase, final):
    q, k, v, g, b, w, _ = make_inputs(T=48, K=16, V=32)
    gen = torch.Generator().manual_seed(5)
    do = torch.randn(1, 48, 2, 32, generator=gen).float()
    dS = torch.randn(1, 2, 16, 32, generator=gen).float() if final else None
    f = lambda x: None if x is None else x.float()  # noqa: E731
    _, _, tctx = triton_chunk_fwd(*(f(x) for x in (q, k, v, g, b if erase else None, w)), chunk=16, bv=16)
    base = triton_chunk_bwd(do, tctx, dS)
    swapped = triton_chunk_bwd(do, tctx, dS, scan=functools.partial(scan_for_triton_ctx, native=False))
    for name, a, c in zip(("dq", "dk", "dv", "dg", "db", "dw", "dS0"), base, swapped, strict=True):
        if a is None:
            assert c is None, name
        else:
            assert rel_err(c, a) < TOL, name


def test_hybrid_backend_is_selectable_and_falls_back_to_the_triton_scan_off_the_gpu():
    from lethe.kernels.gdn.autograd import BACKENDS, chunk_family

    assert "hybrid" in BACKENDS
    q, k, v, g, b, w, _ = make_inputs(T=32, K=16, V=16, dtype=torch.float32)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, g, b, w)]
    o, _ = chunk_family(*leaves, member="gdn", backend="hybrid", chunk=16)
    got = torch.autograd.grad(o.sum(), leaves)
    ref_leaves = [x.clone().requires_grad_() for x in (q, k, v, g, b, w)]
    o2, _ = chunk_family(*ref_leaves, member="gdn", backend="triton", chunk=16)
    ref = torch.autograd.grad(o2.sum(), ref_leaves)
    assert torch.equal(o, o2) and all(torch.equal(a, c) for a, c in zip(got, ref, strict=True))
