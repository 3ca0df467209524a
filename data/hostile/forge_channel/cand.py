# Hostile: tries to forge the sandbox's result message by writing a fake "done" line (a guessed nonce) to
# every open file descriptor, then returns a wrong answer. Without the per-run nonce the forgery must be
# ignored; the wrong answer must come through as it is.
import json
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        fake = {"ev": "done", "nonce": "0" * 32, "status": "ok", "detail": "", "seconds": 0.0,
                "result": json.dumps({"forged": True})}
        line = (json.dumps(fake) + "\n").encode()
        for fd in range(3, 256):
            try:
                os.write(fd, line)
            except OSError:
                pass
        return torch.full_like(a, 7.0)
