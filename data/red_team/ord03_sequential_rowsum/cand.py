import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Row sum with one running total walked left to right and kept in fp16 between steps (fp32 in and out).

    Any fp32 order is within ORD-03's bound (a vendor GEMM's K-loop is one fp32 running total), so what makes
    this kernel wrong is the width of its total: once a large term sits in it, every small term added after it
    is below half an fp16 ulp and rounds away. Close enough on short rows of moderate values.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x):
        xf = x.float()
        acc = torch.zeros(xf.shape[:-1], dtype=torch.float16, device=x.device)
        for j in range(xf.shape[-1]):
            acc = (acc.float() + xf[..., j]).half()
        return acc.to(x.dtype)
