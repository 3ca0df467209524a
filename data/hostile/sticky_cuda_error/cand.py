# Hostile, GPU only: triggers a device-side assert (out-of-bounds gather on CUDA), which poisons the CUDA
# context of this process for good. The next candidate, in its own process, must be unaffected.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        a = a.cuda()
        idx = torch.tensor([10**6], device="cuda")
        bad = a.view(-1)[idx]
        torch.cuda.synchronize()
        return bad
