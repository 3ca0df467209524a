"""Smooth-L1 (Huber, beta = 1) written as the two branches 0.5 d^2 and |d| - 0.5, then a mean."""

import torch
import torch.nn as nn

PROBLEM = "level1/96_HuberLoss.py"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        d = predictions - targets
        a = torch.abs(d)
        # A NaN difference fails the comparison and takes the linear branch, which keeps it NaN.
        per = torch.where(a < 1.0, 0.5 * d * d, a - 0.5)
        return torch.mean(per)
