"""The tensor-core K1 kernels' operand convention (lethe.kernels.gdn.native.k1_views): each view is the documented
permutation of contiguous chunk-flattened storage, with the strides torch gives that permutation."""

import torch
from lethe.kernels.gdn.native.k1_views import K1_VIEWS, view_shapes

L, BH, C, K, V = 8, 2, 64, 128, 96


def test_views_are_the_documented_ones():
    got = {name: (shape, stride) for name, _, shape, stride in view_shapes(L, BH, C, K, V)}
    assert got["P"] == ((C, C, L), (1, C, C * C))            # P^T
    assert got["Kend"] == ((C, K, L), (K, 1, C * K))
    assert got["dO"] == ((V, C, L), (1, V, C * V))
    assert got["Qg"] == got["Wm"] == ((K, C, L), (1, K, C * K))
    assert got["GC"] == ((K, L), (1, K))
    assert got["dS_final"] == got["dS0"] == ((K, V, BH), (V, 1, K * V))
    assert got["dS_next"] == ((K, V, L), (V, 1, K * V))
    assert got["dd"] == ((C, V, L), (V, 1, C * V))


def test_views_match_torch_permutations_of_the_storage():
    dims = {"L": L, "BH": BH, "C": C, "K": K, "V": V}
    for (name, _, spec, perm), (_, _, shape, stride) in zip(K1_VIEWS, view_shapes(L, BH, C, K, V), strict=True):
        t = torch.empty(*(dims[d] for d in spec)).permute(*perm)
        assert (tuple(t.shape), t.stride()) == (shape, stride), name
