"""One autograd.Function and one entry point for the five family members.

``chunk_family(q, k, v, g, b, w, member=..., backend=...)`` maps a member's own gates onto the general
recurrence (see :func:`lethe.kernels.gdn.reference.gates_for_member` for the per-member conventions), then runs the
chunked forward and the explicit chunked backward of the chosen backend:

* ``"torch"``  -- :mod:`lethe.kernels.gdn.chunked` (any device; the float32 reference path of the training runs);
* ``"triton"`` -- :mod:`lethe.kernels.gdn.triton_fwd` / :mod:`lethe.kernels.gdn.triton_bwd` (CUDA, or the CPU interpreter
  when ``TRITON_INTERPRET=1``);
* ``"native"`` -- a native backward registered in the leaf registry :mod:`lethe.kernels.gdn.backends`;
  refused with an explicit error when none is registered;
* ``"hybrid"`` -- the Triton forward and intra-chunk backward with the native reverse state scan (K1), also
  from ``NATIVE_BACKENDS`` (:class:`lethe.kernels.gdn.native.backend.HybridGDN`);
* ``"hybrid-tc"`` -- as ``"hybrid"`` with K1 on Hopper tensor cores for bf16 inputs and the backward's
  tail fused (:class:`lethe.kernels.gdn.native.backend.HybridTensorCoreGDN`);
* ``"auto"``   -- triton on CUDA tensors, torch otherwise.

The scalar-gate gated delta rule (KDA with a per-head g ``[B, T, H]``) takes its own Triton kernels
(:mod:`lethe.kernels.gdn.scalar_gate`) on the Triton-based backends (triton, hybrid, hybrid-tc) unless
``gate_form="general"``, which keeps the general kernels (the control); ``ctx.pipeline`` records which ran.

Members that never erase (LA, GLA, SSD) pass ``b=None`` down, so the triangular solve is skipped (T = I).
"""

from __future__ import annotations

import os

import torch

from . import chunked
from .backends import BACKENDS, NATIVE_BACKENDS, NATIVE_KEYS
from .fwd_options import (
    DOT_PRECISION_DEFAULT,
    GATE_FORM_DEFAULT,
    GATE_FORMS,
    OUTPUT_PRECISION_DEFAULT,
    WY_INVERSE_DEFAULT,
)
from .reference import MEMBERS, gates_for_member


def _register_native() -> None:
    """Register the CuTe DSL backend on first use (importing it needs no GPU; running its kernel does)."""
    try:
        from .native.backend import register
    except ImportError:  # pragma: no cover - the native sub-package ships with the repo
        return
    register()


