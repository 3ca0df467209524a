# Hostile: sends SIGSTOP to its parent and grandparent (the verifier, or the zygote and the verifier), then
# returns a correct result and reports which signals were delivered. Without operating-system isolation the
# verifier stops for good: a hang that no timeout inside it can end.
import os
import signal

import torch
import torch.nn as nn


def _parent_of(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.attempts = {}

    def forward(self, a, b):
        parent = os.getppid()
        for pid in (parent, _parent_of(parent)):
            if pid <= 1:
                continue
            try:
                os.kill(pid, signal.SIGSTOP)
                self.attempts[str(pid)] = {"delivered": True}
            except OSError as exc:
                self.attempts[str(pid)] = {"delivered": False, "error": type(exc).__name__}
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return {"attempts": self.attempts}
