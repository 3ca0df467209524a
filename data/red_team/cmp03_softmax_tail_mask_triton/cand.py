import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_row_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    # Padding lanes read 0.0 instead of -inf, and the sum below does not mask them out.
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=0.0)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    s = tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride + offs, e / s, mask=mask)


class ModelNew(nn.Module):
    """One-program-per-row Triton softmax with a tail-mask bug (exact when the width is a power of two)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        xf = x.float().contiguous()
        n_cols = xf.shape[-1]
        x2 = xf.reshape(-1, n_cols)
        y = torch.empty_like(x2)
        BLOCK = triton.next_power_of_2(n_cols)
        _softmax_row_kernel[(x2.shape[0],)](x2, y, n_cols, x2.stride(0), BLOCK=BLOCK)
        return y.reshape(xf.shape).to(x.dtype)
