# Hostile: tries to open TCP connections: to a port on 127.0.0.1 where the test listens (LETHE_TEST_PORT) and
# to a public address; returns a correct result and reports which connections were made.
import os
import socket

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.attempts = {}

    def forward(self, a, b):
        port = int(os.environ.get("LETHE_TEST_PORT", "9"))
        for key, addr in (("loopback", ("127.0.0.1", port)), ("public", ("1.1.1.1", 53))):
            try:
                with socket.create_connection(addr, timeout=1.0):
                    self.attempts[key] = {"connected": True}
            except OSError as exc:
                self.attempts[key] = {"connected": False, "error": type(exc).__name__}
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return {"attempts": self.attempts}
