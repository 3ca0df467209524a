"""The Hopper K2 kernel's arithmetic, replayed in float64 in the kernel's order, against chunked.chunk_bwd's K2.

The kernel (kernels/gdn/native/k2_hopper.py) sums in its own fixed order (V in 64-wide tiles, dT as one running
sum over V then K, dW negated after its reduction, dA = -Z written only below the diagonal). These tests check
that this order computes exactly chunk_bwd's K2 (``chunked.wy_vjp_torch``): each output at ~1e-12 in float64,
and the full backward with the model swapped in as ``wy_vjp=`` at ~1e-12 (so the swap hook wires the three
outputs to the right places). Also: the swap hook's default leaves chunk_bwd unchanged bit for bit, and the
same order replayed in float32 stays at float32-rounding distance from the float64 result (the order is not
numerically fragile). Pure NumPy/torch; the CuTe DSL is not imported.
"""

import numpy as np
import pytest
import torch
from k2_problem import k2_problem
from lethe.kernels.gdn import chunked
from lethe.kernels.gdn.native import k2_hopper_model
from lethe.kernels.gdn.native.k2_hopper_plan import THREADS, smem_bytes, tile_plan

SM90_SMEM_PER_BLOCK = 232448




def _dd(ctx, do, dS):
    do_c = chunked._to_chunks(do, ctx["C"], ctx["qc"].dtype)
    return chunked.reverse_state_scan(do_c, ctx, dS)[1]


def _model(dd, ctx, dtype=np.float64):
    ins = [x.numpy() for x in (dd, ctx["Hs"], ctx["Tm"], ctx["Xe"], ctx["uc"])]
    return tuple(torch.from_numpy(x) for x in k2_hopper_model.k2_hopper(*ins, dtype=dtype))


def _rel(x, ref):
    return float((x.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1e-300))


@pytest.mark.parametrize("V", [64, 128])
def test_kernel_order_equals_chunk_bwd_k2(V):
    """dXe, du, dA of the kernel's order vs chunk_bwd's own K2 (wy_vjp_torch), float64, each < 1e-12."""
    ctx, do, dS = k2_problem(V=V)
    dd = _dd(ctx, do, dS)
    got = _model(dd, ctx)
    ref = chunked.wy_vjp_torch(dd, ctx)
    for name, a, r in zip(("dXe", "du", "dA"), got, ref, strict=True):
        assert a.shape == r.shape, name
        assert _rel(a, r) < 1e-12, name
    assert torch.all(torch.triu(got[2]) == 0)  # the kernel writes exact zeros on and above the diagonal


@pytest.mark.parametrize("V", [64, 128])
def test_full_backward_with_model_as_wy_vjp(V):
    """chunk_bwd(wy_vjp=model) vs chunk_bwd(): every gradient < 1e-12 (the hook passes dd and ctx in and uses
    the outputs as dXe, du, dA)."""
    ctx, do, dS = k2_problem(V=V, seed=1)
    ref = chunked.chunk_bwd(do, ctx, dS)
    got = chunked.chunk_bwd(do, ctx, dS, wy_vjp=_model)
    for a, r in zip(got, ref, strict=True):
        assert _rel(a, r) < 1e-12


def test_default_wy_vjp_is_the_inline_torch_code_bit_for_bit():
    """chunk_bwd() and chunk_bwd(wy_vjp=chunked.wy_vjp_torch) are the same computation (float32 too)."""
    for dtype in (torch.float64, torch.float32):
        ctx, do, dS = k2_problem(V=64, seed=2, dtype=dtype)
        a = chunked.chunk_bwd(do, ctx, dS)
        b = chunked.chunk_bwd(do, ctx, dS, wy_vjp=chunked.wy_vjp_torch)
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_float32_replay_stays_at_float32_rounding():
    """The same order in float32 (rounding after every multiply and add) is within 1e-5 (norm-relative) of the
    float64 K2 on float32 inputs: the accumulation order does not amplify rounding."""
    ctx32, do, dS = k2_problem(V=128, seed=4, dtype=torch.float32)
    dd32 = _dd(ctx32, do, dS)
    f32 = _model(dd32, ctx32, dtype=np.float32)
    ctx64 = {k: (v.double() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in ctx32.items()}
    f64 = chunked.wy_vjp_torch(dd32.double(), ctx64)
    t32 = chunked.wy_vjp_torch(dd32, ctx32)
    for a, t, r in zip(f32, t32, f64, strict=True):
        err = float((a.double() - r).norm() / r.norm())
        assert err < 1e-5
        assert float((t.double() - r).norm() / r.norm()) < 1e-5  # torch's float32 K2 on the same operands


@pytest.mark.parametrize("V", [64, 128, 256])
def test_plan_fits_sm90(V):
    """Every product maps onto 256 threads, and the two shared-memory regions stay under sm_90a's per-block
    limit (the same 83,200 B for every V that is a multiple of 64)."""
    plan = tile_plan(128, V, 64)
    for M, N, _, TM, TN in plan.values():
        assert (M // TM) * (N // TN) == THREADS
    assert smem_bytes(128, V, 64) == 83200 <= SM90_SMEM_PER_BLOCK


def test_supported_refuses_shapes_over_the_shared_memory_limit():
    """The native backend falls back to the torch K2 when supported() is False; a shape that passes the tiling
    rules but needs more than sm_90a's 232,448 B per block must be refused here, not fail at launch."""
    from lethe.kernels.gdn.native.k2_hopper_plan import supported

    assert supported(128, 128, 64) and smem_bytes(128, 128, 64) <= SM90_SMEM_PER_BLOCK
    for K, V in ((128, 224), (128, 240), (448, 128)):
        assert smem_bytes(K, V, 64) > SM90_SMEM_PER_BLOCK and not supported(K, V, 64)
