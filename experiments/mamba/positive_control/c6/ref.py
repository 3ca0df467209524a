import torch
import torch.nn as nn
import torch.nn.functional as F

batch, l_out, d_model, n_state, conv_k = 2, 64, 32, 16, 4


def block(x, w, bias, delta, A, B, C, D, nw, eps=1e-6):
    p = F.conv1d(x.transpose(1, 2), w[:, None, :], bias, groups=w.shape[0]).transpose(1, 2)
    v = F.silu(p)
    b, L, d = v.shape
    h = v.new_zeros(b, d, A.shape[1])
    ys = []
    for t in range(L):
        h = torch.exp(delta[:, t, :, None] * A) * h + (delta[:, t] * v[:, t])[:, :, None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1) + D * v[:, t])
    y = torch.stack(ys, 1)
    return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps) * nw


class Model(nn.Module):
    """The fused Mamba block's input gradients (x, conv weight and bias, delta, A, B, C, D, norm weight) for the
    incoming gradient dout, by autograd through the block: causal depthwise conv1d, SiLU, the selective scan,
    RMSNorm; the conv weight and bias, A = -exp(A_log), D and the norm weight are parameters."""

    def __init__(self, d_model, n_state, conv_k):
        super().__init__()
        self.conv_weight = nn.Parameter(torch.randn(d_model, conv_k) * 0.5)
        self.conv_bias = nn.Parameter(torch.randn(d_model) * 0.1)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n_state + 1, dtype=torch.float32)).repeat(d_model, 1))
        self.D = nn.Parameter(torch.ones(d_model))
        self.norm_weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x, delta_raw, B, C, dout):
        with torch.enable_grad():
            ins = (x, self.conv_weight, self.conv_bias, F.softplus(delta_raw), -torch.exp(self.A_log), B, C, self.D,
                   self.norm_weight)
            leaves = [t.detach().requires_grad_(True) for t in ins]
            return torch.autograd.grad(block(*leaves), leaves, dout)


def get_inputs():
    return [torch.randn(batch, l_out + conv_k - 1, d_model), torch.randn(batch, l_out, d_model),
            torch.randn(batch, l_out, n_state), torch.randn(batch, l_out, n_state), torch.randn(batch, l_out, d_model)]


def get_init_inputs():
    # the sizes the parameters take, passed to Model and ModelNew alike, so a shape variant reaches both
    return [d_model, n_state, conv_k]
