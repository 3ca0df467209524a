import torch
import torch.nn as nn

batch_size = 16
dim = 128
eps = 1e-6


class Model(nn.Module):
    """RMS norm with a learnable gain: x / sqrt(mean(x^2) + eps) * w."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x):
        rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
        return x * rstd * self.weight


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
