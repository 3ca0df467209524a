import torch
import torch.nn as nn


class _SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        s = torch.sigmoid(x)
        ctx.save_for_backward(s)
        return x * s

    @staticmethod
    def backward(ctx, grad_out):
        (s,) = ctx.saved_tensors
        # Drops the x * s * (1 - s) term of d/dx[x * sigmoid(x)].
        return grad_out * s


class ModelNew(nn.Module):
    """SiLU with a hand-written backward that forgets half of the product rule."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        xf = x.float()
        return _SiLU.apply(xf).to(x.dtype)
