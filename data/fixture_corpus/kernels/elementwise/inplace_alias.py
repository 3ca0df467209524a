import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Works in place on the input to save an allocation, and returns the input tensor itself."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        x.relu_()
        x.mul_(0.5)
        return x
