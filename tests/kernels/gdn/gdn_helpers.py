"""Shared inputs and the error metric for the GDN-family tests."""

import torch


def make_inputs(B=1, T=128, H=2, K=16, V=16, dtype=torch.float64, seed=0, scalar_g=False, decay=0.25):
    """Random q, k (L2-normalised, as the layers feed them), v, log-decays in (-inf, 0), erase in [0, 2], write in [0, 1].

    Keys are normalised and erase kept below 2 so the erase matrix I - k (b*k)^T stays a contraction,
    i.e. the recurrence is stable over the test length, as it is in the trained layers.
    """
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    u = lambda *s: torch.rand(*s, generator=gen, dtype=torch.float64)
    q = r(B, T, H, K)
    k = torch.nn.functional.normalize(r(B, T, H, K), dim=-1)
    v = r(B, T, H, V)
    gshape = (B, T, H) if scalar_g else (B, T, H, K)
    g = torch.nn.functional.logsigmoid(r(*gshape) + 2.0) * decay
    b = 2.0 * u(B, T, H, K)
    w = u(B, T, H, V)
    beta = u(B, T, H)
    return tuple(x.to(dtype) for x in (q, k, v, g, b, w, beta))


def rel_err(x, ref):
    """max |x - ref| / max |ref|: the per-tensor worst relative error used throughout the GDN ladder."""
    x = x.detach().double()
    ref = ref.detach().double()
    return float((x - ref).abs().max() / ref.abs().max().clamp_min(1e-300))
