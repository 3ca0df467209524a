import torch
import torch.nn as nn

BLOCK = 1024


class ModelNew(nn.Module):
    """Row sum in blocks: each block summed in fp32, the block sums added into a total kept in the input dtype.

    In fp32 that is an ordinary blocked fp32 reduction. Fed fp16, every block sum is exact but the running total
    is fp16: once it holds a large value, a block sum below half its ulp is rounded away, however precisely the
    block itself was summed.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x):
        n = x.shape[-1]
        acc = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)  # the total: input dtype
        for start in range(0, n, BLOCK):
            part = x[..., start:start + BLOCK].float().sum(dim=-1)  # the block: fp32
            acc = (acc.float() + part).to(x.dtype)
        return acc
