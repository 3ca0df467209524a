"""The portable torch path of the selective-scan backward: the hand-derived reverse scan of :mod:`.reference`,
vectorised over batch, channels and states, float32 for 16/32-bit inputs (float64 for float64).

Chunk by chunk from the last: the chunk's states are recomputed from the forward's checkpoint, then walked in
reverse carrying ``G`` (dL/dh). Gradients are returned in their tensors' dtypes.
"""

from __future__ import annotations

import torch

from .._common import compute_dtype


def scan_bwd(u, delta, A, B, C, D, dy, ckpt, chunk: int):
    cd = compute_dtype(u)
    b, L, d = u.shape
    n = A.shape[1]
    uc, dc, Ac, Bc, Cc, dyc = (x.to(cd) for x in (u, delta, A, B, C, dy))
    Dc = None if D is None else D.to(cd)
    du, ddt = torch.empty_like(uc), torch.empty_like(uc)
    dB, dC = torch.empty_like(Bc), torch.empty_like(Cc)
    dA = torch.zeros_like(Ac)
    G = uc.new_zeros(b, d, n)
    for c in reversed(range(ckpt.shape[1])):
        t0, t1 = c * chunk, min(L, (c + 1) * chunk)
        hs = [ckpt[:, c].to(cd)]
        for t in range(t0, t1):
            hs.append(torch.exp(dc[:, t, :, None] * Ac) * hs[-1] + (dc[:, t] * uc[:, t])[:, :, None] * Bc[:, t, None, :])
        for t in reversed(range(t0, t1)):
            abar = torch.exp(dc[:, t, :, None] * Ac)
            hprev, h = hs[t - t0], hs[t - t0 + 1]
            G = G + Cc[:, t, None, :] * dyc[:, t, :, None]
            gb = (G * Bc[:, t, None, :]).sum(-1)  # u factored out of ddelta's sum (see the Triton kernel)
            du[:, t] = gb * dc[:, t]
            ddt[:, t] = (G * Ac * abar * hprev).sum(-1) + gb * uc[:, t]
            dA += (G * dc[:, t, :, None] * abar * hprev).sum(0)
            dB[:, t] = (G * (dc[:, t] * uc[:, t])[:, :, None]).sum(1)
            dC[:, t] = (dyc[:, t, :, None] * h).sum(1)
            G = G * abar  # the carry into step t - 1: Abar_t G_t
    if Dc is not None:
        du += Dc * dyc
    dD = None if D is None else (dyc * uc).sum((0, 1)).to(D.dtype)
    return (du.to(u.dtype), ddt.to(delta.dtype), dA.to(A.dtype), dB.to(B.dtype), dC.to(C.dtype), dD)
