"""C4 complex_scan_rope: the oracle against a complex128 evaluation and against the real scan it reduces to
without rotation; the torch and Triton paths against the oracle within derived bounds."""

import pytest
import torch
from lethe.kernels.mamba.error_bounds import rope_scan_steps as steps
from lethe.kernels.mamba import MambaShapeError, complex_scan_rope
from lethe.kernels.mamba.complex_scan_rope.reference import complex_scan_rope_magnitude, complex_scan_rope_ref
from lethe.kernels.mamba.forward_chunked_scan.reference import selective_scan_ref
from mamba_helpers import UNIT_ROUNDOFF, assert_within, f64, gamma

SHAPES = [  # (batch, L, H, P, N, S, chunk, block_p): odd L, odd N, S < N / 2, P off a power of two
    (2, 9, 2, 3, 6, 3, 4, 2),
    (1, 1, 1, 4, 5, 2, 4, None),
    (1, 7, 3, 5, 8, 1, 16, 4),
]


def make_inputs(b, L, H, P, N, S, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    x = r(b, L, H, P)
    dt = 0.05 + 0.45 * torch.rand(b, L, H, generator=gen, dtype=torch.float64)
    A = -(0.5 + 1.5 * torch.rand(H, generator=gen, dtype=torch.float64))
    theta = 3.0 * r(b, L, H, S)
    return tuple(t.to(dtype) for t in (x, dt, A, r(b, L, H, N), r(b, L, H, N), theta))




def test_oracle_matches_complex_arithmetic():
    """The oracle's real pair rotations equal the complex SSM evaluated in complex128:
    z_t = alpha_t exp(i theta_t) z_{t-1} + dt (B_2k + i B_2k+1) x_t, y = sum_k Re(conj(C_2k + i C_2k+1) z_k)
    plus the unrotated rows as a real scan."""
    b, L, H, P, N, S = 1, 6, 2, 3, 7, 2
    x, dt, A, B, C, theta = make_inputs(b, L, H, P, N, S)
    y = complex_scan_rope_ref(x, dt, A, B, C, theta)
    Bz = torch.complex(B[..., 0:2 * S:2], B[..., 1:2 * S:2])
    Cz = torch.complex(C[..., 0:2 * S:2], C[..., 1:2 * S:2])
    z = torch.zeros(b, H, S, P, dtype=torch.complex128)
    hr = torch.zeros(b, H, N - 2 * S, P, dtype=torch.float64)
    for t in range(L):
        alpha = torch.exp(dt[:, t] * A)[..., None, None]
        z = alpha * torch.exp(1j * theta[:, t])[..., None] * z + dt[:, t, :, None, None] * Bz[:, t, ..., None] * x[:, t, :, None, :]
        hr = alpha * hr + dt[:, t, :, None, None] * B[:, t, :, 2 * S:, None] * x[:, t, :, None, :]
        want = (Cz[:, t, ..., None].conj() * z).real.sum(-2) + (C[:, t, :, 2 * S:, None] * hr).sum(-2)
        Y = complex_scan_rope_magnitude(x, dt, A, B, C, theta)[:, t]
        assert_within(f"y[{t}]", y[:, t], want, 2 * gamma(steps(L, N), UNIT_ROUNDOFF[torch.float64]) * Y)


def test_without_rotation_it_is_the_selective_scan_per_head():
    """theta = 0 leaves a Mamba-2 scan per head, which is C1's selective scan with the head's P columns as
    channels, A and delta constant over them and B, C shared: the two oracles agree."""
    b, L, H, P, N, S = 2, 5, 2, 3, 4, 2
    x, dt, A, B, C, theta = make_inputs(b, L, H, P, N, S)
    y = complex_scan_rope_ref(x, dt, A, B, C, torch.zeros_like(theta))
    for h in range(H):
        want = selective_scan_ref(x[:, :, h], dt[:, :, h, None].expand(b, L, P), A[h].expand(P, N), B[:, :, h],
                                  C[:, :, h])
        assert torch.allclose(y[:, :, h], want, rtol=0, atol=1e-13)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("backend,dtype", [("torch", torch.float64), ("triton", torch.float64),
                                           ("triton", torch.float32), ("triton", torch.bfloat16)])
@pytest.mark.slow
def test_paths_match_oracle(shape, backend, dtype):
    """|y - y_ref| <= gamma_m(u_arith) Y + u_out |y_ref|: m from ``steps``, Y the pair-norm magnitude, the
    oracle on the same rounded inputs; float64 inputs run the Triton kernel in float64 (its algebra)."""
    b, L, H, P, N, S, chunk, block_p = shape
    ins = make_inputs(b, L, H, P, N, S, dtype=dtype)
    kw = dict(chunk=chunk, block_p=block_p) if backend == "triton" else {}
    y = complex_scan_rope(*ins, backend=backend, **kw)
    assert y.dtype == dtype and y.shape == (b, L, H, P)
    ref = complex_scan_rope(*ins, backend="reference")
    u_arith = UNIT_ROUNDOFF[torch.float64 if dtype == torch.float64 else torch.float32]
    u_out = UNIT_ROUNDOFF[dtype] if dtype == torch.bfloat16 else 0.0
    Y = complex_scan_rope_magnitude(*f64(*ins))
    assert_within("y", y, ref, gamma(steps(L, N), u_arith) * Y + u_out * ref.abs())


def test_guards():
    """More angles than state pairs, or a head count other than A's, are refused."""
    x, dt, A, B, C, theta = make_inputs(1, 4, 2, 3, 4, 2)
    with pytest.raises(MambaShapeError, match="3 angles rotate 6 state rows"):
        complex_scan_rope(x, dt, A, B, C, torch.cat([theta, theta[..., :1]], -1), backend="torch")
    with pytest.raises(MambaShapeError, match="x has 2 heads but A has 3"):
        complex_scan_rope(x, dt, torch.cat([A, A[:1]]), B, C, theta, backend="torch")
