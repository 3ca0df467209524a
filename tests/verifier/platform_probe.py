"""What this machine's own float32 arithmetic does, where the golden grading evidence depends on it.

The verifier grades a candidate's float32 results against a float64 reference, so a candidate that calls the
platform's BLAS (torch.matmul on the CPU) inherits that BLAS's summation order and its last bits: the verdicts
are the same on every machine (ORD-03's cancellation bound admits every fp32 order), the evidence bits are not.
The fingerprint below tells the golden grading test which rows of exact evidence this machine can be held to.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from lethe.verifier.probes import cancellation_values


def float32_fingerprint() -> str:
    """A digest of float32 results, on fixed inputs, of the operations the golden grading cases' candidates run
    (torch and numpy matmul at small and large sizes and at the long K, linear, conv2d, reductions, softmax, layer
    norm), with the test process's thread settings. Machines that agree here agreed on the golden evidence so far;
    any remaining difference still fails the exact comparison."""
    gen = torch.Generator().manual_seed(1234)
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    outs = [
        r(16, 32) @ r(32, 8), r(512, 512) @ r(512, 512), cancellation_values((16, 4099), gen, "float32").float()
        @ (torch.rand(4099, 8, generator=gen) + 0.5),
        torch.nn.functional.linear(r(32, 64), r(48, 64), r(48)),
        torch.nn.functional.conv2d(r(2, 3, 16, 16), r(4, 3, 3, 3)),
        r(64, 4099).sum(-1), torch.softmax(r(32, 257), -1), torch.nn.functional.layer_norm(r(32, 257), (257,)),
        torch.from_numpy(np.random.default_rng(5).standard_normal((64, 64), dtype=np.float32)
                         @ np.random.default_rng(6).standard_normal((64, 64), dtype=np.float32)),
    ]
    h = hashlib.sha256()
    for o in outs:
        h.update(o.detach().contiguous().numpy().tobytes())
    # The BLAS picks its kernels by the instruction sets it finds, per shape: two machines can agree on every
    # product above and still differ at a shape a golden case uses (a probe's batch of 4,099 rows, say), so the
    # instruction sets it dispatches on are part of the arithmetic too.
    h.update(repr(dispatch_isa()).encode())
    return h.hexdigest()


def dispatch_isa() -> tuple[str, tuple[str, ...]]:
    """torch's CPU capability level and the x86 vector/matrix extensions the BLAS kernels dispatch on."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    keep = tuple(sorted(f for f in flags if f.startswith(("avx", "amx", "fma")) or f in ("f16c",)))
    return torch.backends.cpu.get_cpu_capability(), keep
