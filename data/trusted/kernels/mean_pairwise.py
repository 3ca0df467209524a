"""Mean over a dimension as a pairwise (tree) sum divided by the length."""

import torch
import torch.nn as nn

PROBLEM = "level1/48_Mean_reduction_over_a_dimension.py"


def _tree_sum_last(v):
    while v.shape[-1] > 1:
        if v.shape[-1] % 2:
            v = torch.cat([v, torch.zeros_like(v[..., :1])], dim=-1)
        v = v[..., 0::2] + v[..., 1::2]
    return v[..., 0]


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        n = x.shape[self.dim]
        # Half-precision inputs are reduced in float32 (the contract's accumulator) and rounded once at the end.
        acc = torch.promote_types(x.dtype, torch.float32)
        return (_tree_sum_last(torch.movedim(x.to(acc), self.dim, -1)) / n).to(x.dtype)
