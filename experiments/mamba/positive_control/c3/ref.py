import torch
import torch.nn as nn
import torch.nn.functional as F

batch, seq_len, rank, nheads, headdim, n_state = 2, 16, 2, 4, 4, 8


def mimo(x, dt, alpha, B, C, wx, wo):
    b, L, H, P = x.shape
    h = x.new_zeros(b, H, B.shape[-1], P)
    ys = []
    for t in range(L):
        a = torch.exp(dt[:, t] * alpha)[..., None, None]
        h = a * h + dt[:, t, :, None, None] * torch.einsum("bhrn,bhrp->bhnp", B[:, t], wx * x[:, t, :, None, :])
        ys.append((wo * torch.einsum("bhrn,bhnp->bhrp", C[:, t], h)).sum(-2))
    return torch.stack(ys, 1)


class Model(nn.Module):
    """The Mamba-3 MIMO (rank R) scan's input gradients for the incoming gradient dy, by autograd through the
    loop: X_t = mimo_x * x_t, h_t = exp(dt_t alpha) h_{t-1} + dt_t B_t^T X_t, y_t = sum_r mimo_o (C_t h_t).
    alpha = -exp(alpha_log) and the MIMO weights are parameters; dt = softplus(dt_raw)."""

    def __init__(self, rank, nheads, headdim):
        super().__init__()
        self.alpha_log = nn.Parameter(torch.log(torch.arange(1, nheads + 1, dtype=torch.float32)))
        self.mimo_x = nn.Parameter(torch.randn(nheads, rank, headdim))
        self.mimo_o = nn.Parameter(torch.randn(nheads, rank, headdim))

    def forward(self, x, dt_raw, B, C, dy):
        with torch.enable_grad():
            ins = (x, F.softplus(dt_raw), -torch.exp(self.alpha_log), B, C, self.mimo_x, self.mimo_o)
            leaves = [t.detach().requires_grad_(True) for t in ins]
            return torch.autograd.grad(mimo(*leaves), leaves, dy)


def get_inputs():
    s = (batch, seq_len, nheads)
    return [torch.randn(*s, headdim), torch.randn(*s), torch.randn(*s, rank, n_state), torch.randn(*s, rank, n_state),
            torch.randn(*s, headdim)]


def get_init_inputs():
    # the sizes the parameters take, passed to Model and ModelNew alike, so a shape variant reaches both
    return [rank, nheads, headdim]
