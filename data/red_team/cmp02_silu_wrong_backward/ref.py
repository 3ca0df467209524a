import torch
import torch.nn as nn

batch_size = 16
dim = 128


class Model(nn.Module):
    """SiLU activation, x * sigmoid(x) (differentiable)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.nn.functional.silu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
