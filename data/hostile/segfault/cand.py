# Hostile: dereferences NULL from C (ctypes.string_at(0)) -> SIGSEGV.
import ctypes

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        ctypes.string_at(0)
        return a
