# Hostile: writes 400 MB to stdout and stderr straight to the file descriptors.
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        block = b"x" * (1 << 20)
        for i in range(400):
            os.write(1 if i % 2 else 2, block)
        return torch.relu(a) * b + 1.0
