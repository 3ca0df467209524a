import torch
import torch.nn as nn

BATCH, C_IN, C_OUT, LENGTH, K = 2, 4, 8, 32, 3


class Model(nn.Module):
    """1-D convolution, stride 1, no padding."""

    def __init__(self, c_in, c_out, k):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, k)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, C_IN, LENGTH)]


def get_init_inputs():
    return [C_IN, C_OUT, K]
