import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Outer-product GEMM (one rank-1 update per k) whose accumulator tile has the operands' dtype.

    This is `acc = zeros((BM, BN), dtype=a.dtype)` in a hand-written kernel: exact enough in fp32, but fed fp16
    the accumulator is fp16, and once it reaches 2048 an addend of ~1 is below half an ulp and is lost.
    """

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        acc = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
        for k in range(a.shape[1]):
            acc = acc + a[:, k:k + 1] * b[k:k + 1, :]
        return acc
