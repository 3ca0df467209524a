import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Off by one: an exclusive scan (the first element is always 0)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.zeros_like(x)
        out[..., 1:] = torch.cumsum(x[..., :-1], dim=-1)
        return out
