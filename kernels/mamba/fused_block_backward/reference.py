"""Float64 ground truth of the fused block's backward (C6), the forward's definition in
:mod:`lethe.kernels.mamba.fused_block_forward.reference`.

:func:`fused_block_grads_ref` is autograd through that oracle. The hand derivation the kernels implement, stage by
stage in reverse (``dout`` the incoming gradient; sums over d are over channels)::

    dg[d]   = sum_{batch,t} dout_t[d] y_t[d] r_t
    s_t     = sum_d g[d] dout_t[d] y_t[d] r_t
    dy_t[d] = r_t (g[d] dout_t[d] - y_t[d] r_t s_t / d_model)            (RMSNorm; dy = dout without it)
    (dv, ddelta, dA, dB, dC, dD) = the selective scan's backward with input v and incoming dy
                                   (lethe.kernels.mamba.backward_selective_scan.reference)
    dp_t    = dv_t silu'(p_t),   silu'(p) = s (1 + p (1 - s)),  s = sigmoid(p)
    dx_s[d] = sum_j w[d, j] dp_{s-j}[d]          (0 <= s - j < L)
    dw[d,j] = sum_{batch,t} x_{t+j}[d] dp_t[d],   dc0[d] = sum_{batch,t} dp_t[d]

:func:`fused_block_grads_magnitude` runs these on the forward's magnitudes (``fused_block_magnitude``), with
``|silu'| <= 1.1`` widened by ``|silu''| <= 1/2`` times the conv magnitude P (the slope's own sensitivity to a
perturbed p), for the scale of each gradient's error bound.
"""

from __future__ import annotations

import torch

from ..backward_selective_scan.reference import selective_scan_grads_magnitude
from ..forward_chunked_scan.reference import require_f64
from ..fused_block_forward.reference import SILU_SLOPE_MAX, fused_block_magnitude, fused_block_ref

GRAD_NAMES = ("dx", "dconv_weight", "dconv_bias", "ddelta", "dA", "dB", "dC", "dD", "dnorm_weight")
SILU_CURVATURE_MAX = 0.5  # max |silu''(p)|, at p = 0


def fused_block_grads_ref(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, dout, eps: float = 1e-6):
    """The nine gradients (None for an absent optional input) of ``sum(out * dout)``, by autograd (float64)."""
    ins = (x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight)
    require_f64(dout=dout, **dict(zip(GRAD_NAMES, ins, strict=True)))
    leaves = [t.detach().requires_grad_(True) if t is not None else None for t in ins]
    out = fused_block_ref(*leaves, eps)
    present = [t for t in leaves if t is not None]
    grads = iter(torch.autograd.grad(out, present, dout))
    return tuple(None if t is None else next(grads) for t in leaves)


def fused_block_grads_magnitude(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, dout,
                                eps: float = 1e-6):
    """The hand-derived backward on magnitudes (see the module docstring), in GRAD_NAMES order."""
    M = fused_block_magnitude(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, eps)
    P, V, Y = M["P"], M["V"], M["Y"]
    dO = dout.abs()
    d = x.shape[-1]
    if norm_weight is None:
        Sdy, Sdg = dO, None
    else:
        R, G = M["R"], norm_weight.abs()
        y = M["y"].abs()
        # first order, one factor perturbed at a time: r^3 moves relatively by 3 g rho, y by g Y, and
        # s = sum g dout y by g sum |g dout| Y -- so the product y r^3 s has magnitude
        # r^3 (1 + 3 rho) (Y sum|g dout y| + |y| sum|g dout| Y), no Y^2 term
        R3 = M["rstd"].pow(3) * (1 + 3 * M["rho"])
        s_abs = (G * dO * y).sum(-1, keepdim=True)
        s_mag = (G * dO * Y).sum(-1, keepdim=True)
        Sdy = R * G * dO + R3 * (Y * s_abs + y * s_mag) / d
        Sdg = (dO * Y * R).sum((0, 1))
    Sdv, Sddt, SdA, SdB, SdC, SdD = selective_scan_grads_magnitude(V, delta, A, B, C, D, Sdy)
    Sdp = Sdv * (SILU_SLOPE_MAX + SILU_CURVATURE_MAX * P)
    w = conv_weight.reshape(d, -1).abs()
    k = w.shape[1]
    L = Sdp.shape[1]
    Sdx = torch.zeros_like(x)
    for j in range(k):
        Sdx[:, j:j + L] += w[:, j] * Sdp
    Sdw = torch.stack([(x[:, j:j + L].abs() * Sdp).sum((0, 1)) for j in range(k)], -1).reshape(conv_weight.shape)
    Sdb = None if conv_bias is None else Sdp.sum((0, 1))
    return Sdx, Sdw, Sdb, Sddt, SdA, SdB, SdC, SdD, Sdg
