"""Linear layer as a broadcast multiply and a row sum (no BLAS call), the exact erf GELU, then a max-shifted
softmax over the features."""

import math

import torch
import torch.nn as nn

PROBLEM = "level2/99_Matmul_GELU_Softmax.py"


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        acc = torch.promote_types(x.dtype, torch.float32)
        # Half-precision inputs are reduced in float32 (the contract's accumulator) and rounded once at the end.
        w, b = self.linear.weight.to(acc), self.linear.bias.to(acc)
        y = (x.to(acc).unsqueeze(1) * w.unsqueeze(0)).sum(dim=-1) + b
        y = 0.5 * y * (1.0 + torch.erf(y / math.sqrt(2.0)))
        m = torch.amax(y, dim=1, keepdim=True).detach()
        e = torch.exp(y - m)
        return (e / e.sum(dim=1, keepdim=True)).to(x.dtype)
