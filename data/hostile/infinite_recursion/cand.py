# Hostile: unbounded Python recursion in forward.
import torch.nn as nn


def _down(n):
    return _down(n + 1) + 1


class ModelNew(nn.Module):
    def forward(self, a, b):
        return _down(0)
