# Hostile: sends SIGKILL to its parent and grandparent (in spawn mode the verifier itself; in zygote mode the
# zygote and the verifier), then returns a correct result and reports which signals were delivered.
# Without operating-system isolation this kills the verifier: no row at all.
import os
import signal

import torch
import torch.nn as nn


def _parent_of(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def _leaked():
    # Pids of the verifier (and its zygotes) as the parent's namespace numbers them, handed over by the test the
    # way a leak would: inside a pid namespace of the run's own the walk up /proc finds none of them.
    return [int(p) for p in os.environ.get("LETHE_TEST_VERIFIER_PIDS", "").split()]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.attempts = {}

    def forward(self, a, b):
        parent = os.getppid()
        targets = [parent, _parent_of(parent) if parent > 1 else 0]
        for pid in dict.fromkeys(targets + _leaked()):
            if pid <= 1:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                self.attempts[str(pid)] = {"delivered": True}
            except OSError as exc:
                self.attempts[str(pid)] = {"delivered": False, "error": type(exc).__name__}
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return {"attempts": self.attempts}
