"""The portable torch path of the fused block forward: the block's stages in order, float32 for 16/32-bit inputs
(float64 for float64), the scan through C1's torch path (so the checkpoints are the same)."""

from __future__ import annotations

import torch

from .._common import compute_dtype, conv_weight_2d
from ..forward_chunked_scan.torch_path import scan_fwd, scan_fwd_chunk_parallel


def block_fwd(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, eps: float, chunk: int,
              scan_mode: str = "serial"):
    """Returns ``(out in x's dtype, saved)``: saved holds y (pre-norm) and rstd in the compute dtype and the scan
    checkpoints, what the backward reuses. ``scan_mode`` picks C1's torch form of the scan."""
    cd = compute_dtype(x)
    w = conv_weight_2d(conv_weight, "fused_block_forward").to(cd)
    k = w.shape[1]
    L = x.shape[1] - k + 1
    xc = x.to(cd)
    p = sum(w[:, j] * xc[:, j:j + L] for j in range(k))
    if conv_bias is not None:
        p = p + conv_bias.to(cd)
    v = p * torch.sigmoid(p)
    scan = scan_fwd if scan_mode == "serial" else scan_fwd_chunk_parallel
    y, ckpt, _ = scan(v, delta.to(cd), A.to(cd), B.to(cd), C.to(cd), None if D is None else D.to(cd), chunk)
    if norm_weight is None:
        return y.to(x.dtype), dict(y=y, rstd=None, ckpt=ckpt)
    # y scaled by max(max|y|, 1) before squaring, as the Triton kernel: y^2 overflows float32 long before r does
    sc = y.abs().amax(-1).clamp_min(1.0)
    rstd = 1.0 / (sc * torch.sqrt((y / sc[..., None]).pow(2).mean(-1) + eps / (sc * sc)))
    out = y * rstd[..., None] * norm_weight.to(cd)
    return out.to(x.dtype), dict(y=y, rstd=rstd, ckpt=ckpt)
