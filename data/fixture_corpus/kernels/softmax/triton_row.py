import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_row(x_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * stride + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x2 = x.contiguous().view(-1, x.shape[-1])
        y = torch.empty_like(x2)
        _softmax_row[(x2.shape[0],)](x2, y, x2.stride(0), x2.shape[1], BLOCK=triton.next_power_of_2(x2.shape[1]))
        return y.view_as(x)
