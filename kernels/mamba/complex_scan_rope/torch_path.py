"""The portable torch path of the rotary state scan (C4): the reference's recurrence vectorised over batch and
heads, float32 for 16/32-bit inputs (float64 for float64), y in x's dtype."""

from __future__ import annotations

import torch

from .._common import compute_dtype
from .reference import rotate_pairs


def rope_scan_fwd(x, dt, A, B, C, theta):
    cd = compute_dtype(x)
    b, L, H, P = x.shape
    N = B.shape[-1]
    xc, dc, Ac, Bc, Cc, tc = (t.to(cd) for t in (x, dt, A, B, C, theta))
    h = xc.new_zeros(b, H, N, P)
    y = xc.new_empty(b, L, H, P)
    for t in range(L):
        alpha = torch.exp(dc[:, t] * Ac)[..., None, None]
        h = alpha * rotate_pairs(h, tc[:, t]) + (dc[:, t, :, None, None] * Bc[:, t, :, :, None]) * xc[:, t, :, None, :]
        y[:, t] = (h * Cc[:, t, :, :, None]).sum(-2)
    return y.to(x.dtype)
