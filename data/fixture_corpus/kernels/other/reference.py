import torch
import torch.nn as nn

ROWS, COLS = 8, 16


class Model(nn.Module):
    """Materialised transpose (a pure data-movement task)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.transpose(0, 1).contiguous()


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
