"""What this machine's own float32 arithmetic does, where a verdict or the grading evidence depends on it.

The verifier grades a candidate's float32 results against a float64 reference, so a candidate that calls the
platform's BLAS (torch.matmul on the CPU) inherits that BLAS's summation order: on one CPU it blocks the K axis
(partial sums, inside ORD-03's cancellation bound), on another the K loop of a GEMM is one running total, which
drops every small term of the cancellation probe (probes.cancellation_values) exactly as a naive kernel would.
The verdict is then right for that machine -- the candidate, run there, is not reorder-safe -- but it is not the
same verdict, and the evidence bits of every matmul-based case differ too. These helpers measure both facts
directly, outside the verifier, so the tests can state what each machine must give.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from lethe.verifier.probes import cancellation_values


def gemm_breaks_cancellation_bound(M: int = 16, K: int = 4099, N: int = 8) -> bool:
    """Whether float32 torch.matmul of the ORD-03 cancellation rows ([M, K]: +B, small terms, -B along K, B = 4/eps)
    with a [K, N] matrix in [0, 1) -- the probe a KernelBench matmul gets with its K patched to the long length --
    errs by more than the contract's 2*eps*sqrt(K)*sum|terms| somewhere: the platform's GEMM then sums K in an order
    that drops the small terms (a running total per output element), as a naive kernel does."""
    gen = torch.Generator().manual_seed(0)
    a = cancellation_values((M, K), gen, "float32")
    b = torch.rand(K, N, generator=gen, dtype=torch.float64)
    err = ((a.float() @ b.float()).double() - a @ b).abs()
    bound = 2 * 2.0**-23 * K**0.5 * (a.abs() @ b.abs())
    return bool((err > bound).any())


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
    return h.hexdigest()
