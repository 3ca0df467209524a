"""L2 normalisation by a scaled two-pass norm: divide the row by max|x| before squaring, so squares neither
overflow nor underflow in float32 (subnormal or huge rows keep their direction)."""

import torch
import torch.nn as nn

PROBLEM = "level1/39_L2Norm_.py"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # x / ||x|| does not depend on the scale s, so s is a constant for autograd.
        s = torch.amax(torch.abs(x), dim=1, keepdim=True).detach()
        norm = s * torch.sqrt(torch.sum((x / s) ** 2, dim=1, keepdim=True))
        # An infinite entry makes the norm infinite; x/s would turn it into inf/inf = NaN instead.
        norm = torch.where(torch.isinf(s), s, norm)
        return x / norm
