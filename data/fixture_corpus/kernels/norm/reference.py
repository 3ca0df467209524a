import torch
import torch.nn as nn

ROWS, HIDDEN = 8, 64


class Model(nn.Module):
    """Layer normalisation over the last dimension with learned scale and shift."""

    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(ROWS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]
