# Hostile: blocks in a sleep far longer than any timeout (a hang the CPU monitor cannot see as busy).
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        time.sleep(3600)
        return a
