# Hostile: leaves mid-run with os._exit(0), skipping every handler, with a "success" exit code.
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        os._exit(0)
