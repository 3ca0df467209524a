import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 1
seq_len = 48
heads = 2
dk = 16
dv = 16


class Model(nn.Module):
    """Gated delta rule with per-channel decay, erase and write gates, one time step at a time.

    Raw inputs are mapped to valid gates inside the model (unit-norm keys, log-decay logsigmoid(g) <= 0,
    erase sigmoid(b), write sigmoid(w)), so every input the verifier draws is a legal problem. Then
        S_t = (I - k_t (b_t * k_t)^T) diag(exp(g_t)) S_{t-1} + k_t (w_t * v_t)^T,   o_t = S_t^T (q_t / sqrt(dk)).
    """

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v, g, b, w):
        k = F.normalize(k, dim=-1)
        g = F.logsigmoid(g)
        b = torch.sigmoid(b)
        w = torch.sigmoid(w)
        B, T, H, K = q.shape
        S = q.new_zeros(B, H, K, v.shape[-1])
        out = []
        for t in range(T):
            kt = k[:, t]
            S = torch.exp(g[:, t]).unsqueeze(-1) * S
            S = S - kt.unsqueeze(-1) * torch.einsum("bhk,bhkv->bhv", b[:, t] * kt, S).unsqueeze(-2)
            S = S + kt.unsqueeze(-1) * (w[:, t] * v[:, t]).unsqueeze(-2)
            out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t] * K ** -0.5))
        return torch.stack(out, dim=1)


def get_inputs():
    qk = (batch_size, seq_len, heads, dk)
    vv = (batch_size, seq_len, heads, dv)
    return [torch.randn(qk), torch.randn(qk), torch.randn(vv), torch.randn(qk), torch.randn(qk), torch.randn(vv)]


def get_init_inputs():
    return []
