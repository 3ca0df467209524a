"""Max over a dimension as a tree of elementwise maxima (torch.maximum propagates NaN, like torch.max)."""

import torch
import torch.nn as nn

PROBLEM = "level1/49_Max_reduction_over_a_dimension.py"


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        v = torch.movedim(x, self.dim, -1)
        while v.shape[-1] > 1:
            if v.shape[-1] % 2:
                # Repeating the last element pads without changing the maximum.
                v = torch.cat([v, v[..., -1:]], dim=-1)
            v = torch.maximum(v[..., 0::2], v[..., 1::2])
        return v[..., 0]
