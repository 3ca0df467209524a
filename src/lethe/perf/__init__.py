"""Performance measurement shared by every benchmark: one timing runner (:mod:`.timing`), roofline ceilings and
floors (:mod:`.roofline`), the bounded autotuning of fla's kernels (:mod:`.fla_autotune`) and the budgeted
task loop of a device call (:mod:`.budget`).

Operator-specific counts (FLOPs and bytes of one algorithm) live beside the operator, e.g.
:mod:`lethe.kernels.gdn.bench`; nothing here imports torch at module level, so the renderers can use it.
"""
