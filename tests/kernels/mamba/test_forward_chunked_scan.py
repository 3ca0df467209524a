"""C1 forward_chunked_scan: the oracle against an independent closed form, the torch and Triton paths (Triton
on the CPU interpreter unless CUDA is present) against the oracle within derived bounds."""

import math

import pytest
import torch
from lethe.kernels.mamba import MambaShapeError, forward_chunked_scan
from lethe.kernels.mamba.forward_chunked_scan.reference import (
    OracleDtypeError,
    selective_scan_magnitude,
    selective_scan_ref,
)
from mamba_helpers import (
    UNIT_ROUNDOFF,
    assert_within,
    f64,
    gamma,
    make_scan_inputs,
    scan_forward_steps,
)

SHAPES = [  # (batch, L, d_model, N, chunk, block_d): odd lengths, a partial last chunk, partial channel blocks
    (2, 13, 6, 5, 4, 4),
    (1, 1, 3, 16, 4, None),
    (1, 9, 5, 3, 16, 2),
]


def test_oracle_matches_the_unrolled_closed_form():
    """The oracle's loop equals the recurrence unrolled into its convolution form,
    y_t = sum_{s<=t} sum_n C_t[n] exp(A[n] sum_{r=s+1..t} delta_r) delta_s B_s[n] u_s + D u_t:
    an independent evaluation of the same definition, so a slip in the loop (a wrong index, a missing term) shows."""
    u, delta, A, B, C, D = make_scan_inputs(1, 7, 3, 4)
    y = selective_scan_ref(u, delta, A, B, C, D)
    cum = torch.cumsum(delta, 1)  # [1, L, d]
    L = u.shape[1]
    want = torch.zeros_like(y)
    for t in range(L):
        for s in range(t + 1):
            decay = torch.exp((cum[0, t] - cum[0, s])[:, None] * A)  # [d, n]
            want[0, t] += (C[0, t] * decay * (delta[0, s] * u[0, s])[:, None] * B[0, s]).sum(-1)
        want[0, t] += D * u[0, t]
    # both sides in float64: the loop within gamma_{6L+N+2} Y (scan_forward_steps); the closed form's exponent is
    # a difference of prefix sums, off by up to L u sum(delta) <= L^2 u / 2 absolutely, times |A| <= 2: a relative
    # error of L^2 u in each decay, plus L terms summed -- so the two agree within (gamma_{6L+N+2} +
    # gamma_{L^2+L+N+4}) Y
    Y = selective_scan_magnitude(u, delta, A, B, C, D)[0]
    u64 = UNIT_ROUNDOFF[torch.float64]
    n = A.shape[1]
    assert_within("y", y, want, (gamma(scan_forward_steps(L, n), u64) + gamma(L * L + L + n + 4, u64)) * Y)


def test_oracle_refuses_low_precision():
    """The oracle must never quietly run at the precision it is meant to judge."""
    u, delta, A, B, C, D = make_scan_inputs(dtype=torch.float32)
    with pytest.raises(OracleDtypeError):
        selective_scan_ref(u, delta, A, B, C, D)


@pytest.mark.parametrize("shape", SHAPES)
def test_torch_path_float64_matches_oracle(shape):
    """The portable path in float64 is the same equations: within the float64 bound (and its checkpoints are the
    oracle's states before each chunk)."""
    b, L, d, n, chunk, _ = shape
    x = make_scan_inputs(b, L, d, n)
    y, ckpt, hlast = forward_chunked_scan(*x, chunk=chunk, backend="torch", return_checkpoints=True)
    yr, ckr, hlr = forward_chunked_scan(*x, chunk=chunk, backend="reference", return_checkpoints=True)
    Y, H = selective_scan_magnitude(*x)
    g = gamma(scan_forward_steps(L, n), UNIT_ROUNDOFF[torch.float64])
    assert_within("y", y, yr, g * Y)
    assert_within("h_last", hlast, hlr, g * H[:, -1])
    assert ckpt.shape == ckr.shape and torch.allclose(ckpt, ckr, rtol=0, atol=float(g * H.max()))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_triton_matches_oracle(shape, dtype):
    """Triton (float32 arithmetic on inputs of ``dtype``; float64 inputs run the same kernels in float64, which checks
    their algebra to float64 accuracy) against the float64 oracle evaluated on the same
    rounded inputs: |y - y_ref| <= gamma_m(u_fp32) Y + u_out |y_ref|, with m from scan_forward_steps, Y the
    magnitude recurrence, and u_out the rounding of the stored output (0 for float32: the float32 result is the
    value stored)."""
    b, L, d, n, chunk, block_d = shape
    x = make_scan_inputs(b, L, d, n, dtype=dtype)
    y, ckpt, hlast = forward_chunked_scan(*x, chunk=chunk, backend="triton", block_d=block_d, return_checkpoints=True)
    assert y.dtype == dtype and ckpt.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    yr, ckr, hlr = forward_chunked_scan(*x, chunk=chunk, backend="reference", return_checkpoints=True)
    Y, H = selective_scan_magnitude(*f64(*x))
    g = gamma(scan_forward_steps(L, n), UNIT_ROUNDOFF[torch.float64 if dtype == torch.float64 else torch.float32])
    u_out = 0.0 if dtype in (torch.float32, torch.float64) else UNIT_ROUNDOFF[dtype]
    assert_within("y", y, yr, g * Y + u_out * yr.abs())
    assert_within("h_last", hlast, hlr, g * H[:, -1])
    before = torch.cat([torch.zeros_like(H[:, :1]), H[:, :-1]], 1)[:, ::chunk]
    assert_within("checkpoints", ckpt, ckr, g * before)


