"""Float64 ground truth of the selective scan's backward (C2), two ways.

:func:`selective_scan_grads_ref` differentiates the forward oracle
(:func:`lethe.kernels.mamba.forward_chunked_scan.reference.selective_scan_ref`) with autograd: the gradients of the
definition, with no derivation of ours in between.

The hand derivation the kernels implement (per batch element, channel d, state n; ``Abar_t = exp(delta_t A)``,
``dy_t`` the incoming gradient, ``G_L = 0``)::

    G_t      = C_t dy_t + Abar_{t+1} G_{t+1}                         (dL/dh_t, a reverse-time scan)
    du_t     = sum_n G_t delta_t B_t + D dy_t
    ddelta_t = sum_n G_t A Abar_t h_{t-1} + u_t sum_n G_t B_t
    dA       = sum_t G_t delta_t Abar_t h_{t-1}                       (summed over the batch too)
    dB_t     = sum_d G_t delta_t u_t                                  (over channels)
    dC_t     = sum_d dy_t h_t                                         (over channels)
    dD       = sum_t dy_t u_t                                         (over batch and time)

:func:`selective_scan_grads_magnitude` runs these same equations on magnitudes (every product of absolute values,
``H`` from the forward's magnitude recurrence), giving for each gradient entry a bound on the sum of the absolute
values of the terms its exact value adds up: the scale of a ``gamma_m * scale`` error bound.
"""

from __future__ import annotations

import torch

from ..forward_chunked_scan.reference import require_f64, selective_scan_magnitude, selective_scan_ref

GRAD_NAMES = ("du", "ddelta", "dA", "dB", "dC", "dD")


def selective_scan_grads_ref(u, delta, A, B, C, D, dy):
    """(du, ddelta, dA, dB, dC, dD) of ``sum(y * dy)`` by autograd through the float64 oracle (dD None when D is)."""
    require_f64(u=u, delta=delta, A=A, B=B, C=C, D=D, dy=dy)
    leaves = [x.detach().requires_grad_(True) if x is not None else None for x in (u, delta, A, B, C, D)]
    y = selective_scan_ref(*leaves)
    wrt = [x for x in leaves if x is not None]
    grads = list(torch.autograd.grad(y, wrt, dy))
    if D is None:
        grads.append(None)
    return tuple(grads)


def selective_scan_grads_magnitude(u, delta, A, B, C, D, dy):
    """The hand-derived backward on magnitudes (see the module docstring); same order as the gradients."""
    require_f64(u=u, delta=delta, A=A, B=B, C=C, D=D, dy=dy)
    _, H = selective_scan_magnitude(u, delta, A, B, C, D)
    b, L, d = u.shape
    Ab, Bb, Cb, ub, dtb, dyb = A.abs(), B.abs(), C.abs(), u.abs(), delta.abs(), dy.abs()
    G = u.new_zeros(b, d, A.shape[1])
    du, ddt, dB, dC = (torch.zeros_like(x) for x in (u, u, B, B))
    dA = torch.zeros_like(A)
    for t in reversed(range(L)):
        abar = torch.exp(delta[:, t, :, None] * A[None])
        if t + 1 < L:
            G = torch.exp(delta[:, t + 1, :, None] * A[None]) * G
        G = G + Cb[:, t, None, :] * dyb[:, t, :, None]
        hprev = H[:, t - 1] if t > 0 else torch.zeros_like(G)
        du[:, t] = (G * (dtb[:, t, :, None] * Bb[:, t, None, :])).sum(-1)
        if D is not None:
            du[:, t] += (D.abs() * dyb[:, t])
        ddt[:, t] = (G * (Ab[None] * abar * hprev + Bb[:, t, None, :] * ub[:, t, :, None])).sum(-1)
        dA += (G * dtb[:, t, :, None] * abar * hprev).sum(0)
        dB[:, t] = (G * (dtb[:, t] * ub[:, t])[:, :, None]).sum(1)
        dC[:, t] = (dyb[:, t, :, None] * H[:, t]).sum(1)
    dD = None if D is None else (dyb * ub).sum((0, 1))
    return du, ddt, dA, dB, dC, dD