def _resolve_backend(backend: str, q: torch.Tensor) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if backend == "auto":
        return "triton" if (q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1") else "torch"
    return backend


# the backends whose Triton kernels the scalar-gate path replaces for a scalar-gate KDA call
SCALAR_GATE_BACKENDS = ("triton", "hybrid", "hybrid-tc")


def scalar_gate_applies(member: str, g, b, backend: str, q, v, chunk: int, gate_form: str = GATE_FORM_DEFAULT) -> bool:
    """Whether a call runs on :mod:`lethe.kernels.gdn.scalar_gate`: ``gate_form="auto"``, KDA with a per-head g and beta
    (``[B, T, H]`` both), a Triton-based backend (resolved: "auto" on CUDA is "triton") on CUDA tensors or the CPU
    interpreter, and d_k, d_v and the chunk powers of two >= 16 (what the kernels take; other sizes keep the general
    path, which refuses them with its own message)."""
    if gate_form not in GATE_FORMS:
        raise ValueError(f"gate_form must be one of {GATE_FORMS}, got {gate_form!r}")
    if gate_form != "auto" or member != "kda" or backend not in SCALAR_GATE_BACKENDS:
        return False
    if g is None or g.dim() != 3 or b is None or b.dim() != 3:
        return False
    if not (q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"):
        return False
    return all(d >= 16 and not d & (d - 1) for d in (q.shape[-1], v.shape[-1], chunk))


def summed_gradients(member: str, own: list) -> tuple[str, ...]:
    """The general recurrence's gradients that :func:`own_gate_grads` sums over a broadcast axis for ``member``."""
    g, b, _ = own
    scalar_g = g is not None and g[0] == 3 and member in ("ssd", "kda", "gdn")
    return (("dg",) if scalar_g else ()) + (("db", "dw") if member == "kda" and b is not None else ())


def own_gate_grads(member: str, own: list, dg, db, dw):
    """The gradients of the member's own gate tensors from those of the general recurrence's (g, b, w): a
    gate broadcast over d_k (SSD's g, a scalar g of KDA or GDN) sums dg over d_k; KDA's beta, broadcast into
    both b (over d_k) and w (over d_v), sums both; gates the member does not take get None. Sums in the
    gradients' dtype (float32 for 16-bit inputs: ChunkGDNFunction.backward asks the backends for it), each
    result cast once to its tensor's dtype."""
    g, b, w = own
    out = [None, None, None]
    if g is not None:
        out[0] = dg.sum(-1) if g[0] == 3 else dg
    if member == "kda" and b is not None:
        out[1] = db.sum(-1) + dw.sum(-1)
    elif member == "gdn":
        out[1], out[2] = db, dw
    return [None if x is None or spec is None else x.to(spec[1]) for x, spec in zip(out, own, strict=True)]


class ChunkGDNFunction(torch.autograd.Function):
    """Chunked forward + explicit chunked backward of the general recurrence (one Function for all members)."""

    @staticmethod
    def forward(ctx, q, k, v, g_own, b_own, w_own, initial_state, scale, chunk, backend, dot_precision, wy_inverse,
                output_precision, member, gate_form):
        ctx.backend = backend
        ctx.has_init = initial_state is not None
        if scalar_gate_applies(member, g_own, b_own, backend, q, v, chunk, gate_form):
            from . import scalar_gate

            # the member's own [B, T, H] gates go in as they are: nothing is broadcast, dg and dbeta come back
            # summed in float32 and are rounded once in backward
            o, S, saved = scalar_gate.sg_chunk_fwd(q, k, v, g_own, b_own, scale, chunk, initial_state, dot_precision)
            ctx.pipeline = "scalar-gate"
            ctx.own = [(x.dim(), x.dtype) if x is not None else None for x in (g_own, b_own, w_own)]
            ctx.saved = saved
            return o, S
        ctx.pipeline = "general"
        # The member's own gates enter the Function and are broadcast here, so that the backward can sum the
        # broadcast gradients in float32 before the one rounding to the caller's dtype. Broadcast outside, autograd
        # would sum gradients already rounded to bf16 -- 128 or 256 roundings of 2^-9 each, with cancellation:
        # KDA's dbeta at d_v 128, T 4096 was 5.30e-3 from the float64 oracle with float32-grade products, against
        # the rounding of the exact result alone (results/gdn/broadcast_sum_replay.json; docs/gdn.md §8).
        g, b, w = (x if x is None else x.contiguous() for x in gates_for_member(member, q, v, g_own, b_own, w_own))
        ctx.member = member
        ctx.own = [(x.dim(), x.dtype) if x is not None else None for x in (g_own, b_own, w_own)]
        if backend == "torch":
            o, S, saved = chunked.chunk_fwd(q, k, v, g, b, w, scale, chunk, initial_state)
        elif backend == "triton":
            from .triton_fwd import triton_chunk_fwd

            o, S, saved = triton_chunk_fwd(q, k, v, g, b, w, scale, chunk, initial_state, dot_precision,
                                           wy_inverse=wy_inverse, output_precision=output_precision)
        elif backend in NATIVE_KEYS:
            key = NATIVE_KEYS[backend]
            if key not in NATIVE_BACKENDS:
                _register_native()
            if key not in NATIVE_BACKENDS:
                raise NotImplementedError(f"no {backend} GDN backend is registered in lethe.kernels.gdn.NATIVE_BACKENDS")
            impl = NATIVE_BACKENDS[key]
            if backend != "native":
                o, S, saved = impl.forward(q, k, v, g, b, w, scale, chunk, initial_state, dot_precision, wy_inverse,
                                           output_precision)
            else:
                o, S, saved = impl.forward(q, k, v, g, b, w, scale, chunk, initial_state)
        else:  # pragma: no cover - resolved before
            raise ValueError(backend)
        ctx.saved = saved
        return o, S

    @staticmethod
    def backward(ctx, do, dS):
        saved = ctx.saved
        if ctx.pipeline == "scalar-gate":
            from .scalar_gate import sg_chunk_bwd

            dq, dk, dv, dg, dbeta, dinit = sg_chunk_bwd(do, saved, dS)
            ctx.saved = None
            (_, g_dtype), (_, b_dtype) = ctx.own[0], ctx.own[1]
            return (dq, dk, dv, dg.to(g_dtype), dbeta.to(b_dtype), None, (dinit if ctx.has_init else None),
                    None, None, None, None, None, None, None, None)
        if saved["dtype"] in (torch.bfloat16, torch.float16):
            # the backends return these in float32 (the others in the inputs' dtype), see own_gate_grads
            saved["grad_dtypes"] = dict.fromkeys(summed_gradients(ctx.member, ctx.own), torch.float32)
        if ctx.backend == "torch":
            grads = chunked.chunk_bwd(do, saved, dS)
        elif ctx.backend == "triton":
            from .triton_bwd import triton_chunk_bwd

            grads = triton_chunk_bwd(do, saved, dS)
        else:
            grads = NATIVE_BACKENDS[NATIVE_KEYS[ctx.backend]].backward(do, saved, dS)
        dq, dk, dv, dg, db, dw, dinit = grads
        ctx.saved = None
        dg_own, db_own, dw_own = own_gate_grads(ctx.member, ctx.own, dg, db, dw)
        return (dq, dk, dv, dg_own, db_own, dw_own, (dinit if ctx.has_init else None),
                None, None, None, None, None, None, None, None)


def chunk_family(q, k, v, g=None, b=None, w=None, member: str = "gdn", scale=None, initial_state=None,
                 output_final_state: bool = False, chunk: int = 64, backend: str = "auto",
                 dot_precision: str = DOT_PRECISION_DEFAULT, wy_inverse: str = WY_INVERSE_DEFAULT,
                 output_precision: str | None = OUTPUT_PRECISION_DEFAULT, gate_form: str = GATE_FORM_DEFAULT):
    """Run one family member through the chunked forward/backward; returns ``(o, final_state or None)``.

    Gates per member (fla-compatible, natural-log decays): LA none; GLA g[B,T,H,K]; SSD g[B,T,H] (scalar per head);
    KDA g[B,T,H,K] (or [B,T,H]: the scalar-gate gated delta rule) and beta passed as b[B,T,H] (w ignored); GDN g[B,T,H,K] (or [B,T,H]), b[B,T,H,K], w[B,T,H,V].
    Gradients flow back to the member's own gate tensors through the broadcasts.

    ``dot_precision`` and ``wy_inverse`` configure the Triton forward (backends "triton", "hybrid", "hybrid-tc"):
    tl.dot's input precision ("tf32x3", "tf32", "ieee"; the backward's scan uses it too) and how the WY kernel
    inverts its triangular tile ("split", the default, "rows" or "blocked"; see kernels/gdn/fwd_options.py);
    ``output_precision`` the output kernel's alone (None: ``dot_precision``; "auto", the default: "tf32rn" for
    bf16/fp16 inputs under the default ``dot_precision``; its products feed only o). A, W/U and the state scan
    follow the same "auto" rule through their launch entries (kernels/gdn/triton_fwd.FWD_LAUNCH, ``PREC``), so
    bf16/fp16 inputs get TF32 products rounded to nearest in the forward unless ``dot_precision`` is set to
    another value than the default (docs/gdn.md §3 says which precision each product then takes). The torch and native backends ignore them.

    ``gate_form``: "auto" (the default) runs KDA with a per-head g (the scalar-gate gated delta rule) on its own
    Triton kernels (:mod:`lethe.kernels.gdn.scalar_gate`) under the triton, hybrid and hybrid-tc backends; "general"
    keeps the general kernels there. ``wy_inverse`` and ``output_precision`` do not apply to that path.
    """
    if member not in MEMBERS:
        raise ValueError(f"unknown member {member!r}; expected one of {MEMBERS}")
    be = _resolve_backend(backend, q)
    o, S = ChunkGDNFunction.apply(q, k, v, g, b, w, initial_state, scale, chunk, be, dot_precision, wy_inverse,
                                  output_precision, member, gate_form)
    return o, (S if output_final_state else None)
