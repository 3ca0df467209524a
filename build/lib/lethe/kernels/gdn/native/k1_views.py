"""The operand convention the tensor-core K1 kernels (:mod:`.k1_blackwell_scan`, :mod:`.k1_hopper_wgmma`) share:
which tensors, in which order, stored how, and which strided view of that storage each kernel argument is.

Storage is contiguous and chunk-flattened (chunk l = bh * N + n); a kernel argument is a permutation of it (the
transposed uses -- P^T, Qg^T, Wm^T, dO as an MN-major operand -- are views, never copies). One place for it: the
fake tensors of the ahead-of-time compiles and the host wrapper (:func:`.api.k1_wgmma_launch`) both read it.
DSL-free at import.
"""

from __future__ import annotations

# (name, element kind, storage shape in terms of L, BH, C, K, V, permutation giving the kernel's view)
K1_VIEWS = (
    ("P", "bf16", ("L", "C", "C"), (2, 1, 0)),         # read as P^T (MN-major)
    ("Kend", "bf16", ("L", "C", "K"), (1, 2, 0)),
    ("dO", "bf16", ("L", "C", "V"), (2, 1, 0)),        # MN-major B operand
    ("Qg", "bf16", ("L", "C", "K"), (2, 1, 0)),        # read as Qg^T
    ("Wm", "bf16", ("L", "C", "K"), (2, 1, 0)),        # read as Wm^T
    ("GC", "f32", ("L", "K"), (1, 0)),
    ("dS_final", "f32", ("BH", "K", "V"), (1, 2, 0)),
    ("dS_next", "f32", ("L", "K", "V"), (1, 2, 0)),    # outputs from here on
    ("dd", "f32", ("L", "C", "V"), (1, 2, 0)),
    ("dS0", "f32", ("BH", "K", "V"), (1, 2, 0)),
)

# The Hopper wgmma kernel's two extra arguments after those: the bf16 remainders P - bf16(P) and Qg - bf16(Qg),
# read like P and Qg (its split-operand mode; unread otherwise).
K1_LO_VIEWS = (
    ("P_lo", "bf16", ("L", "C", "C"), (2, 1, 0)),
    ("Qg_lo", "bf16", ("L", "C", "K"), (2, 1, 0)),
)


def view_shapes(L: int, BH: int, C: int, K: int, V: int, lo: bool = False) -> list[tuple[str, str, tuple, tuple]]:
    """(name, kind, view shape, view strides) of every argument, in the kernels' order (``lo``: with the Hopper
    kernel's two remainder arguments)."""
    dims = {"L": L, "BH": BH, "C": C, "K": K, "V": V}
    out = []
    for name, kind, spec, perm in K1_VIEWS + (K1_LO_VIEWS if lo else ()):
        shape = tuple(dims[d] for d in spec)
        stride, acc = [0] * len(shape), 1
        for i in reversed(range(len(shape))):  # contiguous storage
            stride[i], acc = acc, acc * shape[i]
        out.append((name, kind, tuple(shape[p] for p in perm), tuple(stride[p] for p in perm)))
    return out


def fake_args(L: int, BH: int, C: int, K: int, V: int, lo: bool = False) -> list:
    """CuTe DSL fake tensors of every argument (ahead-of-time compiles, no GPU)."""
    import cutlass
    from cutlass.cute.runtime import make_fake_tensor

    dt = {"bf16": cutlass.BFloat16, "f32": cutlass.Float32}
    return [make_fake_tensor(dt[kind], shape, stride, assumed_align=16)
            for _, kind, shape, stride in view_shapes(L, BH, C, K, V, lo)]
