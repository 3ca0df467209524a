"""C2 backward_selective_scan: the hand-derived backward against autograd through the float64 oracle and
against finite differences (gradcheck), then the torch and Triton paths within derived bounds."""

import pytest
import torch
from lethe.kernels.mamba import MambaShapeError, backward_selective_scan, forward_chunked_scan, selective_scan
from lethe.kernels.mamba.backward_selective_scan.reference import (
    GRAD_NAMES,
    selective_scan_grads_magnitude,
    selective_scan_grads_ref,
)
from lethe.kernels.mamba.forward_chunked_scan.reference import selective_scan_ref
from mamba_helpers import (
    UNIT_ROUNDOFF,
    assert_within,
    f64,
    gamma,
    make_scan_inputs,
    scan_backward_steps,
)

SHAPES = [(2, 13, 6, 5, 4, 4), (1, 1, 3, 16, 4, None), (1, 9, 5, 3, 16, 2)]


def _dy(b, L, d, dtype=torch.float64, seed=1):
    return torch.randn(b, L, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def test_gradcheck_of_the_oracle():
    """The oracle's autograd gradients agree with central finite differences for every input (u, delta, A, B, C,
    D): the reference the kernels are judged by is itself differentiated correctly."""
    x = [t.requires_grad_(True) for t in make_scan_inputs(1, 5, 2, 3)]
    assert torch.autograd.gradcheck(selective_scan_ref, tuple(x), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_gradcheck_of_the_hand_derived_backward():
    """The Function running the hand-derived backward (torch path, float64) passes gradcheck: an independent
    check of the derivation against finite differences, with checkpoints at chunk 2 so the restart path runs."""
    x = [t.requires_grad_(True) for t in make_scan_inputs(1, 5, 2, 3)]
    f = lambda *a: selective_scan(*a, chunk=2, backend="torch")
    assert torch.autograd.gradcheck(f, tuple(x), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_d", [True, False])
def test_torch_path_float64_matches_autograd_of_oracle(shape, with_d):
    """The hand-derived recurrences (torch path, float64) equal autograd through the definition within the float64
    bound gamma_m(u64) S, S from the magnitude equations."""
    b, L, d, n, chunk, _ = shape
    x = make_scan_inputs(b, L, d, n, with_d=with_d)
    dy = _dy(b, L, d)
    got = backward_selective_scan(*x, dy, chunk=chunk, backend="torch")
    ref = selective_scan_grads_ref(*x, dy)
    mag = selective_scan_grads_magnitude(*x, dy)
    g = gamma(scan_backward_steps(L, n, d), UNIT_ROUNDOFF[torch.float64])
    for name, a, r, m in zip(GRAD_NAMES, got, ref, mag, strict=True):
        if r is None:
            assert a is None and not with_d
            continue
        assert_within(name, a, r, g * m)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.slow
def test_triton_matches_oracle(shape, dtype):
    """Triton (float32 arithmetic, inputs and dy in ``dtype``; float64 runs the kernels in float64) against autograd through the float64 oracle on the
    same rounded inputs: |g - g_ref| <= gamma_m(u_fp32) S + u_out |g_ref| per gradient, m from
    scan_backward_steps, u_out the rounding of the stored gradient (0 for float32)."""
    b, L, d, n, chunk, block_d = shape
    x = make_scan_inputs(b, L, d, n, dtype=dtype)
    dy = _dy(b, L, d, dtype)
    got = backward_selective_scan(*x, dy, chunk=chunk, backend="triton", block_d=block_d)
    ref = selective_scan_grads_ref(*f64(*x, dy))
    mag = selective_scan_grads_magnitude(*f64(*x, dy))
    g = gamma(scan_backward_steps(L, n, d), UNIT_ROUNDOFF[torch.float64 if dtype == torch.float64 else torch.float32])
    u_out = 0.0 if dtype in (torch.float32, torch.float64) else UNIT_ROUNDOFF[dtype]
    for name, a, r, m, inp in zip(GRAD_NAMES, got, ref, mag, x, strict=True):
        assert a.dtype == inp.dtype and a.shape == inp.shape, name
        assert_within(name, a, r, g * m + u_out * r.abs())


def test_autograd_function_matches_direct_backward():
    """selective_scan's autograd wiring returns exactly what the direct C2 call returns from the same checkpoints
    (same kernels, same order of operations)."""
    x = [t.requires_grad_(True) for t in make_scan_inputs(2, 7, 4, 3, dtype=torch.float32)]
    dy = _dy(2, 7, 4, torch.float32)
    y = selective_scan(*x, chunk=4, backend="triton")
    y.backward(dy)
    direct = backward_selective_scan(*(t.detach() for t in x), dy, chunk=4, backend="triton")
    for name, t, r in zip(GRAD_NAMES, x, direct, strict=True):
        assert torch.equal(t.grad, r), name


def test_chunk_parallel_forward_feeds_the_backward():
    """selective_scan with the chunk-parallel forward: its checkpoints restart the same backward, so the gradients
    agree with the serial forward's within the backward's bound (both against the same oracle)."""
    x = make_scan_inputs(2, 13, 4, 3, dtype=torch.float32)
    dy = _dy(2, 13, 4, torch.float32)
    grads = {}
    for mode in ("serial", "chunk_parallel"):
        leaves = [t.clone().requires_grad_(True) for t in x]
        selective_scan(*leaves, chunk=4, backend="triton", scan_mode=mode).backward(dy)
        grads[mode] = [t.grad for t in leaves]
    mag = selective_scan_grads_magnitude(*f64(*x, dy))
    g = gamma(scan_backward_steps(13, 3, 4) + 4 * 5, UNIT_ROUNDOFF[torch.float32])
    for name, a, b, m in zip(GRAD_NAMES, grads["serial"], grads["chunk_parallel"], mag, strict=True):
        assert_within(name, a, b, 2 * g * m)


@pytest.mark.slow
def test_backward_is_deterministic():
    """Two runs give the same bits: cross-program sums are partials summed by torch, never atomics."""
    x = make_scan_inputs(2, 9, 5, 3, dtype=torch.float32)
    dy = _dy(2, 9, 5, torch.float32)
    a = backward_selective_scan(*x, dy, chunk=4, backend="triton", block_d=2)
    b = backward_selective_scan(*x, dy, chunk=4, backend="triton", block_d=2)
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))


def test_bad_checkpoints_and_dy_are_refused():
    """Checkpoints from another chunk size, or a dy of the wrong shape, are refused rather than misread."""
    x = make_scan_inputs(1, 9, 3, 2, dtype=torch.float32)
    dy = _dy(1, 9, 3, torch.float32)
    ckpt = forward_chunked_scan(*x, chunk=4, backend="torch", return_checkpoints=True)[1]
    with pytest.raises(MambaShapeError, match="checkpoints have shape"):
        backward_selective_scan(*x, dy, chunk=2, checkpoints=ckpt, backend="torch")
    with pytest.raises(MambaShapeError, match="dy has shape"):
        backward_selective_scan(*x, dy[:, :8], chunk=4, backend="torch")


def _classes(t):
    return torch.stack([torch.isnan(t), torch.isposinf(t), torch.isneginf(t)])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy under the interpreter warns on inf arithmetic
def test_non_finite_inputs_give_the_oracles_non_finite_pattern():
    """With a NaN, a +inf and a -inf in u, every gradient has the oracle's non-finite pattern element by element
    (NaN, +inf, -inf told apart): in particular ddelta at an infinite u_t is (sum_n G B) u_t, a signed infinity,
    where summing G B u term by term would give inf - inf = NaN."""
    x = list(make_scan_inputs(1, 9, 4, 3))
    u = x[0].clone()
    u[0, 2, 1], u[0, 4, 2], u[0, 6, 3] = float("nan"), float("inf"), float("-inf")
    x[0] = u
    dy = _dy(1, 9, 4)
    ref = selective_scan_grads_ref(*x, dy)
    for backend, dtype in (("torch", torch.float64), ("triton", torch.float32)):
        got = backward_selective_scan(*(t.to(dtype) for t in x), dy.to(dtype), chunk=4, backend=backend)
        for name, a, r in zip(GRAD_NAMES, got, ref, strict=True):
            assert torch.equal(_classes(a), _classes(r)), (backend, name)
