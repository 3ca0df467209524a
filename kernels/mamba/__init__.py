"""The Mamba arm (issue 26): the selective scan and the fused block, each op in its own folder beside its float64
reference, with one chooser per op (docs/mamba.md).

* C1 :func:`forward_chunked_scan`, C2 :func:`backward_selective_scan`, and :func:`selective_scan` (both wired into
  one autograd.Function);
* C3 :func:`mimo_backward` (with :func:`mimo_forward` on the reference and torch paths);
* C4 :func:`complex_scan_rope` (forward);
* C5 :func:`fused_block_forward`, C6 :func:`fused_block_backward`, and :func:`fused_block` (autograd).

Each chooser has the name of its folder; importing it here binds the name to the function, not the sub-package
(the sub-packages stay importable by their full dotted path). Triton is imported only when a Triton path runs.
"""

from ._common import BACKENDS, MambaShapeError
from .autograd import fused_block, mimo_scan, selective_scan  # noqa: I001 - first: it loads the op sub-packages the lines below rebind
from .backward_selective_scan import backward_selective_scan
from .complex_scan_rope import complex_scan_rope
from .forward_chunked_scan import forward_chunked_scan
from .fused_block_backward import fused_block_backward
from .fused_block_forward import fused_block_forward
from .mimo_backward import mimo_backward, mimo_forward

__all__ = ["BACKENDS", "MambaShapeError", "backward_selective_scan", "complex_scan_rope", "forward_chunked_scan", "fused_block",
           "fused_block_backward", "fused_block_forward", "mimo_backward", "mimo_forward", "mimo_scan", "selective_scan"]
