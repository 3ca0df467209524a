"""C6 ``fused_block_backward``: every input gradient of the fused block (equations in :mod:`.reference`).

``fused_block_backward(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, dout, eps=1e-6, chunk=64,
saved=None, backend="auto", num_warps=4)`` returns ``(dx, dconv_weight, dconv_bias, ddelta, dA, dB, dC, dD,
dnorm_weight)`` in their tensors' dtypes and shapes (None for an absent optional input). ``saved`` is what
``fused_block_forward(..., return_saved=True)`` returned; without it the forward is rerun. ``"reference"`` is
autograd through the float64 oracle. The same channel guards as the forward apply.
"""

from __future__ import annotations

from .._common import MambaShapeError, check_block, conv_weight_2d, resolve_backend


def fused_block_backward(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, dout, eps: float = 1e-6,
                         chunk: int = 64, saved=None, backend: str = "auto", num_warps: int = 4,
                         block_d: int | None = None):
    """Run the fused block backward on the chosen backend (see the module docstring)."""
    b, L, d, n, _ = check_block(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, "fused_block_backward")
    if tuple(dout.shape) != (b, L, d):
        raise MambaShapeError(f"fused_block_backward: dout has shape {tuple(dout.shape)}, expected {(b, L, d)}")
    backend = resolve_backend(backend, x)
    ins = (x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight)
    if backend == "reference":
        from .reference import fused_block_grads_ref

        f = lambda t: None if t is None else t.double()
        return fused_block_grads_ref(*(f(t) for t in ins), f(dout), eps)
    if saved is None:
        from ..fused_block_forward import fused_block_forward

        saved = fused_block_forward(*ins, eps=eps, chunk=chunk, backend=backend, num_warps=num_warps,
                                    block_d=block_d, return_saved=True)[1]
    want = (b, -(-L // chunk), d, n)
    if tuple(saved["ckpt"].shape) != want:
        raise MambaShapeError(f"fused_block_backward: saved checkpoints have shape {tuple(saved['ckpt'].shape)}, "
                              f"expected {want} (chunk={chunk})")
    if backend == "torch":
        from .torch_path import block_bwd

        return block_bwd(*ins, dout, saved, chunk)
    from .triton_path import block_bwd

    grads = block_bwd(x, conv_weight_2d(conv_weight, "fused_block_backward"), conv_bias, delta, A, B, C, D,
                      norm_weight, dout, saved, chunk, num_warps=num_warps, block_d=block_d)
    dw = grads[1].reshape(conv_weight.shape).to(conv_weight.dtype)
    return (grads[0], dw, *grads[2:])


__all__ = ["fused_block_backward"]
