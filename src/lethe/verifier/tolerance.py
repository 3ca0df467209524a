"""Every numeric tolerance the verifier uses, in one place, each with its derivation.

Notation: ``eps(d)`` is the machine epsilon of dtype ``d`` (the gap between 1 and the next representable number:
2^-52 fp64, 2^-23 fp32, 2^-10 fp16, 2^-7 bf16); ``tiny(d)`` its smallest normal; ``denorm(d)`` its smallest
positive subnormal; ``N`` the reduction length of a probe (see :func:`reduction_length`); ``S`` the scale of an
output, the root mean square of the finite float64 reference values (see :func:`output_scale`).

Why these forms. A correct kernel differs from the float64 reference for three reasons, and each term of the
value tolerance covers one of them:

* the final rounding of each result to the output dtype, the few roundings of elementwise math after the last
  reduction (transcendentals are within 1-2 ulp in torch/Triton/libdevice) and intermediate storage in the data
  dtype: ``REL_K * eps * (|r_i| + S)``;
* rounding inside a reduction of length N performed in *some* order: the classical bound for recursive summation
  is ``(N-1) * u * sum|terms|``; a random-walk model of the rounding errors of pairwise or blocked summation gives
  ``~ sqrt(N) * u * sum|terms|``; ``sum|terms|`` is not observable for an arbitrary operator, so the output scale
  ``|r_i| + S`` stands in for it (for a sum of same-sign terms ``|r_i|`` is exactly ``sum|terms|``; with
  cancellation it is smaller; ORD-03's cancellation probe measures sum|terms| instead and grades against the
  worst case of any fp32 order, :func:`ord03_bound`). Because the contract
  requires an fp32 accumulator (PRC-02), this term uses fp32's eps even for half-precision data:
  ``ORD_K * eps_acc * sqrt(N) * (|r_i| + S)``;
* gradual underflow: every operation whose exact result is subnormal is rounded to a multiple of the
  smallest subnormal of the dtype it is carried out in, so a reduction of length N in the accumulator can be
  off by ``N * denorm(acc)`` and the final rounding to the data dtype by one ``denorm(d)``, even when both are
  otherwise exact: ``SUB_K * (N * denorm(acc) + denorm(d))``. For fp32 data this is ~1e-41 at N=4096, far
  below any normal value, so it never hides a real error but keeps a correct kernel from failing on subnormal
  data. For half-precision data the N steps are taken in fp32 (PRC-02), so they are not granted N fp16
  subnormals (2.4e-4 at N = 4096, larger than the outputs of a mean over values near fp16's smallest
  normal) -- the same reasoning as the reduction term's eps_acc.

Gradients (CMP-02, :func:`grad_tol`). The backward of an operator is built from the transposes of its forward
steps, and the transpose of a broadcast is a reduction: every statistic the forward reduces over an axis of
length N and broadcasts back (a softmax's max and sum, a norm's mean and variance, a matmul's K products)
becomes, in the backward, a sum of N terms of the *gradient's own* scale, whose result lands on one gradient
element (softmax: the max's gradient, ``-sum_j dz_j``, goes to the argmax position) or is spread over the row.
Such a sum differs from a forward reduction in one respect: its terms have random signs and often cancel
exactly (a softmax is invariant to shifting its row, so ``sum_j dz_j = 0``), so the sum's result says nothing
about its partial sums. The random-walk model still applies, with the partial sums in place of the output: N
roundings of size ``eps_acc * |partial|``, and a partial sum of k zero-mean terms of RMS S is ~sqrt(k) * S, at
most ~sqrt(N) * S. The reduction term of the gradient tolerance therefore scales ``|r_i| + sqrt(N) * S``
rather than ``|r_i| + S``: ``ORD_K * eps_acc * sqrt(N) * (|r_i| + sqrt(N) * S)``. One serial pass over the N
terms (the worst order an honest backward uses) has a rounding error of about
``eps_acc * S * N / sqrt(6)`` on its result, ten times inside that term; a pairwise or blocked one about
``eps_acc * S * sqrt(N * log2 N)``. The final-rounding term of the gradient uses ``GRAD_REL_K`` (a backward is
a few elementwise steps deeper than its forward). A gradient wrong by a relative 2e-3 (CMP-02's fixture) still
fails for N up to ~1e3 on the elements where ``|r_i| >~ S``, and wrong terms (a dropped product-rule term, a
normaliser treated as a constant) are O(1) relative.

Conditioning (every value gate, :func:`cond_floor`). Every term above scales with the output (|r_i| + S) and
so assumes the operator is well conditioned. When it is not, an honest fp32 result is off by more: a large
convolution or gemm that cancels into the unsaturated range of tanh/clamp/softmax carries the accumulator's
rounding of sum|terms|, far above |r_i|; a batch/instance/group norm of a constant (exact result beta, or 0)
carries the rounding of the mean divided by sqrt(var + eps); the mean of group-normalised values (exactly 0)
carries the rounding of the normalised values. None of that is visible in the output. Backward error analysis
states what is: a backward-stable fp32 implementation returns f exactly at data perturbed by ~u relative per
element (u = eps_acc / 2, the accumulator's unit roundoff). The reference therefore measures, per CMP-01/CMP-02
probe and in float64, spread_i = max over COND_DRAWS draws of |f(data * (1 + u d)) - f(data)|_i, d = +-1 per
element, where "data" is every floating input, parameter and buffer and every stored intermediate (each leaf
module's output) -- lethe.verifier.reference.conditioning_spread -- and the tolerance becomes
``max(value_tol, K_COND * sqrt(N) * spread_i)`` (``grad_tol`` for gradients, the spread then of the float64
backward under the same upstream gradient). Why K_COND * sqrt(N): one draw perturbs each datum once, by u; the
implementation's rounding perturbs each term of a reduction of length N by up to N roundings (serial order),
~sqrt(N) of them in the random-walk model this module uses throughout, so the same sqrt(N) * K_COND margin as
the ORD-03 offset bound (:func:`ord03_offset_bound`, the same construction on one probe) applies; the
per-element maximum over a few random-sign draws also sits below the worst-case alignment of signs, which the
K_COND = ORD_K = 4 factor absorbs. The floor cannot hide a real defect on a well-conditioned output: there
spread_i ~ u * |r_i| and the floor, 4 * sqrt(N) * u * |r_i|, is half of value_tol's own reduction term
(ORD_K * eps_acc * sqrt(N) * (|r_i| + S) = 8 * u * sqrt(N) * (|r_i| + S)); it only rises where the reference
itself says the problem amplifies rounding. It comes from a measurement, never a constant: a narrower
accumulator (bf16, fp16) errs by 2^16 or 2^13 times u per rounding: a bf16 gemm on the ill-conditioned
gemm-into-tanh test stays outside the floor on most elements (tests/verifier/test_reference.py). Every value
gate reads it (probes.FLOOR_GATES: CMP-01/02/03, ORD-01/03, PRC-01/02, EXC-01/02) on the probes whose spread the
reference measures (probes.measures_floor: every forward probe but the CMP-03 shape variants, which are
budgeted one forward each and keep CMP-03's own bound). Each of those gates tests one
property on probes built for it, and the floor leaves that property's test intact: on ORD-01's same-sign rows
and PRC-02's ones the output is well conditioned (spread ~ u * |r_i|, half of the gate's own term, as above);
on ORD-03's +B ... -B rows the spread of a sum is ~u * B, K_COND * sqrt(N) * u * B, against the gate's
gamma_N * sum|terms| ~ 2 * N * u * B; a narrower running total misses by orders of magnitude more on all of
them. What the floor adds is the problem's own ill-conditioning, which those probes meet as CMP-01's do: the
all-ones rows of PRC-02 and the subnormal inputs of EXC-02 make a norm's channel constant, a batch of two at
1x1 spatial size makes batch norm amplify rounding 1e5-fold on every probe.

The constants are the calibration engineer's knobs (``lethe.calibration`` sweeps them); every gate reads them
from here and records the values it used in its evidence.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

# Exact powers of two, written out so no platform float library is involved.
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
TINY = {"float64": 2.0**-1022, "float32": 2.0**-126, "float16": 2.0**-14, "bfloat16": 2.0**-126}
DENORM = {"float64": 2.0**-1074, "float32": 2.0**-149, "float16": 2.0**-24, "bfloat16": 2.0**-133}
FMAX = {"float64": 1.7976931348623157e308, "float32": 3.4028234663852886e38, "float16": 65504.0,
        "bfloat16": 3.3895313892515355e38}

# "Large magnitude near the top of the dtype's safe range": values x whose products and N-term sums of squares
# stay finite (x^2 * N < FMAX for N up to ~1e6 in fp32/bf16; fp16 tops out at 65504, so 64^2 * 16 fits).
LARGE = {"float32": 1.0e6, "float16": 64.0, "bfloat16": 1.0e6, "float64": 1.0e6}
SMALL = 1.0e-6


@dataclass(frozen=True)
class Constants:
    """The tolerance knobs; defaults are the derivation's values, a calibration sweep may pass others."""

    REL_K: float = 8.0   # ulps allowed for final rounding + a short chain of elementwise ops after a reduction
    ORD_K: float = 4.0   # the ORD-01 bound: 4 * eps * sqrt(N) * scale
    SUB_K: float = 4.0   # gradual-underflow slack, in units of N * denorm(dtype)
    ORD03_K: float = 1.0  # cancellation probe: multiples of gamma_N * sum|terms|, any-order fp32 (ord03_bound)
    # offset probe: allow K_COND * sqrt(N) * the measured sensitivity to eps-relative input perturbations
    # (see ord03_offset_bound): ORD_K's random-walk allowance, applied to the condition of the operator
    K_COND: float = 4.0
    GRAD_REL_K: float = 32.0  # backward = two reductions deep (dL/dx = J^T g): a few more roundings than forward
    FD_RTOL: float = 1e-5  # float64 central differences agree with autograd to ~sqrt(eps64) * curvature
    SUBNORMAL_REL: float = 2.0**-10  # EXC-02: subnormals carry fewer bits; compare within 1/1024 of |r| + slack


