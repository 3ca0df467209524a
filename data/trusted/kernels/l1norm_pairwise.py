"""L1 normalisation with the row sum of |x| taken as a pairwise (tree) reduction written out in torch."""

import torch
import torch.nn as nn

PROBLEM = "level1/38_L1Norm_.py"


def _tree_sum_last(v):
    # Adjacent pairs are added level by level, so each element passes through log2(n) additions and the
    # rounding error grows with log(n), not with n as in a running total.
    while v.shape[-1] > 1:
        if v.shape[-1] % 2:
            v = torch.cat([v, torch.zeros_like(v[..., :1])], dim=-1)
        v = v[..., 0::2] + v[..., 1::2]
    return v


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # Half-precision inputs are reduced in float32 (the contract's accumulator) and rounded once at the end.
        acc = torch.promote_types(x.dtype, torch.float32)
        return (x.to(acc) / _tree_sum_last(torch.abs(x.to(acc)))).to(x.dtype)
