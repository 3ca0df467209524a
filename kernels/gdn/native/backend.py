"""The ``backend="native"`` implementation the family's autograd Function dispatches to.

Forward: the torch chunked forward (its ctx holds exactly the operands K1 reads). Backward: the torch chunked
backward with its K1 (``reverse_state_scan``) replaced by the native CuTe DSL kernel on CUDA float32; K2 and the
elementwise tail stay in torch. float64 inputs (the oracle-precision check) and CPU tensors keep the torch scan,
because the native kernel is a float32 GPU kernel.

Hook for :mod:`kernels.gdn.autograd` (owned by another engineer)::

    from kernels.gdn.native.backend import register; register()

which puts :data:`NATIVE` under ``NATIVE_BACKENDS["default"]``.
"""

from __future__ import annotations

import torch

from .. import chunked


class NativeGDN:
    """forward/backward pair with the signature ``ChunkGDNFunction`` expects of a native backend."""

    name = "native-cute-k1"

    @staticmethod
    def forward(q, k, v, g, b, w, scale, chunk, initial_state):
        return chunked.chunk_fwd(q, k, v, g, b, w, scale, chunk, initial_state)

    @staticmethod
    def backward(do, saved, dS_final):
        if not do.is_cuda or saved["qc"].dtype != torch.float32:
            return chunked.chunk_bwd(do, saved, dS_final)
        from .api import native_reverse_state_scan

        return chunked.chunk_bwd(do, saved, dS_final, scan=native_reverse_state_scan)


NATIVE = NativeGDN()


def register() -> None:
    """Make ``chunk_family(..., backend="native")`` use this backend."""
    from ..autograd import NATIVE_BACKENDS

    NATIVE_BACKENDS["default"] = NATIVE
