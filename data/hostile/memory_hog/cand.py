# Hostile: allocates 64 MB blocks (touched, so they are resident) until something stops it.
# Bounded at 64 GB of requests so a broken limit still ends (the machine's own OOM killer would act first).
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        hoard = []
        for _ in range(1024):
            hoard.append(bytearray(64 << 20))
        return a