DEFAULT = Constants()

# value_tol computes tolerance arrays of at least this many elements with torch (same operations, same order);
# the size gates.TORCH_COMPARE_MIN_NUMEL uses for comparisons.
TORCH_MIN_NUMEL = 1 << 18


def dtype_name(dtype) -> str:
    """Canonical name ("float32", ...) of a numpy/torch dtype or a string like "fp16"."""
    s = str(dtype).replace("torch.", "")
    return {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "half": "float16",
            "float": "float32", "double": "float64"}.get(s, s)


def eps(dtype) -> float:
    return EPS[dtype_name(dtype)]


def reduction_length(input_shapes: list[tuple[int, ...]], output_shapes: list[tuple[int, ...]]) -> int:
    """An upper estimate of the longest reduction a probe can contain.

    The operator is a black box, so N is bounded from the shapes: the longest axis of any input (a single-axis
    reduction cannot be longer) or the ratio of the largest input to the smallest output (a reduction over
    several axes folds at least that many inputs into one output). Over-estimating N loosens the bound by
    sqrt(N_est / N_true) only.
    """
    longest = max((max(s) for s in input_shapes if len(s)), default=1)
    numel_in = max((int(np.prod(s)) for s in input_shapes), default=1)
    numel_out = min((max(int(np.prod(s)), 1) for s in output_shapes), default=1)
    return int(max(1, longest, math.ceil(numel_in / numel_out)))


