# Hostile: sends SIGKILL to its own process mid-run.
import os
import signal

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        os.kill(os.getpid(), signal.SIGKILL)
