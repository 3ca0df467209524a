import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _partial_sum_atomic_kernel(x_ptr, out_ptr, chunk_of_pid_ptr, n_rows, stride,
                               N_COLS: tl.constexpr, CHUNK: tl.constexpr, BLOCK_R: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    chunk = tl.load(chunk_of_pid_ptr + pid_c)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < N_COLS)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0)
    part = tl.sum(x, axis=1)
    tl.atomic_add(out_ptr + rows, part, mask=rows < n_rows)


class ModelNew(nn.Module):
    """Split-K row sum: each program reduces one column chunk and atomically adds it to the output.

    On a GPU the atomics land in scheduling order; the interpreter runs programs in order, so the chunk a
    program handles is shuffled with os.urandom to reproduce that nondeterminism on the CPU.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x):
        xf = x.float().contiguous()
        n_cols = xf.shape[-1]
        x2 = xf.reshape(-1, n_cols)
        n_rows = x2.shape[0]
        out = torch.zeros(n_rows, dtype=torch.float32, device=x.device)
        CHUNK = 256
        BLOCK_R = 32
        n_chunks = triton.cdiv(n_cols, CHUNK)
        perm = sorted(range(n_chunks), key=lambda _: os.urandom(4))
        chunk_of_pid = torch.tensor(perm, dtype=torch.int32, device=x.device)
        grid = (triton.cdiv(n_rows, BLOCK_R), n_chunks)
        _partial_sum_atomic_kernel[grid](x2, out, chunk_of_pid, n_rows, x2.stride(0),
                                         N_COLS=n_cols, CHUNK=CHUNK, BLOCK_R=BLOCK_R)
        return out.reshape(xf.shape[:-1]).to(x.dtype)
