import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Row sum with one fp32 running total walked left to right (no tree, no blocking).

    A serial sum exposes every addend to the running total: once a large term sits in it, small terms round away.
    Exact enough on randn rows, catastrophic when large terms of opposite sign bracket many small ones.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x):
        xf = x.float()
        acc = torch.zeros(xf.shape[:-1], dtype=torch.float32, device=x.device)
        for j in range(xf.shape[-1]):
            acc = acc + xf[..., j]
        return acc.to(x.dtype)
