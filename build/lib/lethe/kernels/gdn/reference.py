"""Float64 ground truth for the gated linear recurrence family.

The general recurrence (fla's GDN-2, the paper's "GDN, all per-channel")::

    S_t = (I - k_t (b_t * k_t)^T) Diag(exp(g_t)) S_{t-1} + k_t (w_t * v_t)^T,    o_t = S_t^T (scale * q_t)

Layouts follow fla: q, k ``[B, T, H, K]``; v ``[B, T, H, V]``; g ``[B, T, H, K]`` (per-channel natural-log decay)
or ``[B, T, H]`` (scalar per head, broadcast over K); b ``[B, T, H, K]`` (erase); w ``[B, T, H, V]`` (write);
state ``[B, H, K, V]``. ``scale=None`` means ``K ** -0.5`` and multiplies q only, as in fla.

Every family member below is written from its own textbook definition -- not by setting knobs on
:func:`recurrent_gdn` -- so a test that compares them against the general recurrence actually checks the
reduction claimed in the paper (LA: g=b=0, w=1; GLA: b=0, w=1; SSD: scalar decay, b=0, w=1; KDA: b=w=beta).

These functions are the oracle: they refuse anything but float64 so that a low-precision tensor can never
silently become the reference it is measured against. Backward is plain autograd through the loops.
"""

from __future__ import annotations

import torch

MEMBERS = ("la", "gla", "ssd", "kda", "gdn")


class OracleDtypeError(TypeError):
    """Raised when the float64 oracle is handed a tensor of another dtype."""


def _require_f64(**tensors: torch.Tensor | None) -> None:
    for name, t in tensors.items():
        if t is not None and t.dtype != torch.float64:
            raise OracleDtypeError(
                f"the float64 oracle refuses {name} of dtype {t.dtype}; cast to torch.float64 explicitly"
            )


def _scale(q: torch.Tensor, scale: float | None) -> float:
    return q.shape[-1] ** -0.5 if scale is None else float(scale)


def _init_state(q: torch.Tensor, v: torch.Tensor, initial_state: torch.Tensor | None) -> torch.Tensor:
    B, _, H, K = q.shape
    V = v.shape[-1]
    if initial_state is None:
        return q.new_zeros(B, H, K, V)
    return initial_state


def recurrent_gdn(q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False):
    """The general recurrence, one time step at a time (float64 only).

    This is the definition every other path is checked against, so it is written as literally as the
    equation: build the erase matrix ``I - k (b*k)^T``, apply it after the diagonal decay, add the write.
    """
    _require_f64(q=q, k=k, v=v, g=g, b=b, w=w, initial_state=initial_state)
    B, T, H, K = q.shape
    s = _scale(q, scale)
    if g.dim() == 3:
        g = g.unsqueeze(-1).expand(B, T, H, K)
    S = _init_state(q, v, initial_state)
    eye = torch.eye(K, dtype=q.dtype, device=q.device)
    outs = []
    for t in range(T):
        kt, qt = k[:, t], q[:, t] * s
        erase = eye - kt.unsqueeze(-1) * (b[:, t] * kt).unsqueeze(-2)  # [B,H,K,K]
        decayed = torch.exp(g[:, t]).unsqueeze(-1) * S
        S = erase @ decayed + kt.unsqueeze(-1) * (w[:, t] * v[:, t]).unsqueeze(-2)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, qt))
    o = torch.stack(outs, dim=1)
    return o, (S if output_final_state else None)


def linear_attention(q, k, v, scale=None):
    """LA (Katharopoulos et al.): un-normalised causal attention without softmax, o_t = sum_{s<=t} (q_t.k_s) v_s.

    Written in the quadratic (attention) form rather than as a recurrence, so agreeing with the recurrent
    GDN path at g=b=0, w=1 is a real check of the state formulation.
    """
    _require_f64(q=q, k=k, v=v)
    T = q.shape[1]
    scores = torch.einsum("bthk,bshk->bhts", q * _scale(q, scale), k)
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, 0.0)
    return torch.einsum("bhts,bshv->bthv", scores, v)


def gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False):
    """GLA (Yang et al. 2024): S_t = Diag(exp(g_t)) S_{t-1} + k_t v_t^T with a per-channel gate."""
    _require_f64(q=q, k=k, v=v, g=g, initial_state=initial_state)
    s = _scale(q, scale)
    S = _init_state(q, v, initial_state)
    outs = []
    for t in range(q.shape[1]):
        S = torch.exp(g[:, t]).unsqueeze(-1) * S + torch.einsum("bhk,bhv->bhkv", k[:, t], v[:, t])
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t] * s))
    o = torch.stack(outs, dim=1)
    return o, (S if output_final_state else None)


