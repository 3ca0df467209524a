"""Float64 ground truth of the Mamba-3 MIMO scan (rank R) and its backward (C3), from the definition.

Per batch element and head, the state ``h_t`` ``[N, P]``, ``h_{-1} = 0``; the input is lifted to rank R by a
per-head weight ``Wx = mimo_x[h]`` ``[R, P]``, and the R outputs are folded back by ``Wo = mimo_o[h]`` ``[R, P]``::

    X_t[r, p]  = Wx[r, p] x_t[p]
    a_t        = exp(dt_t alpha)                                         (alpha < 0 per head, dt_t > 0)
    h_t[n, p]  = a_t h_{t-1}[n, p] + dt_t sum_r B_t[r, n] X_t[r, p]       (a rank-R update)
    Yr_t[r, p] = sum_n C_t[r, n] h_t[n, p]
    y_t[p]     = sum_r Wo[r, p] Yr_t[r, p]

With R = 1 and Wx = Wo = 1 this is the Mamba-2 (SISO) scan. Layouts: x, y ``[batch, L, H, P]``; dt ``[batch, L, H]``;
alpha ``[H]``; B, C ``[batch, L, H, R, N]``; mimo_x, mimo_o ``[H, R, P]``.

The backward the kernels implement (``dy`` incoming, ``G_L = 0``; sums over batch and time for the parameters)::

    dYr_t[r, p] = Wo[r, p] dy_t[p]
    G_t[n, p]   = sum_r C_t[r, n] dYr_t[r, p] + a_{t+1} G_{t+1}[n, p]
    dC_t[r, n]  = sum_p dYr_t[r, p] h_t[n, p]
    dB_t[r, n]  = dt_t sum_p G_t[n, p] X_t[r, p]
    dX_t[r, p]  = dt_t sum_n B_t[r, n] G_t[n, p];   dx_t[p] = sum_r Wx[r, p] dX_t[r, p]
    ddt_t       = sum_{n,p} G_t[n, p] (alpha a_t h_{t-1}[n, p] + sum_r B_t[r, n] X_t[r, p])
    dalpha      = sum dt_t a_t G_t[n, p] h_{t-1}[n, p]
    dWx[r, p]   = sum x_t[p] dX_t[r, p],          dWo[r, p] = sum Yr_t[r, p] dy_t[p]
"""

from __future__ import annotations

import torch

from ..forward_chunked_scan.reference import require_f64

GRAD_NAMES = ("dx", "ddt", "dalpha", "dB", "dC", "dmimo_x", "dmimo_o")


def mimo_scan_ref(x, dt, alpha, B, C, mimo_x, mimo_o):
    """y ``[batch, L, H, P]`` one step at a time (float64 only)."""
    require_f64(x=x, dt=dt, alpha=alpha, B=B, C=C, mimo_x=mimo_x, mimo_o=mimo_o)
    b, L, H, P = x.shape
    N = B.shape[-1]
    h = x.new_zeros(b, H, N, P)
    ys = []
    for t in range(L):
        X = mimo_x * x[:, t, :, None, :]  # [b, H, R, P]
        a = torch.exp(dt[:, t] * alpha)[..., None, None]
        h = a * h + dt[:, t, :, None, None] * torch.einsum("bhrn,bhrp->bhnp", B[:, t], X)
        Yr = torch.einsum("bhrn,bhnp->bhrp", C[:, t], h)
        ys.append((mimo_o * Yr).sum(-2))
    return torch.stack(ys, 1)


def mimo_scan_grads_ref(x, dt, alpha, B, C, mimo_x, mimo_o, dy):
    """The seven gradients of ``sum(y * dy)`` by autograd through :func:`mimo_scan_ref`."""
    ins = (x, dt, alpha, B, C, mimo_x, mimo_o)
    require_f64(dy=dy, **dict(zip(GRAD_NAMES, ins, strict=True)))
    leaves = [t.detach().requires_grad_(True) for t in ins]
    return tuple(torch.autograd.grad(mimo_scan_ref(*leaves), leaves, dy))


def mimo_scan_grads_magnitude(x, dt, alpha, B, C, mimo_x, mimo_o, dy):
    """The backward's equations on magnitudes (every product of absolute values; H and G from the magnitude
    recurrences), in GRAD_NAMES order: the scale of each gradient's error bound."""
    require_f64(x=x, dt=dt, alpha=alpha, B=B, C=C, mimo_x=mimo_x, mimo_o=mimo_o, dy=dy)
    b, L, H, P = x.shape
    N = B.shape[-1]
    xa, Ba, Ca, Wx, Wo, dya, al = x.abs(), B.abs(), C.abs(), mimo_x.abs(), mimo_o.abs(), dy.abs(), alpha.abs()
    Hs = []
    Hm = x.new_zeros(b, H, N, P)
    for t in range(L):
        a = torch.exp(dt[:, t] * alpha)[..., None, None]
        Hm = a * Hm + dt[:, t, :, None, None] * torch.einsum("bhrn,bhrp->bhnp", Ba[:, t], Wx * xa[:, t, :, None, :])
        Hs.append(Hm)
    G = x.new_zeros(b, H, N, P)
    dx, dB, dC = torch.zeros_like(x), torch.zeros_like(B), torch.zeros_like(C)
    ddt = torch.zeros_like(dt)
    dalpha = torch.zeros_like(alpha)
    dWx, dWo = torch.zeros_like(mimo_x), torch.zeros_like(mimo_o)
    for t in reversed(range(L)):
        if t + 1 < L:
            G = torch.exp(dt[:, t + 1] * alpha)[..., None, None] * G
        dYr = Wo * dya[:, t, :, None, :]
        G = G + torch.einsum("bhrn,bhrp->bhnp", Ca[:, t], dYr)
        a = torch.exp(dt[:, t] * alpha)[..., None, None]
        hp = Hs[t - 1] if t > 0 else torch.zeros_like(G)
        X = Wx * xa[:, t, :, None, :]
        dtt = dt[:, t, :, None, None]
        dC[:, t] = torch.einsum("bhrp,bhnp->bhrn", dYr, Hs[t])
        dB[:, t] = dtt * torch.einsum("bhnp,bhrp->bhrn", G, X)
        dX = dtt * torch.einsum("bhrn,bhnp->bhrp", Ba[:, t], G)
        dx[:, t] = (Wx * dX).sum(-2)
        U = torch.einsum("bhrn,bhrp->bhnp", Ba[:, t], X)
        ddt[:, t] = (G * (al[:, None, None] * a * hp + U)).sum((-2, -1))
        dalpha += (dtt * a * G * hp).sum((0, 2, 3))
        dWx += (xa[:, t, :, None, :] * dX).sum(0)
        dWo += (torch.einsum("bhrn,bhnp->bhrp", Ca[:, t], Hs[t]) * dya[:, t, :, None, :]).sum(0)
    return dx, ddt, dalpha, dB, dC, dWx, dWo
