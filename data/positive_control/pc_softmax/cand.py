import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Three-pass row softmax (max, exp-sum, normalise), computed in fp32 whatever the input dtype.

    Subtracting the row max keeps exp() in range; fp32 arithmetic keeps fp16/bf16 inputs accurate; the result
    is cast back to the input dtype. Non-finite inputs follow IEEE arithmetic exactly as torch.softmax does.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x):
        xf = x.float()
        m = xf.amax(dim=-1, keepdim=True)
        e = torch.exp(xf - m)
        return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
