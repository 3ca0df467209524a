"""The portable torch path of the fused block backward: the hand-derived stages of :mod:`.reference` in reverse,
float32 for 16/32-bit inputs (float64 for float64), the scan through C2's torch path from the forward's
checkpoints. Gradients come back in their tensors' dtypes (and the conv weight's gradient in its shape)."""

from __future__ import annotations

import torch

from .._common import compute_dtype, conv_weight_2d
from ..backward_selective_scan.torch_path import scan_bwd


def block_bwd(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, dout, saved, chunk: int):
    cd = compute_dtype(x)
    w = conv_weight_2d(conv_weight, "fused_block_backward").to(cd)
    k = w.shape[1]
    L = x.shape[1] - k + 1
    d = x.shape[-1]
    xc = x.to(cd)
    p = sum(w[:, j] * xc[:, j:j + L] for j in range(k))
    if conv_bias is not None:
        p = p + conv_bias.to(cd)
    sg = torch.sigmoid(p)
    v = p * sg
    do = dout.to(cd)
    if norm_weight is None:
        dy, dg = do, None
    else:
        y, rstd = saved["y"].to(cd), saved["rstd"].to(cd)[..., None]
        g = norm_weight.to(cd)
        yn = y * rstd  # the normalised output: dy = r (g dout - yn s / d), s = sum g dout yn (see the Triton kernel)
        s = (g * do * yn).sum(-1, keepdim=True)
        dy = rstd * (g * do - yn * (s / d))
        dg = (do * y * rstd).sum((0, 1)).to(norm_weight.dtype)
    tc = lambda t: None if t is None else t.to(cd)
    dv, ddt, dA, dB, dC, dD = scan_bwd(v, tc(delta), tc(A), tc(B), tc(C), tc(D), dy, saved["ckpt"], chunk)
    dp = dv * sg * (1 + p * (1 - sg))
    dx = torch.zeros_like(xc)
    for j in range(k):
        dx[:, j:j + L] += w[:, j] * dp
    dw = torch.stack([(xc[:, j:j + L] * dp).sum((0, 1)) for j in range(k)], -1)
    db = None if conv_bias is None else dp.sum((0, 1)).to(conv_bias.dtype)
    cast = lambda t, ref: None if ref is None else t.to(ref.dtype)
    return (dx.to(x.dtype), dw.reshape(conv_weight.shape).to(conv_weight.dtype), db, cast(ddt, delta), cast(dA, A),
            cast(dB, B), cast(dC, C), cast(dD, D), dg)
