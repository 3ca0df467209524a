# Hostile, bounded: forks sleepers (each exits after 30 s) until fork is refused or 600 exist, then returns a
# correct result and reports how many it made. Contained means the process limit refused it well before 600.
import os
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.made = 0
        self.refused = ""

    def forward(self, a, b):
        for _ in range(600):
            try:
                pid = os.fork()
            except OSError as exc:
                self.refused = type(exc).__name__
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            self.made += 1
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return {"made": self.made, "refused": self.refused}
