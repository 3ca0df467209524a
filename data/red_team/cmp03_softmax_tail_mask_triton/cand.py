import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_rows_kernel(x_ptr, y_ptr, n_rows, n_cols, stride, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    ptrs = rows[:, None] * stride + cols[None, :]
    # Padding lanes read 0.0 instead of -inf, and the sum below does not mask them out.
    x = tl.load(x_ptr + ptrs, mask=mask, other=0.0)
    m = tl.max(x, axis=1)
    e = tl.exp(x - m[:, None])
    s = tl.sum(e, axis=1)
    tl.store(y_ptr + ptrs, e / s[:, None], mask=mask)


class ModelNew(nn.Module):
    """Row-blocked Triton softmax with a tail-mask bug (exact when the width is a power of two)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        xf = x.float().contiguous()
        n_cols = xf.shape[-1]
        x2 = xf.reshape(-1, n_cols)
        y = torch.empty_like(x2)
        n_rows = x2.shape[0]
        BLOCK = triton.next_power_of_2(n_cols)
        ROWS = max(1, 4096 // BLOCK)  # several short rows per program, one long row per program
        _softmax_rows_kernel[(triton.cdiv(n_rows, ROWS),)](x2, y, n_rows, n_cols, x2.stride(0),
                                                          ROWS=ROWS, BLOCK=BLOCK, num_warps=8)
        return y.reshape(xf.shape).to(x.dtype)