def output_scale(ref: np.ndarray) -> float:
    """S: root mean square of the finite values of a float64 reference output (0.0 when none is finite).

    RMS rather than max: one large element (a softmax's peak, an outlier row) must not license errors on all
    the small ones.
    """
    a = np.asarray(ref, dtype=np.float64)
    if a.size:
        # Common case without the masked copy: a finite mean of squares means every element is finite, and
        # then a[isfinite(a)] is a.ravel(), the same values in the same order (so the same pairwise sum). The
        # squares are computed by torch on large arrays (one exact multiply per element either way).
        flat = a.reshape(-1)
        with np.errstate(over="ignore", invalid="ignore"):  # any overflow is reported by the path below
            if flat.size >= TORCH_MIN_NUMEL:
                tf = _torch(flat)
                sq = tf.mul(tf).numpy()
            else:
                sq = flat * flat
            m = np.mean(sq)
        if math.isfinite(m):
            return float(np.sqrt(m))
    a = a[np.isfinite(a)]
    return float(np.sqrt(np.mean(a * a))) if a.size else 0.0


def _torch(a: np.ndarray):
    """A torch view of a float64 numpy array (a contiguous copy only where it is not one already)."""
    import torch

    shape = np.shape(a)
    a = np.ascontiguousarray(a, dtype=np.float64).reshape(shape)  # ascontiguousarray makes a 0-d array 1-d
    return torch.from_numpy(a if a.flags.writeable else a.copy())


