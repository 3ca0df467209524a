"""Float64 ground truth of the fused Mamba block (C5 forward, C6 backward), written from its definition.

Per batch element, with ``x`` ``[L + K - 1, d_model]`` (its first K - 1 rows the causal history: zeros at the start
of a sequence), the depthwise convolution weight ``w`` ``[d_model, K]`` and bias ``c0`` ``[d_model]``::

    p_t[d]  = c0[d] + sum_{j=0}^{K-1} w[d, j] x_{t+j}[d]                  t = 0 .. L-1   (causal depthwise conv1d)
    v_t[d]  = silu(p_t[d]) = p_t[d] / (1 + exp(-p_t[d]))                                   (the activation gate)
    y       = selective_scan(v, delta, A, B, C, D)              (Mamba-1, see forward_chunked_scan.reference)
    r_t     = (mean_d y_t[d]^2 + eps)^(-1/2)
    out_t[d] = y_t[d] r_t g[d]                                  (RMSNorm over channels, weight g = norm_weight)

Without ``norm_weight`` the block ends at y (no normalisation). The oracle refuses anything but float64; its
gradients are plain autograd (:mod:`lethe.kernels.mamba.fused_block_backward.reference`).

:func:`fused_block_magnitude` evaluates the same chain on magnitudes for error bounds: every quantity is replaced
by an upper bound on the absolute values of what it is made of (``P = |c0| + sum |w||x|``; ``|silu(p)| <= |p| <=
P``; the scan on those; the norm with ``r`` widened by the first-order effect of perturbed y on the mean
square), so that a rounding of relative size u anywhere in the chain moves the result by at most u times the
magnitude it reaches.
"""

from __future__ import annotations

import torch

from .._common import conv_weight_2d
from ..forward_chunked_scan.reference import require_f64, selective_scan_magnitude, selective_scan_ref

# |d silu / dp| = |s (1 + p (1 - s))| peaks at 1.0998 (p near 2.4), s = sigmoid(p)
SILU_SLOPE_MAX = 1.1


def causal_conv_ref(x, conv_weight, conv_bias):
    """p_t = c0 + sum_j w[:, j] x_{t+j}, ``[batch, L, d_model]`` for ``x`` with L + K - 1 rows."""
    w = conv_weight_2d(conv_weight, "causal_conv_ref")
    k = w.shape[1]
    L = x.shape[1] - k + 1
    p = sum(w[:, j] * x[:, j:j + L] for j in range(k))
    return p if conv_bias is None else p + conv_bias


def fused_block_ref(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, eps: float = 1e-6,
                    return_parts: bool = False):
    """out ``[batch, L, d_model]`` as the equations above (float64 only); with ``return_parts`` also the
    intermediates ``dict(p=, v=, y=, rstd=)``."""
    require_f64(x=x, conv_weight=conv_weight, conv_bias=conv_bias, delta=delta, A=A, B=B, C=C, D=D,
                norm_weight=norm_weight)
    p = causal_conv_ref(x, conv_weight, conv_bias)
    v = p / (1 + torch.exp(-p))
    y = selective_scan_ref(v, delta, A, B, C, D)
    if norm_weight is None:
        out, rstd = y, None
    else:
        rstd = (y.pow(2).mean(-1, keepdim=True) + eps).rsqrt()
        out = y * rstd * norm_weight
    return (out, dict(p=p, v=v, y=y, rstd=rstd)) if return_parts else out


def fused_block_magnitude(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, eps: float = 1e-6):
    """Magnitudes of the forward chain: ``dict(P=, V=, Y=, H=, R=, OUT=)`` (see the module docstring).

    R bounds r under perturbed y: a perturbation of y by e (|e| <= g Y) changes the mean square by at most
    2 sum |y| g Y / d_model, hence r relatively by g rho with rho = sum |y| Y / (sum y^2 + d_model eps);
    R = r (1 + rho) (r^3, in the backward, moves relatively by 3 g rho: see fused_block_grads_magnitude)."""
    require_f64(x=x, conv_weight=conv_weight, conv_bias=conv_bias, delta=delta, A=A, B=B, C=C, D=D)
    P = causal_conv_ref(x.abs(), conv_weight.abs(), None if conv_bias is None else conv_bias.abs())
    V = P
    Y, H = selective_scan_magnitude(V, delta, A, B, C, D)
    out = dict(P=P, V=V, Y=Y, H=H)
    if norm_weight is None:
        out.update(R=None, OUT=Y)
        return out
    _, parts = fused_block_ref(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, eps, return_parts=True)
    y, rstd = parts["y"], parts["rstd"]
    d = y.shape[-1]
    rho = (y.abs() * Y).sum(-1, keepdim=True) / (y.pow(2).sum(-1, keepdim=True) + d * eps)
    R = rstd * (1 + rho)
    out.update(R=R, rho=rho, rstd=rstd, y=y, OUT=norm_weight.abs() * R * Y)
    return out
