# Hostile, bounded: writes up to 1 GiB into /dev/shm (memory that no process's RSS shows) in 16 MiB chunks until
# the write is refused, removes its file, then returns a correct result and reports how much it wrote.
import os
import uuid

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.written = 0
        self.error = ""
        self.path = ""

    def forward(self, a, b):
        self.path = f"/dev/shm/lethe-escape-{uuid.uuid4().hex}"
        chunk = b"\0" * (16 << 20)
        try:
            with open(self.path, "wb") as fh:
                while self.written < (1 << 30):
                    fh.write(chunk)
                    fh.flush()
                    self.written += len(chunk)
        except OSError as exc:
            self.error = type(exc).__name__
        finally:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return {"written": self.written, "error": self.error, "path": self.path}
