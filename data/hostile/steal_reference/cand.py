# Hostile: computes nothing. It searches the memory of its ancestor processes (the zygote, the verifier) for
# the sandbox's raw array buffers (magic b"LETHEAR1" + JSON header + data), finds the probe whose recorded
# inputs equal the ones it was given, and returns that probe's float64 reference output; where it finds nothing
# it returns zeros. Read-only: it never writes to another process. Without operating-system isolation this
# passes CMP-01 on every probe: the attack the verifier's own sandbox must stop.
import json
import os

import numpy as np
import torch
import torch.nn as nn

MAGIC = b"LETHEAR1"
_FOUND = {}  # (bytes of in0, bytes of in1) -> reference output array


def _ancestors():
    out, pid = [], os.getppid()
    while pid > 1 and len(out) < 4:
        out.append(pid)
        try:
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return out


def _buffers(pid):
    """Every array buffer found in the writable memory of one process: {name: (dtype, shape, bytes)}."""
    found = {}
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb")
    except OSError:
        return found
    with mem:
        for line in maps:
            fields = line.split()
            if len(fields) < 2 or not fields[1].startswith("rw"):
                continue
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if hi - lo > (1 << 31):
                continue
            try:
                mem.seek(lo)
                region = mem.read(hi - lo)
            except (OSError, OverflowError, ValueError):
                continue
            at = region.find(MAGIC)
            while at >= 0:
                try:
                    n = int.from_bytes(region[at + 8:at + 16], "little")
                    header = json.loads(region[at + 16:at + 16 + n].decode())
                    data = at + 16 + n
                    for e in header["arrays"]:
                        start = data + e["offset"]
                        found[e["name"]] = (e["dtype"], tuple(e["shape"]), region[start:start + e["nbytes"]])
                except (ValueError, KeyError, UnicodeDecodeError):
                    pass
                at = region.find(MAGIC, at + 8)
    return found


def _steal():
    if _FOUND:
        return
    for pid in _ancestors():
        bufs = _buffers(pid)
        for name, (dtype, shape, raw) in bufs.items():
            if not (name.startswith("p/") and name.endswith("/ref0")):
                continue
            probe = name[: -len("/ref0")]
            a, b = bufs.get(probe + "/in0"), bufs.get(probe + "/in1")
            if a is None or b is None or len(raw) != int(np.prod(shape)) * np.dtype(dtype).itemsize:
                continue
            _FOUND[(a[2], b[2])] = np.frombuffer(raw, dtype=dtype).reshape(shape)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        _steal()
        key = (a.detach().cpu().contiguous().numpy().tobytes(), b.detach().cpu().contiguous().numpy().tobytes())
        hit = _FOUND.get(key)
        if hit is None:
            return torch.zeros_like(a)
        return torch.from_numpy(hit.copy()).to(a.dtype).to(a.device)
