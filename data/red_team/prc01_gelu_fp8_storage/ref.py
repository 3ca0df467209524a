import torch
import torch.nn as nn

batch_size = 32
dim = 256


class Model(nn.Module):
    """GELU (erf form)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.nn.functional.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
