import math

import torch
import torch.nn as nn

B, H, L, D = 2, 2, 16, 8


class Model(nn.Module):
    """Single-head-group scaled dot-product attention without masking."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=-1) @ v


def get_inputs():
    return [torch.randn(B, H, L, D), torch.randn(B, H, L, D), torch.randn(B, H, L, D)]


def get_init_inputs():
    return []
