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


def block_forward_steps(L: int, n: int, d: int, k: int) -> int:
    """The fused forward's chain: the conv (k products and k adds, the bias: 2k + 1), SiLU (exp, add, divide,
    taken as 4), the scan (scan_forward_steps), the norm (the scaling of y by its row maximum, the d-term mean
    square, its division by d and the add of eps / sc^2, the square root and the reciprocal taken as 2 ulp each --
    the GPU's approximate forms --, the product by sc, two output products: d + 11)."""
    return (2 * k + 1) + 4 + scan_forward_steps(L, n) + (d + 11)


def block_backward_steps(b: int, L: int, n: int, d: int, k: int) -> int:
    """The fused backward's chain: the recomputed forward (block_forward_steps), the norm's backward (the d-term
    s_t, then r^3 and the products: d + 8), the scan's backward (scan_backward_steps; it counts the state
    recomputation again, harmless), silu' and its product (6), the conv's backward (k taps, 2k + 2), and the
    sums over batch and time of dw, dc0, dg, dA, dD (b L)."""
    return block_forward_steps(L, n, d, k) + (d + 8) + scan_backward_steps(L, n, d) + 6 + (2 * k + 2) + b * L
