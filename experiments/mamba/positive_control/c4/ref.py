import torch
import torch.nn as nn
import torch.nn.functional as F

batch, seq_len, nheads, headdim, n_state, num_angles = 2, 16, 4, 4, 8, 4


class Model(nn.Module):
    """Mamba-3 rotary (complex-state) scan: h_t = exp(dt_t A) R(theta_t) h_{t-1} + dt_t B_t x_t^T, y_t = h_t^T C_t,
    R rotating state-row pairs (2k, 2k+1) by theta_t[k] for k < num_angles; A = -exp(A_log) per head is a
    parameter, dt = softplus(dt_raw)."""

    def __init__(self, nheads):
        super().__init__()
        self.A_log = nn.Parameter(torch.log(torch.arange(1, nheads + 1, dtype=torch.float32)))

    def forward(self, x, dt_raw, B, C, theta):
        dt, A = F.softplus(dt_raw), -torch.exp(self.A_log)
        b, L, H, P = x.shape
        S = theta.shape[-1]
        h = x.new_zeros(b, H, B.shape[-1], P)
        ys = []
        for t in range(L):
            c, s = torch.cos(theta[:, t])[..., None], torch.sin(theta[:, t])[..., None]
            e, o = h[:, :, 0:2 * S:2], h[:, :, 1:2 * S:2]
            h = torch.cat([torch.stack([c * e - s * o, s * e + c * o], 3).flatten(2, 3), h[:, :, 2 * S:]], 2)
            h = (torch.exp(dt[:, t] * A)[..., None, None] * h
                 + (dt[:, t, :, None, None] * B[:, t, :, :, None]) * x[:, t, :, None, :])
            ys.append((h * C[:, t, :, :, None]).sum(-2))
        return torch.stack(ys, 1)


def get_inputs():
    s = (batch, seq_len, nheads)
    return [torch.randn(*s, headdim), torch.randn(*s), torch.randn(*s, n_state), torch.randn(*s, n_state),
            torch.randn(*s, num_angles)]


def get_init_inputs():
    # the sizes the parameters take, passed to Model and ModelNew alike, so a shape variant reaches both
    return [nheads]
