"""The ``backend="native"`` implementation the family's autograd Function dispatches to.

Forward: the torch chunked forward (its ctx holds exactly the operands K1 and K2 read). Backward: the torch
chunked backward with K1 (``reverse_state_scan``) and K2 (``wy_vjp_torch``, the WY / triangular-inverse VJP)
replaced by the native CuTe DSL kernels on CUDA float32; the pairwise-decay VJP and the elementwise tail stay in
torch. float64 inputs (the oracle-precision check) and CPU tensors keep the torch code, because the native
kernels are float32 GPU kernels.

``HybridGDN`` (``backend="hybrid"``) keeps the Triton forward and intra-chunk backward and swaps in the native K1;
``HybridTensorCoreGDN`` (``backend="hybrid-tc"``) swaps in the tensor-core K1 for bf16 inputs and fuses the
backward's tail.

Registered into the leaf registry :mod:`lethe.kernels.gdn.backends` (which :mod:`lethe.kernels.gdn.autograd` reads;
this module never imports autograd)::

    from lethe.kernels.gdn.native.backend import register; register()

which puts :data:`NATIVE` under ``NATIVE_BACKENDS["default"]``.
"""

from __future__ import annotations

import functools

import torch

from .. import chunked
from ..fwd_options import DOT_PRECISION_DEFAULT, OUTPUT_PRECISION_DEFAULT, WY_INVERSE_DEFAULT


def _require_hopper(device) -> None:
    """The explicitly native backends refuse, with the reason, a GPU their sm_90a kernels were not built for
    (``hybrid-tc`` falls back to the Triton scan instead)."""
    from . import hopper_native_ok

    why = hopper_native_ok(device)
    if why is not None:
        raise RuntimeError(f"native GDN backward unavailable: {why}")


class NativeGDN:
    """forward/backward pair with the signature ``ChunkGDNFunction`` expects of a native backend."""

    name = "native-cute-k1k2"

    @staticmethod
    def forward(q, k, v, g, b, w, scale, chunk, initial_state):
        from ..triton_fwd import check_index_range

        # the CuTe kernels of the backward index the same per-chunk tensors with 32-bit offsets
        check_index_range(q.shape[0], q.shape[2], q.shape[1], q.shape[3], v.shape[3], chunk)
        return chunked.chunk_fwd(q, k, v, g, b, w, scale, chunk, initial_state)

    @staticmethod
    def backward(do, saved, dS_final):
        if not do.is_cuda or saved["qc"].dtype != torch.float32:
            return chunked.chunk_bwd(do, saved, dS_final)
        _require_hopper(do.device)
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
    def forward(q, k, v, g, b, w, scale, chunk, initial_state, dot_precision=DOT_PRECISION_DEFAULT,
                wy_inverse=WY_INVERSE_DEFAULT, output_precision=OUTPUT_PRECISION_DEFAULT):
        from ..triton_fwd import triton_chunk_fwd

        return triton_chunk_fwd(q, k, v, g, b, w, scale, chunk, initial_state, dot_precision, wy_inverse=wy_inverse,
                                output_precision=output_precision)

    @staticmethod
    def backward(do, saved, dS_final):
        from ..triton_bwd import triton_chunk_bwd
        from .api import scan_for_triton_ctx

        scan = scan_for_triton_ctx if saved["qi"].is_cuda else None
        if scan is not None:
            _require_hopper(saved["qi"].device)
        return triton_chunk_bwd(do, saved, dS_final, scan=scan)


HYBRID = HybridGDN()


class HybridTensorCoreGDN:
    """``backend="hybrid-tc"``: the Triton forward and intra-chunk backward, K1 on Hopper tensor cores
    (:mod:`.k1_hopper_wgmma`, operands from one Triton kernel, :mod:`.k1_operands`) and the backward's tail in
    one Triton kernel (``fused_tail``).

    Precision contract: K1 runs on bf16 tensor cores with fp32 accumulation and dS in fp32 throughout; dO enters
    in bf16 (exact for bf16 inputs), P and Qg as bf16 hi/lo pairs (about 16 bits; their single rounding put 3 of
    14 bf16 ladder arms past the 5e-3 pin), Kend, W and the per-chunk dS / dd copies in bf16. So the tensor-core
    K1 serves bf16 inputs only; float32 and fp16 inputs get the float32 SIMT K1 (:class:`HybridGDN`'s), and so
    do shapes the wgmma kernel is not written for (d_k != 128, chunk != 64, d_v not 64/128). On CPU tensors, on a
    GPU other than sm_90 or without the CuTe DSL, the Triton scan runs (``k1_choice`` says which)."""

    name = "hybrid-triton-wgmma-k1"
    split_k1_operands = True  # P and Qg as bf16 hi/lo pairs (see the precision contract)
    forward = staticmethod(HybridGDN.forward)

    @staticmethod
    def k1_choice(saved) -> str:
        """Which K1 the backward of ``saved`` runs: "wgmma", "simt", or "triton" (CPU tensors, or a GPU the
        sm_90a kernels were not built for, or no CuTe DSL)."""
        from . import hopper_native_ok
        from .api import wgmma_supported

        if not saved["qi"].is_cuda or hopper_native_ok(saved["qi"].device) is not None:
            return "triton"
        K, V = saved["qi"].shape[-1], saved["ui"].shape[-1]
        # bf16 only: the kernel reads dO in bf16, exact for a bf16 model and a rounding for an fp16 one
        bf16 = saved["dtype"] == torch.bfloat16
        return "wgmma" if bf16 and wgmma_supported(K, V, saved["C"]) else "simt"

    @staticmethod
    def backward(do, saved, dS_final):
        from ..triton_bwd import triton_chunk_bwd
        from .api import scan_for_triton_ctx, wgmma_scan_for_triton_ctx

        choice = HybridTensorCoreGDN.k1_choice(saved)
        saved["bwd_k1"] = choice  # which K1 ran, for whoever reports on this backward
        scan = {"triton": None, "simt": scan_for_triton_ctx,
                "wgmma": functools.partial(wgmma_scan_for_triton_ctx, split=HybridTensorCoreGDN.split_k1_operands)
                }[choice]
        return triton_chunk_bwd(do, saved, dS_final, scan=scan, fused_tail=True)


HYBRID_TC = HybridTensorCoreGDN()


def register() -> None:
    """Make ``chunk_family(..., backend="native")``, ``"hybrid"`` and ``"hybrid-tc"`` use these backends."""
    from ..backends import register as put

    put("default", NATIVE)
    put("hybrid", HYBRID)
    put("hybrid-tc", HYBRID_TC)
