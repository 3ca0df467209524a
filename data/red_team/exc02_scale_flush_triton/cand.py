import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gain_kernel(x_ptr, w_ptr, y_ptr, n, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    w = tl.load(w_ptr + offs % n_cols, mask=mask, other=0.0)
    y = x * w
    # Denormals-are-zero by hand: anything below FLT_MIN is written as 0 "to avoid slow denormal paths".
    y = tl.where(tl.abs(y) < 1.1754943508222875e-38, 0.0, y)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    """Triton per-channel gain that flushes subnormal results to zero."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(0.5 + torch.rand(dim))

    def forward(self, x):
        xf = x.float().contiguous()
        w = self.weight.float().contiguous()
        y = torch.empty_like(xf)
        n = xf.numel()
        BLOCK = 4096
        _gain_kernel[(triton.cdiv(n, BLOCK),)](xf, w, y, n, xf.shape[-1], BLOCK=BLOCK, num_warps=8)
        return y.to(x.dtype)
