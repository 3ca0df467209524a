"""Forward error bounds of the Mamba ops (Higham, Accuracy and Stability of Numerical Algorithms, ch. 3).

A quantity computed through at most ``m`` floating-point operations, each with relative error at most the unit
roundoff ``u``, is within ``gamma_m * S`` of its exact value, ``gamma_m = m u / (1 - m u)``, where ``S`` is the sum
of the absolute values of the terms it is made of. Each op's float64 reference ships its magnitude recurrence for
``S``; the op's ``m`` (the longest dependency chain of one output element) is stated here, once, and used by the
tests (tests/kernels/mamba/) and by the benchmark's correctness check (:mod:`lethe.kernels.mamba.bench`).
"""

from __future__ import annotations

import torch

# unit roundoff: half the distance from 1 to the next float (TF32: 10 explicit mantissa bits)
UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
TF32_UNIT_ROUNDOFF = 2.0**-11


def gamma(m: int, u: float) -> float:
    """gamma_m = m u / (1 - m u); refused where m u >= 1 (no bound of this form exists there)."""
    if m * u >= 1:
        raise ValueError(f"gamma_m undefined: m u = {m * u:.3g} >= 1")
    return m * u / (1 - m * u)


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


def chunk_carry_steps(L: int, chunk: int) -> int:
    """What the chunk-parallel order adds to a chain: ``n_chunks (c (c + 1) + 4)``, ``c = min(chunk, L)``.

    Derivation. The chunk-parallel form replaces the per-step decays a term passes on its way from chunk j to a
    later output by decays of whole chunk spans, ``exp(A s)`` with s a running sum of at most c positive steps
    (the carry's ``exp(A S_c)``, the fix-up's ``exp(A sum_{chunk start..t} delta)``, the adjoint carry's alike).
    s is summed with relative error at most gamma_{c-1} (positive terms) and A s rounded once more, so the exponent
    is off by at most gamma_c |A s| <= gamma_c c, where |delta A| <= 1 per step (the regime of every bound here);
    ``exp(z + e) = exp(z)(1 + theta)`` with ``|theta| <= exp(gamma_c c) - 1``, which c (c + 1) roundings cover for
    c u small. The exp itself (2 ulp), the product by the carried state and the add make 4 more. A term crosses at
    most n_chunks - 1 carries and one fix-up decay: n_chunks such applications. Added to the serial chain (whose
    per-step decays the crossed chunks no longer use, so this overcounts); the magnitude recurrences stay valid
    because the chunked form regroups the same terms exactly (a product of chunk decays is the product of their
    steps' decays). The backward adds it twice: its forward state starts from the chunk-parallel checkpoints, and
    its adjoint G from the reversed carry. The parameter gradients' per-chunk partials summed over (batch, chunk)
    take at most min(c, L) + b n_chunks additions, within b L + c."""
    c = min(chunk, L)
    return -(-L // chunk) * (c * (c + 1) + 4)


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


def mimo_backward_steps(b: int, L: int, n: int, p: int, rank: int) -> int:
    """The forward chain (per step: dt alpha and its exp, 3; a h, 1; R rank-one terms of 3 products and an add,
    4R) recomputed, the reverse carry (per step: R terms C dYr, 2R + 1; the carry product, 1) and the widest
    reduction of a gradient: N + P for ddt, P for dB / dC, N for dx, R for dx's fold, b L for the parameters."""
    return (4 + 4 * rank) * L + (2 + 2 * rank) * L + n + p + rank + b * L + 8


def rope_scan_steps(L: int, n: int) -> int:
    """Operations per step on a state pair's chain: dt A and its exp (3), cos and sin (2 ulp each, entering the
    pair's norm through the rotation: 4), the rotation's products and add (3), alpha times it (1), the input
    dt B x (2) and its add (1): 14; then the readout over N rows and the pair sum (N + 2)."""
    return 14 * L + n + 2
