"""The ``backend="native"`` implementation the family's autograd Function dispatches to.

Forward: the torch chunked forward (its ctx holds exactly the operands K1 and K2 read). Backward: the torch
chunked backward with K1 (``reverse_state_scan``) and K2 (``wy_vjp_torch``, the WY / triangular-inverse VJP)
replaced by the native CuTe DSL kernels on CUDA float32; the pairwise-decay VJP and the elementwise tail stay in
torch. float64 inputs (the oracle-precision check) and CPU tensors keep the torch code, because the native
kernels are float32 GPU kernels.

``HybridGDN`` (``backend="hybrid"``) keeps the Triton forward and intra-chunk backward and swaps in the native K1.

Hook for :mod:`kernels.gdn.autograd`::

    from kernels.gdn.native.backend import register; register()

which puts :data:`NATIVE` under ``NATIVE_BACKENDS["default"]``.
"""

from __future__ import annotations

import torch

from .. import chunked


class NativeGDN:
    """forward/backward pair with the signature ``ChunkGDNFunction`` expects of a native backend."""

    name = "native-cute-k1k2"

    @staticmethod
    def forward(q, k, v, g, b, w, scale, chunk, initial_state):
        return chunked.chunk_fwd(q, k, v, g, b, w, scale, chunk, initial_state)

    @staticmethod
    def backward(do, saved, dS_final):
        if not do.is_cuda or saved["qc"].dtype != torch.float32:
            return chunked.chunk_bwd(do, saved, dS_final)
        from .api import native_reverse_state_scan, native_wy_vjp
        from .k2_hopper_plan import supported

        K, V = saved["Hs"].shape[-2:]
        wy = native_wy_vjp if supported(K, V, saved["C"]) else None  # None: the torch K2 (other chunk sizes)
        return chunked.chunk_bwd(do, saved, dS_final, scan=native_reverse_state_scan, wy_vjp=wy)


NATIVE = NativeGDN()


class HybridGDN:
    """``backend="hybrid"``: the Triton forward and the Triton intra-chunk backward, with the native K1 (CuTe
    DSL, dS resident on chip for the whole reverse scan) in place of Triton's ``state_bwd_kernel``, which the
    kernel profile shows is most of the Triton backward's time (docs/native.md). On CPU tensors (the Triton
    interpreter) the Triton scan kernel stays: the native kernel is a GPU kernel."""

    name = "hybrid-triton-cute-k1"

    @staticmethod
    def forward(q, k, v, g, b, w, scale, chunk, initial_state, dot_precision="tf32x3"):
        from ..triton_fwd import triton_chunk_fwd

        return triton_chunk_fwd(q, k, v, g, b, w, scale, chunk, initial_state, dot_precision)

    @staticmethod
    def backward(do, saved, dS_final):
        from ..triton_bwd import triton_chunk_bwd
        from .api import scan_for_triton_ctx

        scan = scan_for_triton_ctx if saved["qi"].is_cuda else None
        return triton_chunk_bwd(do, saved, dS_final, scan=scan)


HYBRID = HybridGDN()


def register() -> None:
    """Make ``chunk_family(..., backend="native")`` and ``backend="hybrid"`` use these backends."""
    from ..autograd import NATIVE_BACKENDS

    NATIVE_BACKENDS["default"] = NATIVE
    NATIVE_BACKENDS["hybrid"] = HYBRID