def test_triton_and_torch_agree_on_float32():
    """Two float32 implementations of the same loop: both within the bound of the oracle, so within twice it of
    each other -- and the bound is far below the size of y, so a wrong kernel cannot hide in it."""
    x = make_scan_inputs(2, 11, 4, 3, dtype=torch.float32)
    yt = forward_chunked_scan(*x, chunk=4, backend="triton")
    yp = forward_chunked_scan(*x, chunk=4, backend="torch")
    Y, _ = selective_scan_magnitude(*f64(*x))
    bound = 2 * gamma(scan_forward_steps(11, 3), UNIT_ROUNDOFF[torch.float32]) * Y
    assert_within("y", yt, yp, bound)
    assert float(bound.max()) < 1e-3 * float(Y.max())


def test_nan_propagates_forward_in_time_only():
    """A NaN in u at (t, d) reaches y at every later step of that channel and nothing else (the state of channel d
    carries it; other channels and earlier steps never read it)."""
    u, delta, A, B, C, D = make_scan_inputs(1, 8, 3, 2, dtype=torch.float32)
    u = u.clone()
    u[0, 3, 1] = math.nan
    y = forward_chunked_scan(u, delta, A, B, C, D, chunk=4, backend="triton")
    nan = torch.isnan(y[0])
    assert nan[3:, 1].all() and not nan[:3].any() and not nan[:, [0, 2]].any()


def test_channel_mismatch_is_refused():
    """u with a channel count other than A's is refused with the two counts named."""
    u, delta, A, B, C, D = make_scan_inputs(1, 5, 4, 3)
    with pytest.raises(MambaShapeError, match="u has 3 channels but A has 4"):
        forward_chunked_scan(u[..., :3], delta[..., :3], A, B, C, D, backend="torch")
    with pytest.raises(MambaShapeError, match="delta has shape"):
        forward_chunked_scan(u, delta[:, :4], A, B, C, D, backend="torch")
    with pytest.raises(MambaShapeError, match="B has shape"):
        forward_chunked_scan(u, delta, A, B[..., :2], C, D, backend="torch")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("backend,dtype", [("torch", torch.float64), ("triton", torch.float64),
                                           ("torch", torch.float32), ("triton", torch.float32),
                                           ("triton", torch.bfloat16)])
@pytest.mark.slow
def test_chunk_parallel_mode_matches_oracle(shape, backend, dtype):
    """The chunk-parallel form (local scans, carry, fix-up) against the oracle: y, the checkpoints and the last
    state. Its decays are exp(A times a running sum of up to ``chunk`` deltas), whose exponent carries a relative
    error of up to (chunk + 1) u on |A sum delta| <= chunk (|delta A| <= 1 in these draws): chunk (chunk + 1) more
    operations' worth of error than the serial walk's step count."""
    b, L, d, n, chunk, block_d = shape
    x = make_scan_inputs(b, L, d, n, dtype=dtype)
    kw = dict(block_d=block_d) if backend == "triton" else {}
    y, ckpt, hlast = forward_chunked_scan(*x, chunk=chunk, backend=backend, scan_mode="chunk_parallel",
                                          return_checkpoints=True, **kw)
    yr, ckr, hlr = forward_chunked_scan(*x, chunk=chunk, backend="reference", return_checkpoints=True)
    Y, H = selective_scan_magnitude(*f64(*x))
    u_arith = UNIT_ROUNDOFF[torch.float64 if dtype == torch.float64 else torch.float32]
    g = gamma(scan_forward_steps(L, n) + chunk * (chunk + 1), u_arith)
    u_out = UNIT_ROUNDOFF[dtype] if dtype == torch.bfloat16 else 0.0
    assert y.dtype == dtype
    assert_within("y", y, yr, g * Y + u_out * yr.abs())
    assert_within("h_last", hlast, hlr, g * H[:, -1])
    before = torch.cat([torch.zeros_like(H[:, :1]), H[:, :-1]], 1)[:, ::chunk]
    assert_within("checkpoints", ckpt, ckr, g * before)


def test_unknown_scan_mode_is_refused():
    """A scan mode other than the two is an error, not a silent fallback."""
    x = make_scan_inputs(1, 4, 2, 2)
    with pytest.raises(ValueError, match="scan_mode must be one of"):
        forward_chunked_scan(*x, backend="torch", scan_mode="parallel")
