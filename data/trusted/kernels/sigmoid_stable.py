"""Sigmoid from z = exp(-|x|), which never overflows: 1 / (1 + z) for x >= 0 and z / (1 + z) below."""

import torch
import torch.nn as nn

PROBLEM = "level1/21_Sigmoid.py"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        z = torch.exp(-torch.abs(x))
        return torch.where(x >= 0, 1.0 / (1.0 + z), z / (1.0 + z))
