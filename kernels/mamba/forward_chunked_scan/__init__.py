"""C1 ``forward_chunked_scan``: the Mamba-1 selective scan forward, chunked (equations in :mod:`.reference`).

``forward_chunked_scan(u, delta, A, B, C, D=None, chunk=64, backend="auto", num_warps=4)`` returns y
``[batch, L, d_model]`` in u's dtype; with ``return_checkpoints=True`` it returns ``(y, checkpoints, h_last)``,
the float32 states at every chunk start (what the backward restarts from) and after the last step. Backends:
``"reference"`` (float64 oracle; y in float64), ``"torch"`` (portable), ``"triton"`` (CUDA, or the CPU interpreter
under ``TRITON_INTERPRET=1``), ``"auto"`` (Triton where it can run, torch otherwise).
"""

from __future__ import annotations

import torch

from .._common import check_scan, resolve_backend


def forward_chunked_scan(u, delta, A, B, C, D=None, chunk: int = 64, backend: str = "auto", num_warps: int = 4,
                         block_d: int | None = None, return_checkpoints: bool = False):
    """Run the chunked selective-scan forward on the chosen backend (see the module docstring)."""
    check_scan(u, delta, A, B, C, D, "forward_chunked_scan")
    if chunk < 1:
        raise ValueError(f"forward_chunked_scan: chunk must be >= 1, got {chunk}")
    backend = resolve_backend(backend, u)
    if backend == "reference":
        from .reference import selective_scan_ref

        f = lambda x: None if x is None else x.double()
        y, hs = selective_scan_ref(*(f(x) for x in (u, delta, A, B, C, D)), return_states=True)
        if not return_checkpoints:
            return y
        # checkpoint c is the state before step c * chunk: h_{-1} = 0, then h_{chunk-1}, h_{2 chunk-1}, ...
        before = torch.cat([torch.zeros_like(hs[:, :1]), hs[:, :-1]], 1)
        return y, before[:, ::chunk].clone(), hs[:, -1]
    if backend == "torch":
        from .torch_path import scan_fwd

        out = scan_fwd(u, delta, A, B, C, D, chunk)
    else:
        from .triton_path import scan_fwd

        out = scan_fwd(u, delta, A, B, C, D, chunk, num_warps=num_warps, block_d=block_d)
    return out if return_checkpoints else out[0]


__all__ = ["forward_chunked_scan"]
