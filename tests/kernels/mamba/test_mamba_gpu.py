"""The Triton paths compiled and run on a CUDA GPU, against the float64 oracle within the same derived bounds
as the interpreter tests (skipped without a GPU)."""

import pytest
import torch
from lethe.kernels.mamba import backward_selective_scan, forward_chunked_scan, fused_block_forward
from lethe.kernels.mamba.backward_selective_scan.reference import (
    selective_scan_grads_magnitude,
    selective_scan_grads_ref,
)
from lethe.kernels.mamba.forward_chunked_scan.reference import selective_scan_magnitude
from lethe.kernels.mamba.fused_block_forward.reference import fused_block_magnitude
from mamba_helpers import (
    UNIT_ROUNDOFF,
    assert_within,
    block_forward_steps,
    f64,
    gamma,
    make_block_inputs,
    make_scan_inputs,
    scan_backward_steps,
    scan_forward_steps,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("num_warps", [2, 4, 8])
def test_scan_forward_and_backward_on_gpu(num_warps):
    """C1 and C2 compiled for this GPU at each num_warps: within the float32 bounds of the CPU tests (the GPU's
    exp is an approximation within the 2 ulp the step count allows)."""
    b, L, d, n = 2, 37, 19, 16
    x = make_scan_inputs(b, L, d, n, dtype=torch.float32)
    dy = torch.randn(b, L, d, dtype=torch.float32)
    xc = [t.cuda() for t in x]
    y = forward_chunked_scan(*xc, chunk=16, backend="triton", num_warps=num_warps).cpu()
    Y, _ = selective_scan_magnitude(*f64(*x))
    ref = forward_chunked_scan(*x, backend="reference")
    assert_within("y", y, ref, gamma(scan_forward_steps(L, n), UNIT_ROUNDOFF[torch.float32]) * Y)
    got = backward_selective_scan(*xc, dy.cuda(), chunk=16, backend="triton", num_warps=num_warps)
    refs = selective_scan_grads_ref(*f64(*x, dy))
    mags = selective_scan_grads_magnitude(*f64(*x, dy))
    g = gamma(scan_backward_steps(L, n, d), UNIT_ROUNDOFF[torch.float32])
    for a, r, m in zip(got, refs, mags, strict=True):
        assert_within("grad", a.cpu(), r, g * m)


def test_fused_block_forward_on_gpu():
    """C5 compiled for this GPU, coherent draw, within the derived bound."""
    b, L, d, n, k = 2, 21, 12, 8, 4
    ins = make_block_inputs(b, L, d, n, k, dtype=torch.float32, coherent=True)
    out = fused_block_forward(*(t.cuda() for t in ins), chunk=8, backend="triton").cpu()
    ref = fused_block_forward(*ins, backend="reference")
    M = fused_block_magnitude(*f64(*ins))
    assert_within("out", out, ref, gamma(block_forward_steps(L, n, d, k), UNIT_ROUNDOFF[torch.float32]) * M["OUT"])


@pytest.mark.parametrize("exact_norm", [False, True], ids=["f32_arith", "exact_norm"])
@pytest.mark.parametrize("num_warps", [2, 4, 8])
def test_fused_block_backward_on_gpu(num_warps, exact_norm):
    """C6 compiled for this GPU at each num_warps, float32 arithmetic and the default float64 evaluation, coherent
    draw, every gradient within the float32 arithmetic's derived bound."""
    from lethe.kernels.mamba import fused_block_backward
    from lethe.kernels.mamba.fused_block_backward.reference import (
        GRAD_NAMES,
        fused_block_grads_magnitude,
        fused_block_grads_ref,
    )
    from mamba_helpers import block_backward_steps

    b, L, d, n, k = 2, 21, 12, 8, 4
    ins = make_block_inputs(b, L, d, n, k, dtype=torch.float32, coherent=True)
    dout = torch.randn(b, L, d)
    got = fused_block_backward(*(t.cuda() for t in ins), dout.cuda(), chunk=8, backend="triton", num_warps=num_warps,
                                exact_norm=exact_norm)
    ref = fused_block_grads_ref(*f64(*ins, dout))
    mag = fused_block_grads_magnitude(*f64(*ins, dout))
    g = gamma(block_backward_steps(b, L, n, d, k), UNIT_ROUNDOFF[torch.float32])
    for name, a, r, m in zip(GRAD_NAMES, got, ref, mag, strict=True):
        assert_within(name, a.cpu(), r, g * m)


@pytest.mark.parametrize("num_warps", [2, 4, 8])
def test_mamba3_kernels_on_gpu(num_warps):
    """C3 and C4 compiled for this GPU at each num_warps, within the CPU tests' bounds."""
    from lethe.kernels.mamba import complex_scan_rope, mimo_backward
    from lethe.kernels.mamba.complex_scan_rope.reference import complex_scan_rope_magnitude
    from lethe.kernels.mamba.mimo_backward.reference import mimo_scan_grads_magnitude, mimo_scan_grads_ref
    from test_complex_scan_rope import make_inputs as rope_inputs
    from test_complex_scan_rope import steps as rope_steps
    from test_mimo_backward import make_inputs as mimo_inputs
    from test_mimo_backward import steps as mimo_steps

    ins = rope_inputs(2, 19, 3, 10, 12, 5, dtype=torch.float32)
    y = complex_scan_rope(*(t.cuda() for t in ins), chunk=8, backend="triton", num_warps=num_warps).cpu()
    ref = complex_scan_rope(*ins, backend="reference")
    Y = complex_scan_rope_magnitude(*f64(*ins))
    assert_within("y", y, ref, gamma(rope_steps(19, 12), UNIT_ROUNDOFF[torch.float32]) * Y)
    ins, dy = mimo_inputs(2, 19, 3, 10, 12, 2, dtype=torch.float32)
    got = mimo_backward(*(t.cuda() for t in ins), dy.cuda(), chunk=8, backend="triton", num_warps=num_warps)
    refs = mimo_scan_grads_ref(*f64(*ins, dy))
    mags = mimo_scan_grads_magnitude(*f64(*ins, dy))
    g = gamma(mimo_steps(2, 19, 12, 10, 2), UNIT_ROUNDOFF[torch.float32])
    for a, r, m in zip(got, refs, mags, strict=True):
        assert_within("grad", a.cpu(), r, g * m)
