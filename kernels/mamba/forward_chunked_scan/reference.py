"""Float64 ground truth of the Mamba-1 selective scan, written from its definition (Gu & Dao, Mamba, eq. 2a-2b
with the zero-order-hold discretisation of A and the Euler step for B).

Per batch element, channel ``d`` and state index ``n``, for ``t = 0 .. L-1`` with ``h_{-1} = 0``::

    Abar_t[d, n] = exp(delta_t[d] * A[d, n])
    h_t[d, n]    = Abar_t[d, n] * h_{t-1}[d, n] + delta_t[d] * B_t[n] * u_t[d]
    y_t[d]       = sum_n C_t[n] * h_t[d, n] + D[d] * u_t[d]

``delta`` is the (already positive) step: a caller that parametrises it through softplus applies it first.
The oracle refuses anything but float64, so a low-precision tensor can never become its own reference; its
gradients are plain autograd through the loop (:mod:`lethe.kernels.mamba.backward_selective_scan.reference`
adds the hand-derived ones).
"""

from __future__ import annotations

import torch


class OracleDtypeError(TypeError):
    """The float64 oracle was handed a tensor of another dtype."""


def require_f64(**tensors) -> None:
    for name, t in tensors.items():
        if t is not None and t.dtype != torch.float64:
            raise OracleDtypeError(f"the float64 oracle refuses {name} of dtype {t.dtype}; cast explicitly")


def selective_scan_ref(u, delta, A, B, C, D=None, return_states: bool = False):
    """y ``[batch, L, d_model]`` (and, with ``return_states``, every h_t ``[batch, L, d_model, N]``), one time step
    at a time, exactly as the equations above."""
    require_f64(u=u, delta=delta, A=A, B=B, C=C, D=D)
    b, L, d = u.shape
    h = u.new_zeros(b, d, A.shape[1])
    ys, hs = [], []
    for t in range(L):
        abar = torch.exp(delta[:, t, :, None] * A[None])
        h = abar * h + (delta[:, t] * u[:, t])[:, :, None] * B[:, t, None, :]
        y = (h * C[:, t, None, :]).sum(-1)
        if D is not None:
            y = y + D * u[:, t]
        ys.append(y)
        hs.append(h)
    y = torch.stack(ys, 1)
    return (y, torch.stack(hs, 1)) if return_states else y


def selective_scan_magnitude(u, delta, A, B, C, D=None):
    """The same recurrence on magnitudes: ``H_t = Abar_t H_{t-1} + |delta_t u_t B_t|``, ``Y_t = sum_n |C_t| H_t +
    |D u_t|``, so that ``Y`` bounds the sum of the absolute values of every term the exact y_t adds up (Abar > 0).
    A forward error bound of the form ``gamma_m * Y`` (Higham, ch. 3) needs exactly this scale."""
    require_f64(u=u, delta=delta, A=A, B=B, C=C, D=D)
    b, L, d = u.shape
    H = u.new_zeros(b, d, A.shape[1])
    ys, hs = [], []
    for t in range(L):
        abar = torch.exp(delta[:, t, :, None] * A[None])
        H = abar * H + (delta[:, t] * u[:, t]).abs()[:, :, None] * B[:, t, None, :].abs()
        y = (H * C[:, t, None, :].abs()).sum(-1)
        if D is not None:
            y = y + (D * u[:, t]).abs()
        ys.append(y)
        hs.append(H)
    return torch.stack(ys, 1), torch.stack(hs, 1)
