"""C1 ``forward_chunked_scan``: the Mamba-1 selective scan forward, chunked (equations in :mod:`.reference`).

``forward_chunked_scan(u, delta, A, B, C, D=None, chunk=64, backend="auto", num_warps=4)`` returns y
``[batch, L, d_model]`` in u's dtype; with ``return_checkpoints=True`` it returns ``(y, checkpoints, h_last)``,
the float32 states at every chunk start (what the backward restarts from) and after the last step. Backends:
``"reference"`` (float64 oracle; y in float64), ``"torch"`` (portable), ``"triton"`` (CUDA, or the CPU interpreter
under ``TRITON_INTERPRET=1``), ``"auto"`` (Triton where it can run, torch otherwise). ``scan_mode`` picks the
serial walk or the chunk-parallel form (:data:`SCAN_MODES`; the reference ignores it), or ``"auto"``: the shape rule
:func:`lethe.kernels.mamba.tuning.select_scan_mode` on the device's SM count. Both forms give the same checkpoints,
so either feeds the backward. The default stays ``"serial"`` until an H200 measurement says the rule is faster.
``num_warps`` and ``block_d`` (channels per program; None: the Triton path's 2048-state rule) are the other launch
knobs (:mod:`lethe.kernels.mamba.tuning` names the searched space).
"""

from __future__ import annotations

import torch

from .._common import check_scan, resolve_backend
# "serial": one program walks all of time per channel block; "chunk_parallel": the chunks are scanned side by
# side from zero states, then a carry pass and a fix-up (three launches). Same results up to rounding.
from ..tuning import SCAN_MODES, device_sm_count, select_scan_mode


def forward_chunked_scan(u, delta, A, B, C, D=None, chunk: int = 64, backend: str = "auto", num_warps: int = 4,
                         block_d: int | None = None, return_checkpoints: bool = False, scan_mode: str = "serial"):
    """Run the chunked selective-scan forward on the chosen backend (see the module docstring)."""
    check_scan(u, delta, A, B, C, D, "forward_chunked_scan")
    if chunk < 1:
        raise ValueError(f"forward_chunked_scan: chunk must be >= 1, got {chunk}")
    if scan_mode == "auto":
        b, L, d, n = u.shape[0], u.shape[1], A.shape[0], A.shape[1]
        scan_mode = select_scan_mode(b, L, d, n, device_sm_count(u.device))
    if scan_mode not in SCAN_MODES:
        raise ValueError(f"forward_chunked_scan: scan_mode must be one of {SCAN_MODES} or 'auto', got {scan_mode!r}")
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
        from .torch_path import scan_fwd, scan_fwd_chunk_parallel

        fwd = scan_fwd if scan_mode == "serial" else scan_fwd_chunk_parallel
        out = fwd(u, delta, A, B, C, D, chunk)
    else:
        from .triton_path import scan_fwd, scan_fwd_chunk_parallel

        fwd = scan_fwd if scan_mode == "serial" else scan_fwd_chunk_parallel
        out = fwd(u, delta, A, B, C, D, chunk, num_warps=num_warps, block_d=block_d)
    return out if return_checkpoints else out[0]


__all__ = ["SCAN_MODES", "forward_chunked_scan"]
