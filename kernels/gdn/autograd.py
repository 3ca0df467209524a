"""One autograd.Function and one entry point for the five family members.

``chunk_family(q, k, v, g, b, w, member=..., backend=...)`` maps a member's own gates onto the general
recurrence (see :func:`kernels.gdn.reference.gates_for_member` for the per-member conventions), then runs the
chunked forward and the explicit chunked backward of the chosen backend:

* ``"torch"``  -- :mod:`kernels.gdn.chunked` (any device; the float32 reference path of the training runs);
* ``"triton"`` -- :mod:`kernels.gdn.triton_fwd` / :mod:`kernels.gdn.triton_bwd` (CUDA, or the CPU interpreter
  when ``TRITON_INTERPRET=1``);
* ``"native"`` -- a native backward registered by another module under ``kernels.gdn.NATIVE_BACKENDS``;
  refused with an explicit error when none is registered;
* ``"hybrid"`` -- the Triton forward and intra-chunk backward with the native reverse state scan (K1), also
  from ``NATIVE_BACKENDS`` (:class:`kernels.gdn.native.backend.HybridGDN`);
* ``"hybrid-tc"`` -- as ``"hybrid"`` with K1 on Hopper tensor cores for bf16 inputs and the backward's
  tail fused (:class:`kernels.gdn.native.backend.HybridTensorCoreGDN`);
* ``"auto"``   -- triton on CUDA tensors, torch otherwise.

Members that never erase (LA, GLA, SSD) pass ``b=None`` down, so the triangular solve is skipped (T = I).
"""

from __future__ import annotations

import os

import torch

from . import chunked
from .fwd_options import DOT_PRECISION_DEFAULT, OUTPUT_PRECISION_DEFAULT, WY_INVERSE_DEFAULT
from .reference import MEMBERS, gates_for_member

BACKENDS = ("auto", "torch", "triton", "native", "hybrid", "hybrid-tc")
# chunk_family backend -> its key in NATIVE_BACKENDS
_NATIVE_KEYS = {"native": "default", "hybrid": "hybrid", "hybrid-tc": "hybrid-tc"}
NATIVE_BACKENDS: dict[str, object] = {}


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


class ChunkGDNFunction(torch.autograd.Function):
    """Chunked forward + explicit chunked backward of the general recurrence (one Function for all members)."""

    @staticmethod
    def forward(ctx, q, k, v, g, b, w, initial_state, scale, chunk, backend, dot_precision, wy_inverse,
                output_precision):
        if backend == "torch":
            o, S, saved = chunked.chunk_fwd(q, k, v, g, b, w, scale, chunk, initial_state)
        elif backend == "triton":
            from .triton_fwd import triton_chunk_fwd

            o, S, saved = triton_chunk_fwd(q, k, v, g, b, w, scale, chunk, initial_state, dot_precision,
                                           wy_inverse=wy_inverse, output_precision=output_precision)
        elif backend in _NATIVE_KEYS:
            key = _NATIVE_KEYS[backend]
            if key not in NATIVE_BACKENDS:
                _register_native()
            if key not in NATIVE_BACKENDS:
                raise NotImplementedError(f"no {backend} GDN backend is registered in kernels.gdn.NATIVE_BACKENDS")
            impl = NATIVE_BACKENDS[key]
            if backend != "native":
                o, S, saved = impl.forward(q, k, v, g, b, w, scale, chunk, initial_state, dot_precision, wy_inverse,
                                           output_precision)
            else:
                o, S, saved = impl.forward(q, k, v, g, b, w, scale, chunk, initial_state)
        else:  # pragma: no cover - resolved before
            raise ValueError(backend)
        ctx.saved = saved
        ctx.backend = backend
        ctx.has_b = b is not None
        ctx.has_init = initial_state is not None
        return o, S

    @staticmethod
    def backward(ctx, do, dS):
        saved = ctx.saved
        if ctx.backend == "torch":
            grads = chunked.chunk_bwd(do, saved, dS)
        elif ctx.backend == "triton":
            from .triton_bwd import triton_chunk_bwd

            grads = triton_chunk_bwd(do, saved, dS)
        else:
            grads = NATIVE_BACKENDS[_NATIVE_KEYS[ctx.backend]].backward(do, saved, dS)
        dq, dk, dv, dg, db, dw, dinit = grads
        ctx.saved = None
        return (dq, dk, dv, dg, (db if ctx.has_b else None), dw, (dinit if ctx.has_init else None),
                None, None, None, None, None, None)


def chunk_family(q, k, v, g=None, b=None, w=None, member: str = "gdn", scale=None, initial_state=None,
                 output_final_state: bool = False, chunk: int = 64, backend: str = "auto",
                 dot_precision: str = DOT_PRECISION_DEFAULT, wy_inverse: str = WY_INVERSE_DEFAULT,
                 output_precision: str | None = OUTPUT_PRECISION_DEFAULT):
    """Run one family member through the chunked forward/backward; returns ``(o, final_state or None)``.

    Gates per member (fla-compatible, natural-log decays): LA none; GLA g[B,T,H,K]; SSD g[B,T,H] (scalar per head);
    KDA g[B,T,H,K] and beta passed as b[B,T,H] (w ignored); GDN g[B,T,H,K] (or [B,T,H]), b[B,T,H,K], w[B,T,H,V].
    Gradients flow back to the member's own gate tensors through the broadcasts.

    ``dot_precision`` and ``wy_inverse`` configure the Triton forward (backends "triton", "hybrid", "hybrid-tc"):
    tl.dot's input precision ("tf32x3", "tf32", "ieee"; the backward's scan uses it too) and how the WY kernel
    inverts its triangular tile ("split", the default, "rows" or "blocked"; see kernels/gdn/fwd_options.py);
    ``output_precision`` the output kernel's alone (None: ``dot_precision``; "auto", the default: "tf32rn" for
    bf16/fp16 inputs under the default ``dot_precision``; its products feed only o). A, W/U and the state scan
    follow the same "auto" rule through their launch entries (kernels/gdn/triton_fwd.FWD_LAUNCH, ``PREC``), so
    bf16/fp16 inputs get TF32 products rounded to nearest in the forward unless ``dot_precision`` is set to
    another value than the default (3xTF32 throughout: docs/gdn.md §3). The torch and native backends ignore them.
    """
    if member not in MEMBERS:
        raise ValueError(f"unknown member {member!r}; expected one of {MEMBERS}")
    gf, bf, wf = gates_for_member(member, q, v, g, b, w)
    be = _resolve_backend(backend, q)
    o, S = ChunkGDNFunction.apply(q, k, v, gf.contiguous(), None if bf is None else bf.contiguous(),
                                  wf.contiguous(), initial_state, scale, chunk, be, dot_precision, wy_inverse,
                                  output_precision)
    return o, (S if output_final_state else None)
