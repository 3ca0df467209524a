"""Linear layer, GroupNorm with a two-pass variance (mean first, then the mean of squared deviations),
leaky ReLU and the doubling x + x, fused by hand."""

import torch
import torch.nn as nn

PROBLEM = "level2/62_Matmul_GroupNorm_LeakyReLU_Sum.py"


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, num_groups, eps=1e-5, negative_slope=0.01):
        super().__init__()
        self.fc = nn.Linear(input_size, hidden_size)
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=hidden_size, eps=eps)
        self.negative_slope = negative_slope

    def forward(self, x):
        acc = torch.promote_types(x.dtype, torch.float32)
        # Half-precision inputs are reduced in float32 (the contract's accumulator) and rounded once at the end.
        y = x.to(acc) @ self.fc.weight.to(acc).t() + self.fc.bias.to(acc)
        b, c = y.shape
        g = y.reshape(b, self.gn.num_groups, -1)
        mean = g.mean(dim=-1, keepdim=True)
        dev = g - mean
        var = (dev * dev).mean(dim=-1, keepdim=True)
        z = (dev * torch.rsqrt(var + self.gn.eps)).reshape(b, c) * self.gn.weight.to(acc) + self.gn.bias.to(acc)
        z = torch.where(z > 0, z, z * self.negative_slope)
        return (2.0 * z).to(x.dtype)
