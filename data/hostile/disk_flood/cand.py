# Hostile, bounded: fills its run directory (the only disk it may write) with 16 MiB files, each under the
# per-file cap, up to 2 GiB in all, then returns a correct result. Unchecked, a kernel like this fills the disk
# that the verifier's later references and result files are written to.
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        chunk = os.urandom(1 << 20) * 16  # incompressible, in case the file system compresses
        for i in range(128):
            with open(f"flood-{i:03d}.bin", "wb") as fh:
                fh.write(chunk)
                fh.flush()
                os.fsync(fh.fileno())
        return torch.relu(a) * b + 1.0
