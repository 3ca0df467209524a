import torch
import torch.nn as nn
import torch.nn.functional as F

from lethe.kernels.gdn.autograd import chunk_family


class ModelNew(nn.Module):
    """The project's chunked (WY / UT-transform) GDN forward with its explicit backward, torch backend.

    Same gate mapping as the reference; the chunk loop runs in fp32 for fp16/bf16/fp32 inputs (the kernel's
    accumulation dtype) and the output is cast back to the input dtype.
    """

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v, g, b, w):
        dt = q.dtype
        q, k, v, g, b, w = (x.float() for x in (q, k, v, g, b, w))
        k = F.normalize(k, dim=-1)
        o, _ = chunk_family(q, k, v, F.logsigmoid(g), torch.sigmoid(b), torch.sigmoid(w), member="gdn",
                            chunk=16, backend="torch")
        return o.to(dt)