def ssd(q, k, v, a, scale=None):
    """SSD / Mamba-2 in its quadratic "structured masked attention" form: y = (L o (C B^T)) x.

    ``a`` is the scalar log-decay per head and step ``[B, T, H]``; L_ts = exp(sum_{r=s+1}^t a_r) for s <= t.
    q, k, v play C, B and x*dt. This is the dual (attention) form of the SSM, independent of the recurrence.
    """
    _require_f64(q=q, k=k, v=v, a=a)
    T = q.shape[1]
    cum = torch.cumsum(a, dim=1).transpose(1, 2)  # [B,H,T]
    seg = cum.unsqueeze(-1) - cum.unsqueeze(-2)  # [B,H,t,s] = sum_{r=s+1}^{t} a_r
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    L = torch.exp(seg.masked_fill(~mask, float("-inf")))
    scores = torch.einsum("bthk,bshk->bhts", q * _scale(q, scale), k) * L
    return torch.einsum("bhts,bshv->bthv", scores, v)


def kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    """KDA (Kimi Delta Attention) in its delta-rule form: decay, predict, correct.

    S <- Diag(exp(g_t)) S;  S <- S + beta_t k_t (v_t - S^T k_t)^T, with per-channel g and scalar beta per head.
    """
    _require_f64(q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state)
    s = _scale(q, scale)
    S = _init_state(q, v, initial_state)
    outs = []
    for t in range(q.shape[1]):
        S = torch.exp(g[:, t]).unsqueeze(-1) * S
        kt = k[:, t]
        residual = v[:, t] - torch.einsum("bhkv,bhk->bhv", S, kt)
        S = S + beta[:, t, :, None, None] * kt.unsqueeze(-1) * residual.unsqueeze(-2)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t] * s))
    o = torch.stack(outs, dim=1)
    return o, (S if output_final_state else None)


def member_reference(member, q, k, v, g=None, b=None, w=None, scale=None):
    """Output of ``member`` from its own definition (float64). Gate arguments follow :func:`gates_for_member`."""
    if member == "la":
        return linear_attention(q, k, v, scale)
    if member == "gla":
        return gla(q, k, v, g, scale)[0]
    if member == "ssd":
        return ssd(q, k, v, g, scale)
    if member == "kda":
        return kda(q, k, v, g, b, scale)[0]
    if member == "gdn":
        return recurrent_gdn(q, k, v, g, b, w, scale)[0]
    raise ValueError(f"unknown member {member!r}; expected one of {MEMBERS}")


def member_final_state(member, q, k, v, g=None, b=None, w=None, initial_state=None):
    """Final state S_T ``[B, H, K, V]`` of ``member`` (float64): the general recurrence run on the gates the member
    stands for (:func:`gates_for_member`; a member that never erases erases with b = 0). It is what
    ``chunk_family(..., output_final_state=True)`` returns beside o. The scale acts on q only, so it has no say."""
    gf, bf, wf = gates_for_member(member, q, v, g, b, w)
    bf = torch.zeros_like(k) if bf is None else bf
    return recurrent_gdn(q, k, v, gf, bf, wf, initial_state=initial_state, output_final_state=True)[1]


def gates_for_member(member, q, v, g=None, b=None, w=None):
    """Full per-channel (g, b, w) of the general recurrence that a member's own gates stand for.

    Conventions (fla-compatible): LA takes no gate; GLA takes g ``[B,T,H,K]``; SSD takes a scalar log-decay
    ``g [B,T,H]``; KDA takes g ``[B,T,H,K]`` (or ``[B,T,H]``, one decay per head) and beta as ``b [B,T,H]`` (w is ignored and set to beta); GDN takes
    g, b ``[B,T,H,K]`` and w ``[B,T,H,V]``. The returned b is ``None`` when the member never erases, which
    lets the chunked paths skip the triangular solve (T = I) instead of solving an identity system.
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    ones_v = v.new_ones(B, T, H, V)
    if member == "la":
        return q.new_zeros(B, T, H, K), None, ones_v
    if member == "gla":
        return g, None, ones_v
    if member == "ssd":
        if g.dim() != 3:
            raise ValueError("SSD takes a scalar decay per head: g must be [B, T, H]")
        return g.unsqueeze(-1).expand(B, T, H, K), None, ones_v
    if member == "kda":
        if b is None or b.dim() != 3:
            raise ValueError("KDA takes beta as b of shape [B, T, H]")
        if g.dim() == 3:  # one decay per head: the scalar-gate gated delta rule (fla's chunk_gated_delta_rule)
            g = g.unsqueeze(-1).expand(B, T, H, K)
        return g, b.unsqueeze(-1).expand(B, T, H, K), b.unsqueeze(-1).expand(B, T, H, V)
    if member == "gdn":
        if g.dim() == 3:
            g = g.unsqueeze(-1).expand(B, T, H, K)
        return g, b, w
    raise ValueError(f"unknown member {member!r}; expected one of {MEMBERS}")
