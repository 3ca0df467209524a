# Hostile: tries to write outside its working directory (relative ../../, absolute /tmp, and ~), then
# returns a correct result and reports which writes succeeded. The suite checks the report against the disk
# and removes whatever it finds.
import os
import tempfile
import uuid

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.attempts = {}

    def forward(self, a, b):
        tag = uuid.uuid4().hex
        targets = {
            "relative": os.path.abspath(os.path.join("..", "..", f"lethe-escape-{tag}")),
            "absolute_tmp": f"/tmp/lethe-escape-{tag}",
            "home": os.path.join(os.path.expanduser("~"), f"lethe-escape-{tag}"),
            "tempfile": os.path.join(tempfile.gettempdir(), f"lethe-escape-{tag}"),
        }
        for key, path in targets.items():
            try:
                with open(path, "w") as fh:
                    fh.write("escaped\n")
                self.attempts[key] = {"path": path, "written": True}
            except OSError as exc:
                self.attempts[key] = {"path": path, "written": False, "error": str(exc)}
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return {"attempts": self.attempts, "cwd": os.getcwd()}
