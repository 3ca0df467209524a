import torch
import torch.nn as nn
import torch.nn.functional as F
from lethe.kernels.mamba import mimo_backward


class ModelNew(nn.Module):
    """C3: the MIMO scan's backward (Triton; the CPU interpreter without a GPU)."""

    def __init__(self, rank, nheads, headdim):
        super().__init__()
        self.alpha_log = nn.Parameter(torch.zeros(nheads))
        self.mimo_x = nn.Parameter(torch.zeros(nheads, rank, headdim))
        self.mimo_o = nn.Parameter(torch.zeros(nheads, rank, headdim))

    def forward(self, x, dt_raw, B, C, dy):
        return mimo_backward(x, F.softplus(dt_raw), -torch.exp(self.alpha_log), B, C, self.mimo_x.detach(),
                             self.mimo_o.detach(), dy, chunk=8, backend="auto")
