"""C5 ``fused_block_forward``: causal depthwise conv1d, SiLU, the selective scan and RMSNorm in one launch
(equations in :mod:`.reference`).

``fused_block_forward(x, conv_weight, conv_bias, delta, A, B, C, D=None, norm_weight=None, eps=1e-6, chunk=64,
backend="auto", num_warps=4)`` returns out ``[batch, L, d_model]`` in x's dtype, where ``x`` is
``[batch, L + K - 1, d_model]`` (K - 1 rows of causal history first) and ``conv_weight`` ``[d_model, K]`` or
``[d_model, 1, K]``. ``return_saved=True`` also returns what the backward reuses (pre-norm y, rstd, scan
checkpoints). The channel count is the weight's; an x, delta, A, D or norm_weight that disagrees is refused with
:class:`lethe.kernels.mamba.MambaShapeError` before anything runs.

``scan_mode`` (:data:`BLOCK_SCAN_MODES`) is the launch shape: ``"serial"``, one program per sequence walking every
channel block through all of time; ``"chunk_parallel"``, C1's chunk-parallel form (local scans of every chunk side
by side with the conv + SiLU made in them, a carry over chunk states, a fix-up) and the norm as its own launch. Both
store the same saved state (the chunk-start checkpoints included), so either feeds either backward. The torch path
runs C1's matching torch form; the reference ignores the mode. There is no ``"auto"`` here: C1's rule was read off
C1's records, and nothing has measured where the block's modes cross over.
"""

from __future__ import annotations

from .._common import check_block, conv_weight_2d, resolve_backend
from ..tuning import SCAN_MODES as BLOCK_SCAN_MODES


def check_block_scan_mode(scan_mode: str, op: str) -> None:
    """The fused block's launch shapes are C1's two; anything else (``"auto"`` included) is refused."""
    if scan_mode not in BLOCK_SCAN_MODES:
        raise ValueError(f"{op}: scan_mode must be one of {BLOCK_SCAN_MODES}, got {scan_mode!r}")


def fused_block_forward(x, conv_weight, conv_bias, delta, A, B, C, D=None, norm_weight=None, eps: float = 1e-6,
                        chunk: int = 64, backend: str = "auto", num_warps: int = 4, block_d: int | None = None,
                        return_saved: bool = False, scan_mode: str = "serial"):
    """Run the fused block forward on the chosen backend (see the module docstring)."""
    check_block(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, "fused_block_forward")
    if chunk < 1:
        raise ValueError(f"fused_block_forward: chunk must be >= 1, got {chunk}")
    check_block_scan_mode(scan_mode, "fused_block_forward")
    backend = resolve_backend(backend, x)
    if backend == "reference":
        from .reference import fused_block_ref

        f = lambda t: None if t is None else t.double()
        out = fused_block_ref(*(f(t) for t in (x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight)), eps)
        return (out, None) if return_saved else out
    if backend == "torch":
        from .torch_path import block_fwd

        out, saved = block_fwd(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, eps, chunk,
                               scan_mode=scan_mode)
    else:
        from .triton_path import block_fwd, block_fwd_chunk_parallel

        fwd = block_fwd if scan_mode == "serial" else block_fwd_chunk_parallel
        out, saved = fwd(x, conv_weight_2d(conv_weight, "fused_block_forward"), conv_bias, delta, A, B, C, D,
                         norm_weight, eps, chunk, num_warps=num_warps, block_d=block_d)
    return (out, saved) if return_saved else out


__all__ = ["BLOCK_SCAN_MODES", "check_block_scan_mode", "fused_block_forward"]
