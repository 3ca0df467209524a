"""The portable torch path of the chunked selective-scan forward (any device, any float dtype).

The same recurrence as the reference (see :mod:`.reference`), vectorised over batch, channels and states, computed
in float32 for 16/32-bit inputs (float64 for float64 ones). Like the Triton kernel it keeps the state h at the
start of every ``chunk`` steps ("checkpoints", ``[batch, n_chunks, d_model, N]``, float32/64): the backward
recomputes each chunk's states from its checkpoint instead of storing all L of them.
"""

from __future__ import annotations

import torch

from .._common import compute_dtype


def scan_fwd(u, delta, A, B, C, D, chunk: int):
    """Returns ``(y in u's dtype, checkpoints, final state)``."""
    cd = compute_dtype(u)
    b, L, d = u.shape
    n = A.shape[1]
    uc, dc, Ac, Bc, Cc = (x.to(cd) for x in (u, delta, A, B, C))
    Dc = None if D is None else D.to(cd)
    n_chunks = -(-L // chunk)
    ckpt = u.new_empty(b, n_chunks, d, n, dtype=cd)
    h = u.new_zeros(b, d, n, dtype=cd)
    y = u.new_empty(b, L, d, dtype=cd)
    for t in range(L):
        if t % chunk == 0:
            ckpt[:, t // chunk] = h
        h = torch.exp(dc[:, t, :, None] * Ac) * h + (dc[:, t] * uc[:, t])[:, :, None] * Bc[:, t, None, :]
        yt = (h * Cc[:, t, None, :]).sum(-1)
        y[:, t] = yt if Dc is None else yt + Dc * uc[:, t]
    return y.to(u.dtype), ckpt, h
