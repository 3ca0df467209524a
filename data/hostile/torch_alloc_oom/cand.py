# Hostile: asks torch for one 64 GB tensor; the C++ allocator fails (RuntimeError), not Python's.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        big = torch.empty(16 << 30, dtype=torch.float32)
        big.fill_(1.0)
        return a
