import torch
import torch.nn as nn

batch_size = 4
seq_len = 256
hidden = 32


class Model(nn.Module):
    """Mean pooling over the sequence axis: (B, L, D) -> (B, D)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean(dim=1)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []
