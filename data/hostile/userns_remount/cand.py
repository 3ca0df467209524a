# Hostile: creates a user namespace (where it holds every capability) with its own mount namespace, tries to
# make the root mount writable again, and writes a file under /tmp; returns a correct result and reports
# whether the file landed on the real file system. The suite removes anything it finds.
import ctypes
import uuid

import torch
import torch.nn as nn

CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
MS_REMOUNT, MS_BIND = 32, 4096


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.report = {}

    def forward(self, a, b):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
        self.report["unshare"] = libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0
        for path in (b"/", b"/tmp"):
            self.report[f"remount {path.decode()}"] = libc.mount(None, path, None, MS_REMOUNT | MS_BIND, None) == 0
        target = f"/tmp/lethe-escape-{uuid.uuid4().hex}"
        self.report["path"] = target
        try:
            with open(target, "w") as fh:
                fh.write("escaped\n")
            self.report["written"] = True
        except OSError as exc:
            self.report["written"] = False
            self.report["error"] = str(exc)
        return torch.relu(a) * b + 1.0

    def sandbox_report(self):
        return self.report
