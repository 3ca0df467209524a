"""autograd.Function wiring of the forward/backward pairs: C1 + C2 as :func:`selective_scan`, C5 + C6 as
:func:`fused_block` (the forward saves its chunk checkpoints; the backward restarts from them), the portable MIMO
forward + C3 as :func:`mimo_scan`."""

from __future__ import annotations

import torch

from ._common import check_block, check_scan, resolve_backend
from .backward_selective_scan import backward_selective_scan
from .forward_chunked_scan import forward_chunked_scan
from .fused_block_backward import fused_block_backward
from .fused_block_forward import fused_block_forward
from .mimo_backward import check_mimo, mimo_backward, mimo_forward


class SelectiveScanFunction(torch.autograd.Function):
    """y = selective_scan(u, delta, A, B, C, D) with the chunked forward (C1) and the explicit backward (C2)."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, chunk, backend, num_warps, block_d, scan_mode):
        y, ckpt, _ = forward_chunked_scan(u, delta, A, B, C, D, chunk=chunk, backend=backend, num_warps=num_warps,
                                          block_d=block_d, return_checkpoints=True, scan_mode=scan_mode)
        ctx.save_for_backward(u, delta, A, B, C, D, ckpt)
        ctx.cfg = (chunk, backend, num_warps, block_d)
        return y

    @staticmethod
    def backward(ctx, dy):
        u, delta, A, B, C, D, ckpt = ctx.saved_tensors
        chunk, backend, num_warps, block_d = ctx.cfg
        grads = backward_selective_scan(u, delta, A, B, C, D, dy, chunk=chunk, checkpoints=ckpt, backend=backend,
                                        num_warps=num_warps, block_d=block_d)
        return (*grads, None, None, None, None, None)


def selective_scan(u, delta, A, B, C, D=None, chunk: int = 64, backend: str = "auto", num_warps: int = 4,
                   block_d: int | None = None, scan_mode: str = "serial"):
    """The differentiable selective scan: y ``[batch, L, d_model]`` in u's dtype; gradients reach u, delta, A, B, C
    and D. ``backend="reference"`` is the float64 oracle itself (differentiated by autograd); ``scan_mode`` picks the
    forward's form (both give the checkpoints the backward restarts from)."""
    check_scan(u, delta, A, B, C, D, "selective_scan")
    backend = resolve_backend(backend, u)
    if backend == "reference":
        from .forward_chunked_scan.reference import selective_scan_ref

        return selective_scan_ref(u, delta, A, B, C, D)
    return SelectiveScanFunction.apply(u, delta, A, B, C, D, chunk, backend, num_warps, block_d, scan_mode)


class FusedBlockFunction(torch.autograd.Function):
    """out = fused_block(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight) with C5 forward and C6 backward;
    the forward's pre-norm y, rstd and scan checkpoints are kept for the backward."""

    @staticmethod
    def forward(ctx, x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, eps, chunk, backend, num_warps,
                block_d, scan_mode):
        out, saved = fused_block_forward(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, eps=eps,
                                         chunk=chunk, backend=backend, num_warps=num_warps, block_d=block_d,
                                         return_saved=True, scan_mode=scan_mode)
        ctx.save_for_backward(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight)
        ctx.saved = saved
        ctx.cfg = (eps, chunk, backend, num_warps, block_d, scan_mode)
        return out

    @staticmethod
    def backward(ctx, dout):
        eps, chunk, backend, num_warps, block_d, scan_mode = ctx.cfg
        grads = fused_block_backward(*ctx.saved_tensors, dout, eps=eps, chunk=chunk, saved=ctx.saved,
                                     backend=backend, num_warps=num_warps, block_d=block_d, scan_mode=scan_mode)
        ctx.saved = None
        return (*grads, None, None, None, None, None, None)


def fused_block(x, conv_weight, conv_bias, delta, A, B, C, D=None, norm_weight=None, eps: float = 1e-6,
                chunk: int = 64, backend: str = "auto", num_warps: int = 4, block_d: int | None = None,
                scan_mode: str = "serial"):
    """The differentiable fused block (conv1d, SiLU, selective scan, RMSNorm); out ``[batch, L, d_model]`` in x's
    dtype. ``backend="reference"`` is the float64 oracle itself; ``scan_mode`` is the launch shape of both the
    forward and the backward (``fused_block_forward``)."""
    check_block(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, "fused_block")
    backend = resolve_backend(backend, x)
    if backend == "reference":
        from .fused_block_forward.reference import fused_block_ref

        return fused_block_ref(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, eps)
    return FusedBlockFunction.apply(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, eps, chunk, backend,
                                    num_warps, block_d, scan_mode)


class MimoScanFunction(torch.autograd.Function):
    """y = mimo_scan(x, dt, alpha, B, C, mimo_x, mimo_o): the portable forward, the C3 backward (which reruns the
    forward's states itself)."""

    @staticmethod
    def forward(ctx, x, dt, alpha, B, C, mimo_x, mimo_o, chunk, backend, num_warps):
        ctx.save_for_backward(x, dt, alpha, B, C, mimo_x, mimo_o)
        ctx.cfg = (chunk, backend, num_warps)
        return mimo_forward(x, dt, alpha, B, C, mimo_x, mimo_o, backend="torch")

    @staticmethod
    def backward(ctx, dy):
        chunk, backend, num_warps = ctx.cfg
        grads = mimo_backward(*ctx.saved_tensors, dy, chunk=chunk, backend=backend, num_warps=num_warps)
        return (*grads, None, None, None)


def mimo_scan(x, dt, alpha, B, C, mimo_x, mimo_o, chunk: int = 64, backend: str = "auto", num_warps: int = 4):
    """The differentiable MIMO scan; ``backend`` picks the backward ("reference" differentiates the oracle)."""
    check_mimo(x, dt, alpha, B, C, mimo_x, mimo_o, "mimo_scan")
    backend = resolve_backend(backend, x)
    if backend == "reference":
        from .mimo_backward.reference import mimo_scan_ref

        return mimo_scan_ref(x, dt, alpha, B, C, mimo_x, mimo_o)
    return MimoScanFunction.apply(x, dt, alpha, B, C, mimo_x, mimo_o, chunk, backend, num_warps)
