import torch
import torch.nn as nn
import torch.nn.functional as F
from lethe.kernels.mamba import fused_block_backward


class ModelNew(nn.Module):
    """C6: the fused block backward (Triton; the CPU interpreter without a GPU).

    delta = softplus(delta_raw) and A = -exp(A_log) are formed in float64: at the RMSNorm's scale invariance (the
    small probe: delta within 1e-6 of log 2 in every channel) dB depends on how delta varies across channels, which
    a float32 softplus rounds by several per cent. The op then runs in float64 anyway (exact_norm), so the
    wider parameters cost nothing there; the gradients come back in the probe's dtype."""

    def __init__(self, d_model, n_state, conv_k):
        super().__init__()
        self.conv_weight = nn.Parameter(torch.zeros(d_model, conv_k))
        self.conv_bias = nn.Parameter(torch.zeros(d_model))
        self.A_log = nn.Parameter(torch.zeros(d_model, n_state))
        self.D = nn.Parameter(torch.zeros(d_model))
        self.norm_weight = nn.Parameter(torch.zeros(d_model))

    def forward(self, x, delta_raw, B, C, dout):
        p = [t.detach() for t in (self.conv_weight, self.conv_bias, self.D, self.norm_weight)]
        delta = F.softplus(delta_raw.double())
        A = -torch.exp(self.A_log.detach().double())
        grads = fused_block_backward(x, p[0], p[1], delta, A, B, C, p[2], p[3], dout, chunk=16, backend="auto")
        return tuple(g.to(x.dtype) for g in grads)
