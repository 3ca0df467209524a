"""Inputs and derived error bounds shared by the Mamba-op tests.

The bounds are forward error bounds of the Higham kind (Accuracy and Stability of Numerical Algorithms, ch. 3):
a quantity computed through at most ``m`` floating-point operations, each with relative error at most the unit
roundoff ``u``, is within ``gamma_m * S`` of its exact value, ``gamma_m = m u / (1 - m u)``, where ``S`` is the sum
of the absolute values of the terms it is made of. The references provide ``S`` (their magnitude recurrences);
the op-specific ``m`` is stated where it is used.
"""

import torch

# unit roundoff: half the distance from 1 to the next float
UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def gamma(m: int, u: float) -> float:
    assert m * u < 1
    return m * u / (1 - m * u)


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


def scan_forward_steps(L: int, n: int) -> int:
    """Operations on the longest dependency chain of y_t in float32: per time step at most 6 (delta * A, the exp
    -- taken as 2 ulp --, Abar * h, delta * u, that times B_t, the add), L steps, then the N-term dot with C_t and
    the D skip (N + 2)."""
    return 6 * L + n + 2


def scan_backward_steps(L: int, n: int, d: int) -> int:
    """The gradients consume the recomputed forward states (6 per step) and the reverse carry G (6 per step: the
    C dy product, the add, the Abar product, plus the factors of each gradient's term), and the widest sum over
    them: L for dA / dD (over time; the batch sum adds at most b), N for du / ddelta, d_model for dB / dC (over
    channels). 13 L + N + d + 8 covers each."""
    return 13 * L + n + d + 8


def assert_within(name, got, ref, bound):
    """|got - ref| <= bound elementwise, with the worst ratio in the message."""
    err = (got.double() - ref.double()).abs()
    ratio = float((err / bound.clamp_min(1e-300)).max())
    assert bool((err <= bound).all()), f"{name}: error exceeds the bound by x{ratio:.3g} (max err {float(err.max()):.3e})"
    return ratio
