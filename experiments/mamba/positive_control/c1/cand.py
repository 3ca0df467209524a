import torch
import torch.nn as nn
import torch.nn.functional as F
from lethe.kernels.mamba import selective_scan


class ModelNew(nn.Module):
    """C1: the chunked selective-scan forward (Triton; the CPU interpreter without a GPU), differentiable through
    C2 (selective_scan), so a gradient probe reaches the hand-written backward too."""

    def __init__(self, d_model, n_state):
        super().__init__()
        self.A_log = nn.Parameter(torch.zeros(d_model, n_state))
        self.D = nn.Parameter(torch.zeros(d_model))

    def forward(self, u, delta_raw, B, C):
        return selective_scan(u, F.softplus(delta_raw), -torch.exp(self.A_log), B, C, self.D, chunk=16, backend="auto")
