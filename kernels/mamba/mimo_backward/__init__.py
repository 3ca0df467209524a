"""C3 ``mimo_backward``: every input gradient of the Mamba-3 MIMO (rank R) scan (equations in :mod:`.reference`).

``mimo_backward(x, dt, alpha, B, C, mimo_x, mimo_o, dy, chunk=64, backend="auto", num_warps=4)`` returns
``(dx, ddt, dalpha, dB, dC, dmimo_x, dmimo_o)`` in their tensors' dtypes; the Triton kernel reruns the forward
itself (no saved state). ``mimo_forward`` gives y on the reference and torch backends (the records benchmark only
the backward); ``"reference"`` backward is autograd through the float64 oracle.
"""

from __future__ import annotations

from .._common import MambaShapeError, resolve_backend


def check_mimo(x, dt, alpha, B, C, mimo_x, mimo_o, op: str = "mimo_backward"):
    """Shapes of the MIMO scan; returns (batch, L, H, P, R, N). H comes from alpha, R and P from the weights."""
    if x.dim() != 4 or alpha.dim() != 1 or mimo_x.dim() != 3:
        raise MambaShapeError(f"{op}: x [batch, L, H, P], alpha [H], mimo_x [H, R, P] expected, got "
                              f"{tuple(x.shape)}, {tuple(alpha.shape)}, {tuple(mimo_x.shape)}")
    b, L, H, P = x.shape
    if alpha.shape[0] != H:
        raise MambaShapeError(f"{op}: x has {H} heads but alpha has {alpha.shape[0]}")
    Hw, R, Pw = mimo_x.shape
    if (Hw, Pw) != (H, P):
        raise MambaShapeError(f"{op}: mimo_x is {tuple(mimo_x.shape)} but x has {H} heads of width {P}")
    if tuple(mimo_o.shape) != tuple(mimo_x.shape):
        raise MambaShapeError(f"{op}: mimo_o has shape {tuple(mimo_o.shape)}, expected {tuple(mimo_x.shape)}")
    if tuple(dt.shape) != (b, L, H):
        raise MambaShapeError(f"{op}: dt has shape {tuple(dt.shape)}, expected {(b, L, H)}")
    if B.dim() != 5 or tuple(B.shape[:4]) != (b, L, H, R):
        raise MambaShapeError(f"{op}: B has shape {tuple(B.shape)}, expected {(b, L, H, R)} + (n_state,)")
    if tuple(C.shape) != tuple(B.shape):
        raise MambaShapeError(f"{op}: C has shape {tuple(C.shape)}, expected B's {tuple(B.shape)}")
    return b, L, H, P, R, B.shape[-1]


def mimo_forward(x, dt, alpha, B, C, mimo_x, mimo_o, backend: str = "torch"):
    """y ``[batch, L, H, P]`` on the reference (float64) or the portable torch path."""
    check_mimo(x, dt, alpha, B, C, mimo_x, mimo_o, "mimo_forward")
    if backend == "reference":
        from .reference import mimo_scan_ref

        return mimo_scan_ref(*(t.double() for t in (x, dt, alpha, B, C, mimo_x, mimo_o)))
    if backend != "torch":
        raise ValueError(f"mimo_forward runs on 'reference' or 'torch', not {backend!r}")
    from .torch_path import mimo_fwd

    return mimo_fwd(x, dt, alpha, B, C, mimo_x, mimo_o)


def mimo_backward(x, dt, alpha, B, C, mimo_x, mimo_o, dy, chunk: int = 64, backend: str = "auto",
                  num_warps: int = 4, block_p: int | None = None):
    """Run the MIMO scan's backward on the chosen backend (see the module docstring)."""
    b, L, H, P, _, _ = check_mimo(x, dt, alpha, B, C, mimo_x, mimo_o)
    if tuple(dy.shape) != (b, L, H, P):
        raise MambaShapeError(f"mimo_backward: dy has shape {tuple(dy.shape)}, expected {(b, L, H, P)}")
    if chunk < 1:
        raise ValueError(f"mimo_backward: chunk must be >= 1, got {chunk}")
    backend = resolve_backend(backend, x)
    ins = (x, dt, alpha, B, C, mimo_x, mimo_o, dy)
    if backend == "reference":
        from .reference import mimo_scan_grads_ref

        return mimo_scan_grads_ref(*(t.double() for t in ins))
    if backend == "torch":
        from .torch_path import mimo_bwd

        return mimo_bwd(*ins)
    from .triton_path import mimo_bwd

    return mimo_bwd(*ins, chunk=chunk, num_warps=num_warps, block_p=block_p)


__all__ = ["mimo_backward", "mimo_forward"]
