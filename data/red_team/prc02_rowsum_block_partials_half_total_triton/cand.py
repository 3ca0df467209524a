import torch
import torch.nn as nn
import triton
import triton.language as tl

_ACC = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}


@triton.jit
def _rowsum_kernel(x_ptr, y_ptr, stride, N_COLS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((1,), dtype=ACC)
    # constexpr bound: a runtime loop bound fails under the Triton CPU interpreter
    for start in range(0, N_COLS, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < N_COLS, other=0.0)
        part = tl.sum(x.to(tl.float32), axis=0)  # the block: fp32
        acc = (acc.to(tl.float32) + part).to(ACC)  # the total: ACC
    tl.store(y_ptr + row + tl.arange(0, 1), acc.to(y_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    """Triton row sum: tl.sum of each 256-wide block in fp32, block sums added into an accumulator of the
    input's dtype (fp16 for fp16 inputs), the way a kernel declares `acc = tl.zeros(..., dtype=x.dtype)`."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        x2 = x.contiguous().reshape(-1, x.shape[-1])
        y = torch.empty(x2.shape[0], dtype=x.dtype, device=x.device)
        _rowsum_kernel[(x2.shape[0],)](x2, y, x2.stride(0), N_COLS=x2.shape[1], BLOCK=256, ACC=_ACC[x.dtype])
        return y.reshape(x.shape[:-1])
