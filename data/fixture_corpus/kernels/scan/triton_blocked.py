import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_cumsum(x_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=0.0)
    y = tl.cumsum(x, axis=0)
    tl.store(y_ptr + row * stride + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x2 = x.contiguous().view(-1, x.shape[-1])
        y = torch.empty_like(x2)
        block = triton.next_power_of_2(x2.shape[1])
        _row_cumsum[(x2.shape[0],)](x2, y, x2.stride(0), x2.shape[1], BLOCK=block)
        return y.view_as(x)
