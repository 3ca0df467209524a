import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rowsum_kernel(x_ptr, y_ptr, n_rows, stride, N_COLS: tl.constexpr, BLOCK_R: tl.constexpr):
    # Thread-per-row: each lane owns one row and walks its columns with a running total.
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n_rows
    # The accumulator takes the element type: fp16 in, fp16 running total.
    acc = tl.zeros([BLOCK_R], dtype=x_ptr.dtype.element_ty)
    for j in range(N_COLS):
        acc += tl.load(x_ptr + rows * stride + j, mask=rmask, other=0.0)
    tl.store(y_ptr + rows, acc, mask=rmask)


class ModelNew(nn.Module):
    """Triton thread-per-row sum whose running total has the input's dtype."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_cols = x.shape[-1]
        x2 = x.contiguous().reshape(-1, n_cols)
        y = torch.empty(x2.shape[0], dtype=x.dtype, device=x.device)
        BLOCK_R = 64
        _rowsum_kernel[(triton.cdiv(x2.shape[0], BLOCK_R),)](x2, y, x2.shape[0], x2.stride(0),
                                                            N_COLS=n_cols, BLOCK_R=BLOCK_R)
        return y.reshape(x.shape[:-1])
