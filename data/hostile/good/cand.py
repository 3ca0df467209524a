# Control: a correct candidate. Run before, between and after the hostile ones to show other rows stay intact.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a) * b + 1.0
