"""C6 ``fused_block_backward``: every input gradient of the fused block (equations in :mod:`.reference`).

``fused_block_backward(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, dout, eps=1e-6, chunk=64,
saved=None, backend="auto", num_warps=4, exact_norm=True)`` returns ``(dx, dconv_weight, dconv_bias, ddelta, dA,
dB, dC, dD, dnorm_weight)`` in their tensors' dtypes and shapes (None for an absent optional input). ``saved`` is
what ``fused_block_forward(..., return_saved=True)`` returned; without it the forward is rerun. ``"reference"`` is
autograd through the float64 oracle. The same channel guards as the forward apply.

With the norm, narrower inputs are computed in float64 by default (``exact_norm=True``): the inputs are widened
exactly, the forward's y, r and checkpoints are recomputed in float64 (``saved`` is then not read) and only the
nine results are rounded to their dtypes. The reason is the RMSNorm's scale invariance: its backward makes dy
orthogonal to y (up to eps), so wherever the direction of y does not depend on a parameter -- time-constant
inputs, or a block at D = 1 whose scan part is small -- that parameter's exact gradient (dB first of all) is a sum
over channels that cancels to almost nothing. Any float32 evaluation leaves rounding of the size of the terms
there: y read from a float32 forward is already off its direction by about the unit roundoff. In float64 that
residue is 2^-29 of float32's, below the result's own rounding. ``exact_norm=False`` keeps the float32 arithmetic
(and uses the saved forward state): accurate to the size of the terms, not of the result.

``scan_mode`` (``"serial"`` or ``"chunk_parallel"``, as the forward's) is the Triton launch shape: one program per
sequence walking every chunk from the last, or the adjoint scan split like the forward (each chunk's local reverse
carry side by side, the carry over chunks from the last, then every (channel block, chunk) program's gradients from
its carried-in adjoint and its forward checkpoint). It also picks the forward form wherever the forward is rerun.
The torch path's backward has one form (the chunk restarts from the checkpoints, in either mode).
"""

from __future__ import annotations

import torch

from .._common import MambaShapeError, check_block, conv_weight_2d, resolve_backend
from ..fused_block_forward import check_block_scan_mode


def fused_block_backward(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, dout, eps: float = 1e-6,
                         chunk: int = 64, saved=None, backend: str = "auto", num_warps: int = 4,
                         block_d: int | None = None, exact_norm: bool = True, scan_mode: str = "serial"):
    """Run the fused block backward on the chosen backend (see the module docstring)."""
    b, L, d, n, _ = check_block(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, "fused_block_backward")
    check_block_scan_mode(scan_mode, "fused_block_backward")
    if chunk < 1:
        raise ValueError(f"fused_block_backward: chunk must be >= 1, got {chunk}")
    if tuple(dout.shape) != (b, L, d):
        raise MambaShapeError(f"fused_block_backward: dout has shape {tuple(dout.shape)}, expected {(b, L, d)}")
    backend = resolve_backend(backend, x)
    ins = (x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight)
    if backend == "reference":
        from .reference import fused_block_grads_ref

        f = lambda t: None if t is None else t.double()
        return fused_block_grads_ref(*(f(t) for t in ins), f(dout), eps)
    want = (b, -(-L // chunk), d, n)
    if saved is not None and tuple(saved["ckpt"].shape) != want:
        # checked even where saved is not read: state from another chunk size is the caller's error either way
        raise MambaShapeError(f"fused_block_backward: saved checkpoints have shape {tuple(saved['ckpt'].shape)}, "
                              f"expected {want} (chunk={chunk})")
    if exact_norm and norm_weight is not None and x.dtype != torch.float64:
        # widening is exact; the float64 call recomputes its own forward state (see the module docstring)
        f = lambda t: None if t is None else t.to(torch.float64)
        grads = fused_block_backward(*(f(t) for t in ins), f(dout), eps=eps, chunk=chunk, backend=backend,
                                     num_warps=num_warps, block_d=block_d, exact_norm=False, scan_mode=scan_mode)
        return tuple(None if g is None else g.to(t.dtype) for g, t in zip(grads, ins, strict=True))
    if saved is None:
        from ..fused_block_forward import fused_block_forward

        saved = fused_block_forward(*ins, eps=eps, chunk=chunk, backend=backend, num_warps=num_warps,
                                    block_d=block_d, return_saved=True, scan_mode=scan_mode)[1]
    if backend == "torch":
        from .torch_path import block_bwd

        return block_bwd(*ins, dout, saved, chunk)
    from .triton_path import block_bwd

    grads = block_bwd(x, conv_weight_2d(conv_weight, "fused_block_backward"), conv_bias, delta, A, B, C, D,
                      norm_weight, dout, saved, chunk, num_warps=num_warps, block_d=block_d, scan_mode=scan_mode)
    dw = grads[1].reshape(conv_weight.shape).to(conv_weight.dtype)
    return (grads[0], dw, *grads[2:])


__all__ = ["fused_block_backward"]
