"""Float64 ground truth of the complex-valued (rotary) state scan of Mamba-3 (C4), written from its definition.

Per batch element and head, with the state ``h_t`` ``[N, P]`` (n_state rows, headdim columns), ``h_{-1} = 0``, a
scalar decay per head and data-dependent rotation angles on the first ``S`` row pairs::

    alpha_t  = exp(dt_t A)                                    (A < 0 per head, dt_t > 0)
    h_t      = alpha_t R(theta_t) h_{t-1} + dt_t B_t x_t^T
    y_t      = h_t^T C_t                                      ([P])

``R(theta_t)`` rotates row pair (2k, 2k+1) by the angle ``theta_t[k]`` for ``k < S`` and leaves every other row as
it is: read as complex numbers ``z_k = h_{2k} + i h_{2k+1}``, the transition is the complex diagonal
``alpha_t exp(i theta_t[k])`` of Mamba-3's complex SSM, the input ``dt (B_2k + i B_2k+1) x`` and the readout
``Re(conj(C_2k + i C_2k+1) z_k)``. ``theta`` is the per-step angle (the caller forms it, e.g. dt times a learned
frequency). Layouts: x, y ``[batch, L, H, P]``; dt ``[batch, L, H]``; A ``[H]``; B, C ``[batch, L, H, N]``; theta
``[batch, L, H, S]`` with ``2 S <= N``.
"""

from __future__ import annotations

import torch

from ..forward_chunked_scan.reference import require_f64


def rotate_pairs(h, theta):
    """Rotate row pairs (2k, 2k+1), k < theta.shape[-1], of ``h`` ``[..., N, P]`` by ``theta`` ``[..., S]``."""
    s = theta.shape[-1]
    c, sn = torch.cos(theta)[..., None], torch.sin(theta)[..., None]
    even, odd = h[..., 0:2 * s:2, :], h[..., 1:2 * s:2, :]
    out = h.clone()
    out[..., 0:2 * s:2, :] = c * even - sn * odd
    out[..., 1:2 * s:2, :] = sn * even + c * odd
    return out


def complex_scan_rope_ref(x, dt, A, B, C, theta):
    """y ``[batch, L, H, P]``, one step at a time as the equations above (float64 only)."""
    require_f64(x=x, dt=dt, A=A, B=B, C=C, theta=theta)
    b, L, H, P = x.shape
    N = B.shape[-1]
    h = x.new_zeros(b, H, N, P)
    ys = []
    for t in range(L):
        alpha = torch.exp(dt[:, t] * A)[..., None, None]
        h = alpha * rotate_pairs(h, theta[:, t]) + (dt[:, t, :, None, None] * B[:, t, :, :, None]) * x[:, t, :, None, :]
        ys.append((h * C[:, t, :, :, None]).sum(-2))
    return torch.stack(ys, 1)


def complex_scan_rope_magnitude(x, dt, A, B, C, theta):
    """Error-bound scale: a rotation keeps each pair's 2-norm, so the recurrence on pair norms
    ``M_t[k] = alpha_t M_{t-1}[k] + dt_t |B_t pair k|_2 |x_t|`` (unpaired rows: their absolute value) bounds each
    pair of the state and of its perturbations, and ``Y_t = sum_k |C_t pair k|_2 M_t[k]`` bounds the readout
    (Cauchy-Schwarz per pair). Returns Y ``[batch, L, H, P]``."""
    require_f64(x=x, dt=dt, A=A, B=B, C=C, theta=theta)
    b, L, H, P = x.shape
    N = B.shape[-1]
    s = theta.shape[-1]

    def pair_norms(v):  # [..., N] -> [..., S + (N - 2S)]: the pairs' 2-norms, then the unpaired rows' |.|
        paired = torch.sqrt(v[..., 0:2 * s:2] ** 2 + v[..., 1:2 * s:2] ** 2)
        return torch.cat([paired, v[..., 2 * s:].abs()], -1)

    M = x.new_zeros(b, H, s + N - 2 * s, P)
    ys = []
    for t in range(L):
        alpha = torch.exp(dt[:, t] * A)[..., None, None]
        M = alpha * M + (dt[:, t, :, None, None] * pair_norms(B[:, t])[..., None]) * x[:, t, :, None, :].abs()
        ys.append((M * pair_norms(C[:, t])[..., None]).sum(-2))
    return torch.stack(ys, 1)
