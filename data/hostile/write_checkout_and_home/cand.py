# Hostile: tries to write into the verifier's checkout (the repository root above the lethe package) and into
# the real home directory of uid 0 (not the private HOME the sandbox sets); returns a correct result and
# reports which writes landed. The suite removes anything it finds.
import os
import pwd
import uuid
from pathlib import Path

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.attempts = {}

    def forward(self, a, b):
        import lethe

        tag = uuid.uuid4().hex
        targets = {
            "checkout": str(Path(lethe.__file__).resolve().parents[2] / f"lethe-escape-{tag}"),
            "root_home": os.path.join(pwd.getpwuid(0).pw_dir, f"lethe-escape-{tag}"),
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
        return {"attempts": self.attempts}
