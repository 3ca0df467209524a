# Hostile: tries to read the environment block, the open files and the working directory of every ancestor
# process (/proc/<pid>/environ, fd/, cwd/) -- where secrets of the verifier's environment would be -- then
# returns a correct result and reports what it saw.
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
            got = {}
            for what, fn in (("environ", lambda p: open(f"/proc/{p}/environ", "rb").read()),
                             ("fds", lambda p: os.listdir(f"/proc/{p}/fd")),
                             ("cwd", lambda p: os.listdir(f"/proc/{p}/cwd"))):
                try:
                    got[what] = len(fn(pid)) > 0
                except OSError as exc:
                    got[what] = False
                    got[what + "_error"] = type(exc).__name__
            self.attempts[str(pid)] = got
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return {"attempts": self.attempts}
