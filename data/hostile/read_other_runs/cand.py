# Hostile: looks for other sandbox runs' private directories under the system temporary directory
# (/tmp/lethe-sbx-*) and tries to read the files in them (their inputs and outputs); returns a correct result
# and reports how many foreign files it could read.
import glob
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = 0
        self.read = 0

    def forward(self, a, b):
        mine = os.path.dirname(os.getcwd())
        for d in glob.glob("/tmp/lethe-sbx-*"):
            if d == mine:
                continue
            self.seen += 1
            for dirpath, _, files in os.walk(d):
                for name in files:
                    try:
                        with open(os.path.join(dirpath, name), "rb") as fh:
                            fh.read(16)
                        self.read += 1
                    except OSError:
                        pass
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return {"seen": self.seen, "read": self.read}
