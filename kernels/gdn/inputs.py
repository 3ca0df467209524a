"""The GDN family's benchmark inputs and error metric, shared by the ladder, the fla comparison and the replays.

:func:`make_inputs` draws float64 masters on the CPU (one seed gives the same tensors on every machine); each
experiment rounds them to its dtype. :func:`rel_err` is the per-tensor metric every GDN result reports.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: The paper's end-to-end pin: worst relative error of o and every gradient against the float64 oracle.
PIN_E2E = 5e-3


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max|x - ref| / max|ref|, computed in float64."""
    x, ref = x.detach().double(), ref.detach().double()
    return float((x - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


def nonfinite(t: torch.Tensor) -> int:
    """Number of NaN or infinite entries."""
    return int((~torch.isfinite(t.detach())).sum())


def make_inputs(B, T, H, K, V, seed, device, member="gdn"):
    """float64 master inputs: L2-normalised keys, log-decays logsigmoid(x+2) (chunk-local sums stay far above the
    float32 floor of the factored decay), erase in [0, 2], write and beta in [0, 1]."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    u = lambda *s: torch.rand(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    q = r(B, T, H, K)
    k = F.normalize(r(B, T, H, K), dim=-1)
    v = r(B, T, H, V)
    # ssd and sgdn (KDA with one decay per head: the scalar-gate gated delta rule) take a per-head g [B, T, H]
    g = F.logsigmoid(r(B, T, H) + 2.0) if member in ("ssd", "sgdn") else F.logsigmoid(r(B, T, H, K) + 2.0)
    b = 2.0 * u(B, T, H, K)
    w = u(B, T, H, V)
    beta = u(B, T, H)
    do = r(B, T, H, V)
    return {n: x.to(device) for n, x in dict(q=q, k=k, v=v, g=g, b=b, w=w, beta=beta, do=do).items()}


def member_args(member, x):
    """(leaf names in chunk_family's order, the tensors by those names) of ``member`` from :func:`make_inputs`'s
    dict (KDA's erase is beta)."""
    names = ["q", "k", "v"] + (["g"] if member != "la" else []) + (["b"] if member in ("kda", "sgdn", "gdn") else []) + (
        ["w"] if member == "gdn" else [])
    src = dict(x)
    if member in ("kda", "sgdn"):
        src["b"] = x["beta"]
    return names, src


def family_member(member: str) -> str:
    """chunk_family's member for a ladder member: sgdn is KDA with a per-head g (which chunk_family runs on the
    scalar-gate kernels, kernels/gdn/scalar_gate.py, under the Triton-based backends)."""
    return "kda" if member == "sgdn" else member


def oracle_output(member, q, k, v, g=None, b=None, w=None):
    """The float64 output of a ladder member from its own definition (sgdn: KDA's, its g broadcast over d_k)."""
    from . import reference as R

    if member == "sgdn":
        return R.kda(q, k, v, g.unsqueeze(-1).expand(*g.shape, q.shape[-1]), b)[0]
    return R.member_reference(member, q, k, v, g, b, w)
