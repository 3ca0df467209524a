"""Inclusive prefix sum as a blocked scan: scan inside blocks of 64, then add the scanned block totals."""

import torch
import torch.nn as nn

PROBLEM = "level1/89_cumsum.py"
BLOCK = 64


def blocked_cumsum_last(v):
    n = v.shape[-1]
    pad = (-n) % BLOCK
    if pad:
        v = torch.cat([v, v.new_zeros(v.shape[:-1] + (pad,))], dim=-1)
    blocks = v.reshape(v.shape[:-1] + (-1, BLOCK))
    inner = torch.cumsum(blocks, dim=-1)
    totals = torch.cumsum(inner[..., -1], dim=-1)
    # The carry into block j is the sum of blocks < j: shift the scanned totals right rather than subtracting
    # each block's own total (a subtraction would cancel).
    carry = torch.cat([torch.zeros_like(totals[..., :1]), totals[..., :-1]], dim=-1)
    out = (inner + carry.unsqueeze(-1)).reshape(v.shape)
    return out[..., :n]


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        # Half-precision inputs are reduced in float32 (the contract's accumulator) and rounded once at the end.
        acc = torch.promote_types(x.dtype, torch.float32)
        out = blocked_cumsum_last(torch.movedim(x.to(acc), self.dim, -1))
        return torch.movedim(out, -1, self.dim).to(x.dtype)
