import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """ReLU computed in place on the caller's input, which it then returns (saves an allocation)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.clamp_(min=0)
