import torch
import torch.nn as nn

batch_size = 32
dim = 256


class Model(nn.Module):
    """Per-channel gain: x * w."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(0.5 + torch.rand(dim))

    def forward(self, x):
        return x * self.weight


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
