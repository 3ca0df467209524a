# Hostile, bounded: forks 150 children that just sleep 60 s (every 10th also calls setsid to leave the
# process group), then returns a correct result. The suite asserts every child is dead afterwards.
# Bounded by design: if containment failed, 150 sleeping processes exit on their own after 60 s.
import os
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.pids = []

    def forward(self, a, b):
        for i in range(150):
            pid = os.fork()
            if pid == 0:
                try:
                    if i % 10 == 0:
                        os.setsid()
                    time.sleep(60)
                finally:
                    os._exit(0)
            self.pids.append(pid)
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return {"pids": self.pids, "pidns": os.readlink("/proc/self/ns/pid"), "uid": os.getuid()}
