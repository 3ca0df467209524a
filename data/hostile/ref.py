"""Shared reference for the hostile-kernel suite: a tiny elementwise model every candidate claims to implement."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a) * b + 1.0


def get_inputs():
    return [torch.randn(32, 48), torch.randn(32, 48)]


def get_init_inputs():
    return []
