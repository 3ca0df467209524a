"""Inputs and derived error bounds shared by the Mamba-op tests.

The bounds are forward error bounds of the Higham kind (Accuracy and Stability of Numerical Algorithms, ch. 3):
a quantity computed through at most ``m`` floating-point operations, each with relative error at most the unit
roundoff ``u``, is within ``gamma_m * S`` of its exact value, ``gamma_m = m u / (1 - m u)``, where ``S`` is the sum
of the absolute values of the terms it is made of. The references provide ``S`` (their magnitude recurrences);
the op-specific ``m`` is stated where it is used.
"""

import torch

from lethe.kernels.mamba.error_bounds import (  # noqa: F401  (re-exported for the tests)
    UNIT_ROUNDOFF,
    block_backward_steps,
    block_forward_steps,
    chunk_carry_steps,
    gamma,
    scan_backward_steps,
    scan_forward_steps,
)




def make_scan_inputs(b=2, L=13, d=6, n=5, dtype=torch.float64, seed=0, with_d=True):
    """u, delta, A, B, C, D for the selective scan, drawn in float64 then rounded to ``dtype``.

    delta in [0.05, 0.5] and A in [-2, -0.5] keep |delta A| <= 1, the regime the step count of the bound below
    assumes (exp of a small argument: its relative error does not grow with the argument)."""
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    un = lambda lo, hi, *s: lo + (hi - lo) * torch.rand(*s, generator=gen, dtype=torch.float64)
    u = r(b, L, d)
    delta = un(0.05, 0.5, b, L, d)
    A = -un(0.5, 2.0, d, n)
    B = r(b, L, n)
    C = r(b, L, n)
    D = r(d) if with_d else None
    return tuple(None if x is None else x.to(dtype) for x in (u, delta, A, B, C, D))


def f64(*xs):
    return tuple(None if x is None else x.double() for x in xs)






def assert_within(name, got, ref, bound):
    """|got - ref| <= bound elementwise, with the worst ratio in the message."""
    err = (got.double() - ref.double()).abs()
    ratio = float((err / bound.clamp_min(1e-300)).max())
    assert bool((err <= bound).all()), f"{name}: error exceeds the bound by x{ratio:.3g} (max err {float(err.max()):.3e})"
    return ratio


def make_block_inputs(b=2, L=9, d=5, n=3, k=4, dtype=torch.float64, seed=0, coherent=False, with_bias=True,
                      with_d=True, with_norm=True):
    """x [b, L + k - 1, d], conv weight [d, k], conv bias, delta, A, B, C, D, norm weight for the fused block.

    ``coherent=True`` takes x, the conv weight and bias, B, C and D non-negative, so that p, v and y are too: no
    cancellation in the forward, the magnitude bounds are then close to the values themselves and the tests
    sensitive to small relative errors. The default (signed) draws test the rigorous, looser bound."""
    u, delta, A, B, C, D = make_scan_inputs(b, L, d, n, seed=seed, with_d=with_d)
    gen = torch.Generator().manual_seed(seed + 7)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    x = r(b, L + k - 1, d)
    w = 0.5 * r(d, k)
    bias = 0.1 * r(d) if with_bias else None
    nw = 1 + 0.1 * r(d) if with_norm else None
    if coherent:
        x, w, B, C = x.abs(), w.abs(), B.abs(), C.abs()
        bias = None if bias is None else bias.abs()
        D = None if D is None else D.abs()
    return tuple(None if t is None else t.to(dtype) for t in (x, w, bias, delta, A, B, C, D, nw))



