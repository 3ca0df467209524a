import torch
import torch.nn as nn

ROWS, COLS = 8, 16


class Model(nn.Module):
    """A reference that cannot run: its matmul operands never have compatible shapes."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.matmul(x, x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