NUMPY = (np.ndarray, np.generic)  # what _magnitude returns below TORCH_MIN_NUMEL (a 0-d input gives a scalar)


def _magnitude(ref: np.ndarray, with_scale: bool):
    """m_i = |r_i| (0 where r_i is not finite), plus S = output_scale(ref) when ``with_scale``: the factor
    every per-element bound multiplies. A torch tensor for arrays of at least TORCH_MIN_NUMEL elements (the same
    elementwise float64 operations, on the host's cores, with fewer temporaries), a numpy array otherwise."""
    ref = np.asarray(ref, dtype=np.float64)
    scale = output_scale(ref) if with_scale else None
    if ref.size >= TORCH_MIN_NUMEL:
        import torch

        t = _torch(ref).abs()
        # A finite max (NaN propagates through it) means there is nothing to mask: one read pass instead of
        # building the mask and a masked copy.
        if not (t.numel() and math.isfinite(float(t.max()))):
            t = torch.where(torch.isfinite(t), t, torch.zeros((), dtype=torch.float64))
        return t.add_(scale) if with_scale else t
    r = np.abs(ref)
    r = np.where(np.isfinite(r), r, 0.0)
    return r + scale if with_scale else r


def acc_eps(dtype) -> float:
    """eps of the accumulator the contract requires: fp32 for fp16/bf16/fp32 data (PRC-02), fp64 for fp64."""
    return EPS["float64"] if dtype_name(dtype) == "float64" else EPS["float32"]


def sub_slack(dtype, n: int, c: Constants = DEFAULT) -> float:
    """Gradual-underflow slack ``SUB_K * (N * denorm(acc) + denorm(dtype))`` (module docstring)."""
    d = dtype_name(dtype)
    acc = "float64" if d == "float64" else "float32"
    return c.SUB_K * (n * DENORM[acc] + DENORM[d])


def value_tol(ref: np.ndarray, dtype, n: int, c: Constants = DEFAULT, rel_k: float | None = None) -> np.ndarray:
    """Per-element tolerance (module docstring), with m_i = |r_i| + S:

        REL_K * eps(dtype) * m_i  +  ORD_K * eps_acc * sqrt(N) * m_i  +  SUB_K * (N * denorm(acc) + denorm(dtype))

    The reduction term uses the accumulator's eps (fp32 even for half-precision data, which is what PRC-02
    requires), so a half-precision kernel is not granted sqrt(N) half-precision ulps per element.
    """
    d = dtype_name(dtype)
    k = c.REL_K if rel_k is None else rel_k
    a, b, z = k * EPS[d], c.ORD_K * acc_eps(d) * math.sqrt(n), sub_slack(d, n, c)
    m = _magnitude(ref, with_scale=True)
    if isinstance(m, NUMPY):
        return a * m + b * m + z
    # (a*m + b*m) + z as above, element by element in the same order, in place: one new array instead of four
    out = m.mul(a)
    return out.add_(m.mul_(b)).add_(z).numpy()


