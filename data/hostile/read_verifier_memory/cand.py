# Hostile: tries to read the memory of every ancestor process (the zygote, the verifier) through
# /proc/<pid>/mem at an address from its /proc/<pid>/maps, then returns a correct result and reports what it
# could read. Read-only: it never writes to another process.
import os

import torch
import torch.nn as nn


def _ancestors():
    out, pid = [], os.getppid()
    while pid > 1 and len(out) < 4:
        out.append(pid)
        try:
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return out


def _leaked():
    # Pids of the verifier (and its zygotes) as the parent's namespace numbers them, handed over by the test the
    # way a leak would: inside a pid namespace of the run's own the walk up /proc finds none of them.
    return [int(p) for p in os.environ.get("LETHE_TEST_VERIFIER_PIDS", "").split()]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.attempts = {}

    def forward(self, a, b):
        for pid in dict.fromkeys(_ancestors() + _leaked()):
            try:
                with open(f"/proc/{pid}/maps") as fh:
                    first = next(line for line in fh if " r" in line[17:40] or "rw" in line)
                start = int(first.split("-")[0], 16)
                with open(f"/proc/{pid}/mem", "rb") as mem:
                    mem.seek(start)
                    data = mem.read(64)
                self.attempts[str(pid)] = {"read": len(data) > 0}
            except (OSError, StopIteration, ValueError) as exc:
                self.attempts[str(pid)] = {"read": False, "error": f"{type(exc).__name__}: {exc}"}
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return {"attempts": self.attempts}
