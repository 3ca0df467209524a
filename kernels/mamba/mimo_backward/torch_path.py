"""The portable torch path of the MIMO scan: the forward (y, and the states at each chunk start) and the
hand-derived backward of :mod:`.reference`, vectorised over batch and heads, float32 for 16/32-bit inputs
(float64 for float64); gradients in their tensors' dtypes."""

from __future__ import annotations

import torch

from .._common import compute_dtype


def mimo_fwd(x, dt, alpha, B, C, mimo_x, mimo_o):
    cd = compute_dtype(x)
    x_, dt_, al, B_, C_, Wx, Wo = (t.to(cd) for t in (x, dt, alpha, B, C, mimo_x, mimo_o))
    b, L, H, P = x.shape
    h = x_.new_zeros(b, H, B.shape[-1], P)
    y = x_.new_empty(b, L, H, P)
    for t in range(L):
        a = torch.exp(dt_[:, t] * al)[..., None, None]
        h = a * h + dt_[:, t, :, None, None] * torch.einsum("bhrn,bhrp->bhnp", B_[:, t], Wx * x_[:, t, :, None, :])
        y[:, t] = (Wo * torch.einsum("bhrn,bhnp->bhrp", C_[:, t], h)).sum(-2)
    return y.to(x.dtype)


def mimo_bwd(x, dt, alpha, B, C, mimo_x, mimo_o, dy):
    cd = compute_dtype(x)
    x_, dt_, al, B_, C_, Wx, Wo, dy_ = (t.to(cd) for t in (x, dt, alpha, B, C, mimo_x, mimo_o, dy))
    b, L, H, P = x.shape
    hs = [x_.new_zeros(b, H, B.shape[-1], P)]
    for t in range(L):
        a = torch.exp(dt_[:, t] * al)[..., None, None]
        hs.append(a * hs[-1] + dt_[:, t, :, None, None]
                  * torch.einsum("bhrn,bhrp->bhnp", B_[:, t], Wx * x_[:, t, :, None, :]))
    G = torch.zeros_like(hs[0])
    dx, dB, dC, ddt = torch.empty_like(x_), torch.empty_like(B_), torch.empty_like(C_), torch.empty_like(dt_)
    dal, dWx, dWo = torch.zeros_like(al), torch.zeros_like(Wx), torch.zeros_like(Wo)
    for t in reversed(range(L)):
        h, hp = hs[t + 1], hs[t]
        a = torch.exp(dt_[:, t] * al)[..., None, None]
        dtt = dt_[:, t, :, None, None]
        X = Wx * x_[:, t, :, None, :]
        dYr = Wo * dy_[:, t, :, None, :]
        G = G + torch.einsum("bhrn,bhrp->bhnp", C_[:, t], dYr)
        dC[:, t] = torch.einsum("bhrp,bhnp->bhrn", dYr, h)
        dB[:, t] = dtt * torch.einsum("bhnp,bhrp->bhrn", G, X)
        dX = dtt * torch.einsum("bhrn,bhnp->bhrp", B_[:, t], G)
        dx[:, t] = (Wx * dX).sum(-2)
        U = torch.einsum("bhrn,bhrp->bhnp", B_[:, t], X)
        ddt[:, t] = (G * (al[:, None, None] * a * hp + U)).sum((-2, -1))
        dal += (dtt * a * G * hp).sum((0, 2, 3))
        dWx += (x_[:, t, :, None, :] * dX).sum(0)
        dWo += (torch.einsum("bhrn,bhnp->bhrp", C_[:, t], h) * dy_[:, t, :, None, :]).sum(0)
        G = a * G
    return tuple(g.to(t.dtype) for g, t in zip((dx, ddt, dal, dB, dC, dWx, dWo),
                                               (x, dt, alpha, B, C, mimo_x, mimo_o), strict=True))
