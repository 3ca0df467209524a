"""Linear layer as a sum of K-blocked partial matmuls (blocks of 256 along the reduction, added pairwise),
fused with the scale and the leaky ReLU."""

import torch
import torch.nn as nn

PROBLEM = "level2/12_Gemm_Multiply_LeakyReLU.py"
K_BLOCK = 256


def kblocked_linear(x, weight, bias):
    k = x.shape[-1]
    parts = [x[..., k0:k0 + K_BLOCK] @ weight[:, k0:k0 + K_BLOCK].t() for k0 in range(0, k, K_BLOCK)]
    while len(parts) > 1:
        parts = [parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0] + bias


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        # Same module name and shapes as the reference, so the verifier loads the reference's weights.
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x):
        acc = torch.promote_types(x.dtype, torch.float32)
        # Half-precision inputs are reduced in float32 (the contract's accumulator) and rounded once at the end.
        y = kblocked_linear(x.to(acc), self.gemm.weight.to(acc), self.gemm.bias.to(acc)) * self.multiplier
        # y > 0 keeps y; everything else (negatives, -0 and NaN) goes through the slope, which keeps NaN.
        return torch.where(y > 0, y, y * self.negative_slope).to(x.dtype)