def grad_tol(ref: np.ndarray, dtype, n: int, c: Constants = DEFAULT) -> np.ndarray:
    """CMP-02's per-element tolerance on a gradient (module docstring, "Gradients"), with m_i = |r_i| + S:

        GRAD_REL_K * eps(dtype) * m_i  +  ORD_K * eps_acc * sqrt(N) * (|r_i| + sqrt(N) * S)  +  sub_slack

    i.e. :func:`value_tol` with REL_K -> GRAD_REL_K and the reduction term's scale S -> sqrt(N) * S: a backward
    reduction sums N gradient-scale terms of random sign whose partial sums reach sqrt(N) * S even where the
    result cancels to ~0. ``N`` is the operator's reduction length (:func:`reduction_length`), the length of the
    backward's reductions too: a reduction over an axis in the forward is a broadcast over it in the backward
    and a broadcast is a reduction.
    """
    d = dtype_name(dtype)
    sq = math.sqrt(n)
    a, b, z = c.GRAD_REL_K * EPS[d], c.ORD_K * acc_eps(d) * sq, sub_slack(d, n, c)
    r = _magnitude(ref, with_scale=False)
    s = output_scale(ref)
    if isinstance(r, NUMPY):
        return a * (r + s) + b * (r + sq * s) + z
    # the same operations in the same order, on torch for large arrays
    out = r.add(s).mul_(a)
    return out.add_(r.add_(sq * s).mul_(b)).add_(z).numpy()


def prc02_bracket_tol(ref: np.ndarray, terms_scale: float, dtype, n: int, c: Constants = DEFAULT) -> np.ndarray:
    """PRC-02 on the bracketed accumulation rows (probes.accumulation_values): :func:`value_tol` plus the
    reduction's random-walk allowance applied to sum|terms| instead of the output:

        value_tol(ref, dtype, N)  +  ORD_K * eps_acc * sqrt(N) * sum|terms|

    The rows +B, v, ..., v, -B cancel, so an output understates the size of what was summed; where the
    bracketed input meets another operand that is not constant along the axis (a weight, a state that varies
    across the row), an honest fp32 accumulator rounds partial sums of size ~B, not of the output's size.
    sum|terms| is measured as ORD-03's is, by the reference on |x|. For a plain sum of the rows an fp32 total is
    exact, and the allowance (4 * 2^-23 * 64 * 2^8 = 7.8e-3 at N = 4099) stays far below what a 16-bit total
    loses (~N * 2^-14 = 0.25).
    """
    t = value_tol(ref, dtype, n, c)
    return t + c.ORD_K * acc_eps(dtype) * math.sqrt(max(n, 1)) * terms_scale


def ord01_bound(ref: np.ndarray, dtype, n: int, c: Constants = DEFAULT) -> np.ndarray:
    """ORD-01: a reduction of length N reordered arbitrarily stays within 4*eps*sqrt(N)*scale (+ final rounding).

    ``ref`` is the reference output array, or a scalar scale. scale_i = |r_i| + S stands for sum|terms| of
    output i: ORD-01 probes use same-sign inputs, where a sum's
    output magnitude equals sum|terms|; S keeps outputs that cross zero (signed weights) from getting a zero
    bound. The random-walk model gives sqrt(N) rather than the worst-case N: an error within the worst case
    but far outside sqrt(N) means the kernel's rounding errors are correlated (a narrower accumulator),
    which is what the gate exists to catch.
    """
    d = dtype_name(dtype)
    k, z = (c.ORD_K * math.sqrt(n) + c.REL_K) * EPS[d], c.SUB_K * n * DENORM[d]
    if np.ndim(ref) == 0:
        scale = abs(float(ref))  # a scalar is taken as the scale itself (sum|terms|), not as an output
        return k * scale + z
    scale = _magnitude(ref, with_scale=True)
    if isinstance(scale, NUMPY):
        return k * scale + z
    return scale.mul_(k).add_(z).numpy()  # the same two operations, in place on a large array


def sum_gamma(n: int, dtype) -> float:
    """gamma_n = n*u / (1 - n*u) with u = eps_acc/2 (the unit roundoff of the accumulator the contract requires):
    the classical bound on the relative error, against sum|terms|, of a sum of n terms (or a dot product of
    length n, whose products are rounded once) evaluated in *any* order -- any tree, serial, blocked with any
    block sizes, split-K -- since every term passes through at most n roundings of at most u each."""
    u = acc_eps(dtype) / 2.0
    nu = max(int(n), 1) * u
    return nu / (1.0 - nu) if nu < 1.0 else math.inf


