# Hostile: returns a wrong answer (zeros) and patches everything a naive checker might trust in its own
# process: torch.allclose/torch.equal, numpy.allclose, builtins.print/isinstance, and lethe's own sandbox and
# verifier modules. The suite checks the parent still sees the wrong values.
import builtins
import sys

import numpy
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        torch.allclose = lambda *args, **kw: True
        torch.equal = lambda *args, **kw: True
        numpy.allclose = lambda *args, **kw: True
        builtins.print = lambda *args, **kw: None
        for name, mod in list(sys.modules.items()):
            if name.startswith("lethe") and mod is not None:
                for attr in ("run_isolated", "verify", "check", "compare"):
                    if hasattr(mod, attr):
                        setattr(mod, attr, lambda *args, **kw: {"status": "ok", "verdict": "pass"})
        return torch.zeros_like(a)
