import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Row sum from 16 partial sums combined in an order drawn from os.urandom.

    This is what atomicAdd-based split reductions do on a GPU: the partials arrive in whatever order the
    blocks finish, so the last bits change from run to run.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x):
        xf = x.float()
        n = xf.shape[-1]
        chunks = 16
        bounds = [n * i // chunks for i in range(chunks + 1)]
        partials = [xf[..., bounds[i]:bounds[i + 1]].sum(dim=-1) for i in range(chunks)]
        order = sorted(range(chunks), key=lambda _: os.urandom(4))
        acc = torch.zeros_like(partials[0])
        for i in order:
            acc = acc + partials[i]
        return acc.to(x.dtype)
