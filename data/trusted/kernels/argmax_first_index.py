"""Argmax as the first index holding the maximum (NaN counts as the maximum, as torch.argmax does)."""

import torch
import torch.nn as nn

PROBLEM = "level1/51_Argmax_over_a_dimension.py"


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        v = torch.movedim(x, self.dim, -1)
        m = torch.amax(v, dim=-1, keepdim=True)
        hit = (v == m) | torch.isnan(v)
        n = v.shape[-1]
        idx = torch.arange(n, device=x.device).expand_as(v)
        return torch.where(hit, idx, torch.full_like(idx, n)).amin(dim=-1)
