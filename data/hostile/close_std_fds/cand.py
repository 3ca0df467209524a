# Hostile: closes its stdout and stderr file descriptors, then returns a correct result. The result must
# still arrive (it does not travel over stdout).
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        os.close(1)
        os.close(2)
        return torch.relu(a) * b + 1.0