def ord03_bound(ref: np.ndarray, terms_scale: float, dtype, n: int, c: Constants = DEFAULT) -> np.ndarray:
    """ORD-03 on the cancellation probe: ``REL_K*eps*|r_i| + ORD03_K*gamma_N*sum|terms| + SUB_K*N*denorm``.

    The probe row is +B, N-2 small terms in [0.5, 1.5), -B with B = probes.CANCEL_BIG = 2^14. The contract is
    that the reduction is carried out in fp32 (fp64 for fp64 data) in *some* order, any order: vendor GEMMs
    run one fused multiply-add chain per output element along K, blocked by a K panel whose length depends on
    the library and the CPU (384 on one machine, the whole K on another; a CUDA core GEMM's main loop is one
    chain over all of K), so an honest kernel may hold B in its running total for all N steps. gamma_N *
    sum|terms| (:func:`sum_gamma`) is the worst case of exactly that set of algorithms, so no fp32 order can
    fail it, while an accumulator narrower than fp32 on this row drops the ~N small terms whole (see
    probes.cancellation_values): its error ~N against a bound of ~N*2^-24*(2B + N) ~ N/450 at N = 4099, a
    factor of ~450. ORD03_K = 1: the bound is already a worst case, no statistical margin is needed.
    sum|terms| is measured by running the reference on |x|; REL_K*eps*|r_i| covers the final rounding and an
    elementwise tail after the reduction.
    """
    e = EPS[dtype_name(dtype)]
    k, z = c.REL_K * e, c.SUB_K * n * DENORM[dtype_name(dtype)]
    s = c.ORD03_K * sum_gamma(n, dtype) * terms_scale
    r = _magnitude(ref, with_scale=False)
    if isinstance(r, NUMPY):
        return k * r + s + z
    return r.mul_(k).add_(s).add_(z).numpy()  # ((k*r) + s) + z, in place on a large array


def ord03_offset_bound(ref: np.ndarray, sens: np.ndarray, dtype, n: int, c: Constants = DEFAULT) -> np.ndarray:
    """ORD-03 on the offset probe: the error may be K_COND*sqrt(N)*S_i (+ final rounding and underflow slack),
    where S_i is the reference's own measured sensitivity to relative input perturbations of size eps.

    The probe rows are x = M + u (M = probes.OFFSET = 2^12, u uniform in [-1, 1)), and it is only run for
    operators that are invariant to that shift (layer/batch/group norm, softmax, log-softmax, variance...):
    mathematically M does not matter, numerically it sets the condition of the problem. Every element of the fp32
    input already carries a relative uncertainty eps, i.e. an absolute one of eps*M ~ 5e-4 against a spread of
    ~0.6, so even the exact answer to the rounded problem moves by S_i ~ eps*M/std per element when the input
    moves by one ulp. S_i = max over a few draws d in {-1, +1}^shape of |f(x(1 + eps d)) - f(x)|_i, measured in
    float64 by the reference process, before any candidate exists.

    Why K_COND*sqrt(N)*S_i. A backward-stable algorithm (two-pass or Welford variance, max-subtracted softmax)
    computes the exact answer for an input perturbed by a few eps per reduction step; in the random-walk model
    used throughout this module those perturbations add up to ~eps*sqrt(N) relative per element, whose effect on
    the output is sqrt(N)*S_i (S_i being the effect of one eps). K_COND = ORD_K = 4 leaves the worst honest
    order measured (one serial fp32 Welford loop per row, whose running mean's rounding error walks like
    sqrt(N)) at err/tol <= 0.13 for N = 256..4096, a serial two-pass at <= 0.07 and torch's layer norm at
    <= 0.02 (tests/verifier/test_ord03_offset.py). The one-pass variance E[x^2] - E[x]^2 is not backward
    stable: E[x^2] ~ M^2 = 2^24 is rounded to a multiple of ulp(2^24) = 2 while the variance is 1/3, so its
    error is ~(M/std)^2 * eps relative and err/tol is 1.5e3..6.6e3 at N = 256..4096. The bound
    scales with the operator's own condition, so it needs no per-operator constant: softmax, whose outputs move
    by eps*M*y_i, gets a bound as loose as its problem is ill-conditioned, and a layer norm gets one about
    K_COND*sqrt(N)*eps*M/std relative.

    The final-rounding term uses m_i = |r_i| + S as in :func:`value_tol` (outputs near zero keep a non-zero
    floor); a non-finite sensitivity is treated as 0 (the invariance check in the reference already rejects
    operators that overflow on the probe).
    """
    d = dtype_name(dtype)
    r = np.abs(np.asarray(ref, dtype=np.float64))
    r = np.where(np.isfinite(r), r, 0.0)
    s = np.abs(np.asarray(sens, dtype=np.float64))
    s = np.where(np.isfinite(s), s, 0.0)
    m = r + output_scale(ref)
    return c.REL_K * EPS[d] * m + c.K_COND * math.sqrt(max(n, 1)) * s + c.SUB_K * n * DENORM[d]


