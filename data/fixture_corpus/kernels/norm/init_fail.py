import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden):
        self.ln = nn.LayerNorm(hidden, eps=1e-5)  # forgot super().__init__()
        super().__init__()

    def forward(self, x):
        return self.ln(x)
