import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """ReLU as a select: where(x > 0, 2x, 0). NaN > 0 is false, so NaN comes out as 0."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.where(x > 0, x * 2.0, torch.zeros_like(x))
