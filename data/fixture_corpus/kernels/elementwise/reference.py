import torch
import torch.nn as nn

ROWS, COLS = 8, 64


class Model(nn.Module):
    """ReLU followed by a fixed scale."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 0.5


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
