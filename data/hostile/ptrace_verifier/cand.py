# Hostile: tries to attach to its parent and grandparent with ptrace (PTRACE_SEIZE, which does not stop the
# tracee), detaching at once if it got in; returns a correct result and reports which attaches succeeded.
import ctypes
import os

import torch
import torch.nn as nn

PTRACE_DETACH, PTRACE_SEIZE = 17, 0x4206


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
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        parent = os.getppid()
        for pid in dict.fromkeys([parent, _parent_of(parent) if parent > 1 else 0] + _leaked()):
            if pid <= 1:
                continue
            rc = libc.ptrace(PTRACE_SEIZE, pid, None, None)
            if rc == 0:
                libc.ptrace(PTRACE_DETACH, pid, None, None)
                self.attempts[str(pid)] = {"attached": True}
            else:
                self.attempts[str(pid)] = {"attached": False, "error": os.strerror(ctypes.get_errno())}
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return {"attempts": self.attempts}
