"""Mean squared error with the sum of squared differences taken as a pairwise tree over all elements."""

import torch
import torch.nn as nn

PROBLEM = "level1/94_MSELoss.py"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        acc = torch.promote_types(predictions.dtype, torch.float32)
        # Half-precision inputs are reduced in float32 (the contract's accumulator) and rounded once at the end.
        d = (predictions.to(acc) - targets.to(acc)).reshape(-1)
        v = d * d
        n = v.numel()
        while v.numel() > 1:
            if v.numel() % 2:
                v = torch.cat([v, v.new_zeros(1)])
            v = v[0::2] + v[1::2]
        return (v.reshape(()) / n).to(predictions.dtype)