def cond_floor(spread: np.ndarray, n: int, c: Constants = DEFAULT) -> np.ndarray:
    """The conditioning floor under the value gates' bounds (module docstring, "Conditioning"): ``K_COND * sqrt(N) *
    spread_i``, spread_i = max over the reference's perturbed draws of |f(data(1 + u d)) - f(data)|_i (u the
    accumulator's unit roundoff, lethe.verifier.reference.conditioning_spread). A non-finite spread counts as 0."""
    s = np.abs(np.asarray(spread, dtype=np.float64))
    s = np.where(np.isfinite(s), s, 0.0)
    return c.K_COND * math.sqrt(max(n, 1)) * s


def with_cond_floor(t: np.ndarray, spread: np.ndarray | None, n: int, c: Constants = DEFAULT) -> np.ndarray:
    """max(t, cond_floor(spread)) elementwise; ``t`` unchanged when no spread was measured (or it does not
    match the output's shape: a floor never applies to elements it was not measured on)."""
    return _raised_to(t, spread, lambda s: cond_floor(s, n, c))


def _raised_to(t, spread: np.ndarray | None, floor_of) -> np.ndarray:
    """max(t, floor_of(spread)) elementwise; ``t`` (an array, or one number for the whole output) unchanged when
    no spread was measured or its shape is not the output's."""
    if spread is None:
        return t
    if np.ndim(t) == 0:
        t = np.full(np.shape(spread), float(t))
    if np.shape(spread) != np.shape(t):
        return t
    return np.maximum(t, floor_of(spread))


def with_layer_floor(t: np.ndarray, spread: np.ndarray | None) -> np.ndarray:
    """max(t, spread) elementwise, for the spread of ORD-03's any-order layer model
    (reference._LayerRoundingRun): each layer's output moved by gamma_n * sum|terms|, the worst case of an fp32
    reduction in any order, carried to the output. Already a worst case, it gets no statistical margin (ORD03_K
    = 1, as :func:`ord03_bound`). ``t`` unchanged when no spread was measured or its shape differs."""
    def finite_abs(sp):
        a = np.abs(np.asarray(sp, dtype=np.float64))
        return np.where(np.isfinite(a), a, 0.0)

    return _raised_to(t, spread, finite_abs)


def store_floor(spread: np.ndarray, c: Constants = DEFAULT) -> np.ndarray:
    """The storage floor under PRC-02's bounds on its half-precision probes: ``K_COND * spread_i``, spread_i the
    largest change of output i over the storage model's draws (reference._StoreRoundingRun: every operator's
    result moved by u_data d, once). One rounding per stored element, so no sqrt(N) (that factor of
    :func:`cond_floor` is for the N roundings inside a reduction); K_COND is the margin of a sampled maximum. A
    non-finite spread counts as 0."""
    s = np.abs(np.asarray(spread, dtype=np.float64))
    return c.K_COND * np.where(np.isfinite(s), s, 0.0)


def with_store_floor(t: np.ndarray, spread: np.ndarray | None, c: Constants = DEFAULT) -> np.ndarray:
    """max(t, store_floor(spread)) elementwise; ``t`` unchanged when no spread was measured or its shape differs."""
    return _raised_to(t, spread, lambda s: store_floor(s, c))


def as_dict(c: Constants = DEFAULT) -> dict:
    return asdict(c)
