"""C4 ``complex_scan_rope``: the Mamba-3 complex-valued state scan, as rotations of state-row pairs by
data-dependent angles (equations in :mod:`.reference`).

``complex_scan_rope(x, dt, A, B, C, theta, chunk=64, backend="auto", num_warps=4)`` returns y
``[batch, L, H, P]`` in x's dtype. Backends as for :func:`lethe.kernels.mamba.forward_chunked_scan`. Forward only
(the records benchmark C4's forward).
"""

from __future__ import annotations

from .._common import MambaShapeError, resolve_backend


def check_rope_scan(x, dt, A, B, C, theta, op: str = "complex_scan_rope"):
    """Shapes of the rotary scan; returns (batch, L, H, P, N, S). H comes from A (one decay per head)."""
    if x.dim() != 4:
        raise MambaShapeError(f"{op}: x must be [batch, L, H, P], got {tuple(x.shape)}")
    if A.dim() != 1:
        raise MambaShapeError(f"{op}: A must be [H] (one decay per head), got {tuple(A.shape)}")
    b, L, H, P = x.shape
    if H != A.shape[0]:
        raise MambaShapeError(f"{op}: x has {H} heads but A has {A.shape[0]}")
    if tuple(dt.shape) != (b, L, H):
        raise MambaShapeError(f"{op}: dt has shape {tuple(dt.shape)}, expected {(b, L, H)}")
    if B.dim() != 4 or tuple(B.shape[:3]) != (b, L, H):
        raise MambaShapeError(f"{op}: B has shape {tuple(B.shape)}, expected {(b, L, H)} + (n_state,)")
    N = B.shape[-1]
    if tuple(C.shape) != tuple(B.shape):
        raise MambaShapeError(f"{op}: C has shape {tuple(C.shape)}, expected B's {tuple(B.shape)}")
    if theta.dim() != 4 or tuple(theta.shape[:3]) != (b, L, H):
        raise MambaShapeError(f"{op}: theta has shape {tuple(theta.shape)}, expected {(b, L, H)} + (num_angles,)")
    S = theta.shape[-1]
    if 2 * S > N:
        raise MambaShapeError(f"{op}: {S} angles rotate {2 * S} state rows, more than n_state={N}")
    return b, L, H, P, N, S


def complex_scan_rope(x, dt, A, B, C, theta, chunk: int = 64, backend: str = "auto", num_warps: int = 4,
                      block_p: int | None = None):
    """Run the rotary state scan on the chosen backend (see the module docstring)."""
    check_rope_scan(x, dt, A, B, C, theta)
    if chunk < 1:
        raise ValueError(f"complex_scan_rope: chunk must be >= 1, got {chunk}")
    backend = resolve_backend(backend, x)
    if backend == "reference":
        from .reference import complex_scan_rope_ref

        return complex_scan_rope_ref(*(t.double() for t in (x, dt, A, B, C, theta)))
    if backend == "torch":
        from .torch_path import rope_scan_fwd

        return rope_scan_fwd(x, dt, A, B, C, theta)
    from .triton_path import rope_scan_fwd

    return rope_scan_fwd(x, dt, A, B, C, theta, chunk=chunk, num_warps=num_warps, block_p=block_p)


__all__ = ["complex_scan_rope"]
