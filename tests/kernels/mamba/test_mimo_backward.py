"""C3 mimo_backward: the oracle against finite differences and against the SISO scan it reduces to, the
hand-derived backward (torch, float64) against autograd, the Triton path within derived bounds."""

import pytest
import torch
from lethe.kernels.mamba.error_bounds import mimo_backward_steps as steps
from lethe.kernels.mamba import MambaShapeError, mimo_backward, mimo_forward, mimo_scan
from lethe.kernels.mamba.complex_scan_rope.reference import complex_scan_rope_ref
from lethe.kernels.mamba.mimo_backward.reference import (
    GRAD_NAMES,
    mimo_scan_grads_magnitude,
    mimo_scan_grads_ref,
    mimo_scan_ref,
)
from mamba_helpers import UNIT_ROUNDOFF, assert_within, f64, gamma

SHAPES = [  # (batch, L, H, P, N, R, chunk, block_p)
    (2, 9, 2, 3, 5, 2, 4, 2),
    (1, 1, 1, 4, 3, 1, 4, None),
    (1, 7, 3, 5, 4, 3, 8, 4),
]


def make_inputs(b, L, H, P, N, R, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    x = r(b, L, H, P)
    dt = 0.05 + 0.45 * torch.rand(b, L, H, generator=gen, dtype=torch.float64)
    alpha = -(0.5 + 1.5 * torch.rand(H, generator=gen, dtype=torch.float64))
    ins = (x, dt, alpha, r(b, L, H, R, N), r(b, L, H, R, N), r(H, R, P), r(H, R, P))
    dy = r(b, L, H, P)
    return tuple(t.to(dtype) for t in ins), dy.to(dtype)




def test_gradcheck_of_the_oracle():
    """Autograd through the oracle agrees with finite differences for all seven inputs."""
    ins, _ = make_inputs(1, 4, 2, 2, 3, 2)
    ins = tuple(t.requires_grad_(True) for t in ins)
    assert torch.autograd.gradcheck(mimo_scan_ref, ins, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_rank_one_with_unit_weights_is_the_siso_scan():
    """R = 1 and mimo_x = mimo_o = 1 is the Mamba-2 scan, which the rotary oracle computes with no angles."""
    ins, _ = make_inputs(2, 6, 2, 3, 4, 1)
    x, dt, alpha, B, C, wx, wo = ins
    y = mimo_scan_ref(x, dt, alpha, B, C, torch.ones_like(wx), torch.ones_like(wo))
    want = complex_scan_rope_ref(x, dt, alpha, B[..., 0, :], C[..., 0, :], x.new_zeros(*x.shape[:3], 0))
    assert torch.allclose(y, want, rtol=0, atol=1e-13)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("backend,dtype", [("torch", torch.float64), ("triton", torch.float64),
                                           ("triton", torch.float32), ("triton", torch.bfloat16)])
@pytest.mark.slow
def test_paths_match_autograd_of_oracle(shape, backend, dtype):
    """Each gradient within gamma_m(u_arith) S + u_out |ref| (m from ``steps``, S the magnitude backward, the
    oracle on the same rounded inputs). float64 checks the hand-derived equations (torch) and the kernel's
    algebra (Triton run in float64) to float64 accuracy."""
    b, L, H, P, N, R, chunk, block_p = shape
    ins, dy = make_inputs(b, L, H, P, N, R, dtype=dtype)
    kw = dict(chunk=chunk, block_p=block_p) if backend == "triton" else {}
    got = mimo_backward(*ins, dy, backend=backend, **kw)
    ref = mimo_scan_grads_ref(*f64(*ins, dy))
    mag = mimo_scan_grads_magnitude(*f64(*ins, dy))
    u_arith = UNIT_ROUNDOFF[torch.float64 if dtype == torch.float64 else torch.float32]
    u_out = UNIT_ROUNDOFF[dtype] if dtype == torch.bfloat16 else 0.0
    g = gamma(steps(b, L, N, P, R), u_arith)
    for name, a, r, m, t in zip(GRAD_NAMES, got, ref, mag, ins, strict=True):
        assert a.dtype == t.dtype and a.shape == t.shape, name
        assert_within(name, a, r, g * m + u_out * r.abs())


def test_torch_forward_matches_oracle():
    """The portable forward in float64 is the oracle's recurrence."""
    ins, _ = make_inputs(2, 5, 2, 3, 4, 2)
    assert torch.allclose(mimo_forward(*ins), mimo_forward(*ins, backend="reference"), rtol=0, atol=1e-13)


def test_gradcheck_of_the_hand_derived_backward():
    """mimo_scan with the hand-derived backward (torch path, float64) agrees with finite differences."""
    ins, _ = make_inputs(1, 4, 2, 2, 3, 2)
    ins = tuple(t.requires_grad_(True) for t in ins)
    assert torch.autograd.gradcheck(lambda *a: mimo_scan(*a, backend="torch"), ins, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_autograd_function_matches_direct_backward():
    """mimo_scan's autograd wiring returns exactly the direct C3 call's gradients."""
    ins, dy = make_inputs(1, 5, 2, 3, 4, 2, dtype=torch.float32)
    leaves = [t.requires_grad_(True) for t in ins]
    mimo_scan(*leaves, chunk=2, backend="triton").backward(dy)
    direct = mimo_backward(*ins, dy, chunk=2, backend="triton")
    for name, t, r in zip(GRAD_NAMES, leaves, direct, strict=True):
        assert torch.equal(t.grad, r), name


def test_backward_is_deterministic():
    """Two runs, the same bits (partials summed by torch, no atomics)."""
    ins, dy = make_inputs(2, 5, 2, 3, 4, 2, dtype=torch.float32)
    a = mimo_backward(*ins, dy, chunk=2, backend="triton", block_p=2)
    b = mimo_backward(*ins, dy, chunk=2, backend="triton", block_p=2)
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))


def test_guards():
    """Weights for another head count or width, and a dy of the wrong shape, are refused."""
    (x, dt, alpha, B, C, wx, wo), dy = make_inputs(1, 4, 2, 3, 4, 2)
    with pytest.raises(MambaShapeError, match="mimo_x is"):
        mimo_backward(x, dt, alpha, B, C, wx[:, :, :2], wo[:, :, :2], dy, backend="torch")
    with pytest.raises(MambaShapeError, match="x has 2 heads but alpha has 1"):
        mimo_backward(x, dt, alpha[:1], B, C, wx, wo, dy, backend="torch")
    with pytest.raises(MambaShapeError, match="dy has shape"):
        mimo_backward(x, dt, alpha, B, C, wx, wo, dy[:, :3], backend="torch")


def _classes(t):
    return torch.stack([torch.isnan(t), torch.isposinf(t), torch.isneginf(t)])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy under the interpreter warns on inf arithmetic
def test_non_finite_inputs_give_the_oracles_non_finite_pattern():
    """One +inf in x with B, C, the MIMO weights and dy non-negative: the infinity reaches every later state and
    G >= 0, so the oracle's dalpha and dmimo_o are infinite (not NaN) -- and the kernel must match them element by
    element (NaN, +inf, -inf told apart), which it only does if the past-the-end steps of the last chunk add
    nothing rather than 0 * inf."""
    ins, dy = make_inputs(1, 9, 2, 3, 4, 2)
    x, dt, alpha, B, C, wx, wo = ins
    x = x.abs().clone()
    x[0, 4, 1, 2] = float("inf")
    ins = (x, dt, alpha, B.abs(), C.abs(), wx.abs(), wo.abs())
    dy = dy.abs()
    ref = mimo_scan_grads_ref(*ins, dy)
    assert torch.isposinf(ref[2]).any()  # the case the test is about: an infinite, not NaN, dalpha
    for backend, dtype in (("torch", torch.float64), ("triton", torch.float32)):
        kw = dict(chunk=4) if backend == "triton" else {}
        got = mimo_backward(*(t.to(dtype) for t in ins), dy.to(dtype), backend=backend, **kw)
        for name, a, r in zip(GRAD_NAMES, got, ref, strict=True):
            assert torch.equal(_classes(a), _classes(r)), (backend, name)
