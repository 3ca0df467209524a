"""Row softmax written out: subtract the row maximum, exponentiate, divide by the row sum."""

import torch
import torch.nn as nn

PROBLEM = "level1/23_Softmax.py"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # Softmax is invariant to a per-row shift, so the maximum is a constant for autograd: detaching it keeps
        # the backward exactly the softmax Jacobian instead of adding terms that cancel only in exact arithmetic.
        m = torch.amax(x, dim=1, keepdim=True).detach()
        e = torch.exp(x - m)
        return e / torch.sum(e, dim=1, keepdim=True)
