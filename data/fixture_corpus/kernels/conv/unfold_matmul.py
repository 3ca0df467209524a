import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """im2col + GEMM formulation of the same convolution."""

    def __init__(self, c_in, c_out, k):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, k)

    def forward(self, x):
        w = self.conv.weight
        k = w.shape[-1]
        cols = x.unfold(-1, k, 1)  # (B, C_in, L_out, K)
        out = torch.einsum("bclk,ock->bol", cols, w)
        return out + self.conv.bias[None, :, None]
