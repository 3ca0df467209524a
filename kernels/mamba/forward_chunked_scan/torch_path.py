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


def scan_fwd_chunk_parallel(u, delta, A, B, C, D, chunk: int):
    """The chunk-parallel form (same returns as :func:`scan_fwd`): each chunk scanned from a zero state (the
    chunks side by side), the carry ``H_c = exp(A S_c) H_{c-1} + h_end_c`` across chunks (S_c the chunk's sum of
    delta), then ``y_t += sum_n C_t exp(A sum_{chunk start..t} delta) H_start``. The tail chunk is padded with
    delta = 0 and B = 0 steps, which leave a state unchanged."""
    cd = compute_dtype(u)
    b, L, d = u.shape
    n = A.shape[1]
    nc = -(-L // chunk)
    pad = nc * chunk - L
    f = lambda x: torch.nn.functional.pad(x.to(cd), (0, 0, 0, pad)).reshape(b, nc, chunk, x.shape[-1])
    uc, dc, Bc, Cc = f(u), f(delta), f(B), f(C)
    Ac = A.to(cd)
    h = uc.new_zeros(b, nc, d, n)
    yloc = uc.new_empty(b, nc, chunk, d)
    for i in range(chunk):
        h = torch.exp(dc[:, :, i, :, None] * Ac) * h + (dc[:, :, i] * uc[:, :, i])[..., None] * Bc[:, :, i, None, :]
        yloc[:, :, i] = (h * Cc[:, :, i, None, :]).sum(-1)
    S = dc.sum(2)  # [b, nc, d]
    ckpt = uc.new_empty(b, nc, d, n)
    H = uc.new_zeros(b, d, n)
    for c in range(nc):
        ckpt[:, c] = H
        H = torch.exp(S[:, c, :, None] * Ac) * H + h[:, c]
    cum = torch.cumsum(dc, 2)  # [b, nc, chunk, d]
    y = yloc + (torch.exp(cum[..., None] * Ac) * ckpt[:, :, None] * Cc[:, :, :, None, :]).sum(-1)
    y = y.reshape(b, nc * chunk, d)[:, :L]
    if D is not None:
        y = y + D.to(cd) * u.to(cd)
    return y.to(u.dtype), ckpt, H
