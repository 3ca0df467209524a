# Hostile: tries to plant files where later verifier processes would run them: a .pth file in the
# interpreter's site-packages (executed at every interpreter start) and a module in the lethe package folder;
# returns a correct result and reports which writes landed. The suite removes anything it finds.
import os
import sysconfig
import uuid

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
            "site_packages_pth": os.path.join(sysconfig.get_paths()["purelib"], f"lethe-escape-{tag}.pth"),
            "lethe_package": os.path.join(os.path.dirname(lethe.__file__), f"lethe-escape-{tag}.py"),
        }
        for key, path in targets.items():
            try:
                with open(path, "w") as fh:
                    fh.write("# escaped\n")
                self.attempts[key] = {"path": path, "written": True}
            except OSError as exc:
                self.attempts[key] = {"path": path, "written": False, "error": str(exc)}
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return {"attempts": self.attempts}
