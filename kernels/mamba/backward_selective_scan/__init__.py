"""C2 ``backward_selective_scan``: every input gradient of the selective scan (u, delta, A, B, C, D), equations
in :mod:`.reference`.

``backward_selective_scan(u, delta, A, B, C, D, dy, chunk=64, checkpoints=None, backend="auto", num_warps=4)``
returns ``(du, ddelta, dA, dB, dC, dD)`` in their tensors' dtypes (dD None without D). ``checkpoints`` are the
forward's (``forward_chunked_scan(..., return_checkpoints=True)[1]``); without them the forward is rerun to get
them. Backends as for :func:`lethe.kernels.mamba.forward_chunked_scan`; ``"reference"`` is autograd through the
float64 oracle.
"""

from __future__ import annotations

from .._common import MambaShapeError, check_scan, resolve_backend


def backward_selective_scan(u, delta, A, B, C, D, dy, chunk: int = 64, checkpoints=None, backend: str = "auto",
                            num_warps: int = 4, block_d: int | None = None):
    """Run the selective-scan backward on the chosen backend (see the module docstring)."""
    b, L, d, n = check_scan(u, delta, A, B, C, D, "backward_selective_scan")
    if tuple(dy.shape) != (b, L, d):
        raise MambaShapeError(f"backward_selective_scan: dy has shape {tuple(dy.shape)}, expected {(b, L, d)}")
    backend = resolve_backend(backend, u)
    if backend == "reference":
        from .reference import selective_scan_grads_ref

        f = lambda x: None if x is None else x.double()
        return selective_scan_grads_ref(*(f(x) for x in (u, delta, A, B, C, D, dy)))
    if checkpoints is None:
        from ..forward_chunked_scan import forward_chunked_scan

        checkpoints = forward_chunked_scan(u, delta, A, B, C, D, chunk=chunk, backend=backend, num_warps=num_warps,
                                           block_d=block_d, return_checkpoints=True)[1]
    want = (b, -(-L // chunk), d, n)
    if tuple(checkpoints.shape) != want:
        raise MambaShapeError(f"backward_selective_scan: checkpoints have shape {tuple(checkpoints.shape)}, "
                              f"expected {want} (chunk={chunk})")
    if backend == "torch":
        from .torch_path import scan_bwd

        return scan_bwd(u, delta, A, B, C, D, dy, checkpoints, chunk)
    from .triton_path import scan_bwd

    return scan_bwd(u, delta, A, B, C, D, dy, checkpoints, chunk, num_warps=num_warps, block_d=block_d)


__all__ = ["backward_selective_scan"]
