"""The small GDN problem the K2 model tests share: a chunked forward in float64 (or ``dtype``) with erase."""

import torch
from lethe.kernels.gdn import chunked


def k2_problem(T=128, K=128, V=64, seed=0, dtype=torch.float64):
    """(ctx, dO, dS_final) of a B=1, H=2 problem with chunk 64; inputs drawn in float64, then cast to ``dtype``."""
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    u = lambda *s: torch.rand(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    B, H = 1, 2
    q, v = r(B, T, H, K), r(B, T, H, V)
    k = torch.nn.functional.normalize(r(B, T, H, K), dim=-1)
    g = torch.nn.functional.logsigmoid(r(B, T, H, K) + 2.0) * 0.25
    b, w = 2.0 * u(B, T, H, K), u(B, T, H, V)
    S0, do, dS = r(B, H, K, V), r(B, T, H, V), r(B, H, K, V)
    ins = [x.to(dtype) for x in (q, k, v, g, b, w)]
    _, _, ctx = chunked.chunk_fwd(*ins, chunk=64, initial_state=S0.to(dtype))
    return ctx, do.to(dtype), dS.to(dtype)
