"""Average pooling 1-D via zero padding, unfold into windows and a window mean (padding counted, as
AvgPool1d's default count_include_pad=True)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

PROBLEM = "level1/44_Average_Pooling_1D.py"


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int = 1, padding: int = 0):
        super().__init__()
        self.k = kernel_size
        self.s = stride
        self.p = padding

    def forward(self, x):
        xp = F.pad(x, (self.p, self.p))
        return xp.unfold(-1, self.k, self.s).sum(dim=-1) / self.k
