# Hostile: reports its uid and capabilities and tries to become root again (setuid(0), then setresuid), then
# returns a correct result with what it found.
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.report = {}

    def forward(self, a, b):
        self.report["uid_before"] = os.getuid()
        with open("/proc/self/status") as fh:
            self.report["cap_eff"] = next(line.split()[1] for line in fh if line.startswith("CapEff:"))
        for name, fn in (("setuid0", lambda: os.setuid(0)), ("setresuid0", lambda: os.setresuid(0, 0, 0))):
            try:
                fn()
                self.report[name] = True
            except OSError:
                self.report[name] = False
        self.report["uid_after"] = os.getuid()
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return self.report
