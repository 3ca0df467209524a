import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        # fold the scale into q first: one fewer pass over the L x L scores
        q = q * (1.0 / math.sqrt(q.shape[-1]))
        attn = torch.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=-1)
        return torch.matmul(attn, v)
