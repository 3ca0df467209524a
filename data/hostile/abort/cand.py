# Hostile: C-level abort() (SIGABRT), as a failed assertion inside a native extension would do.
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        os.abort()
