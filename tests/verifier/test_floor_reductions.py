"""The conditioning floor's reduction length and its subnormal grid (lethe.plan/10, trusted-corpus defects D3, D12).

The floor K_COND sqrt(N) spread counts the roundings one output accumulates: N must be the longest reduction an
operator of the forward runs, not a guess from the probe's shapes; and a value below the smallest normal rounds on
the absolute subnormal grid, which a relative move leaves out. Three states: the honest fp32 chain passes, an fp16
running total (or a flush to zero) still fails, and KernelBench's loose check passes that violator."""

from __future__ import annotations

import json

import torch

from lethe.verifier import api
from lethe.verifier import reference as R
from lethe.verifier.testing import inprocess_runner, kb_allclose

# A bias-free 3-D transposed convolution, a relu and a group norm (KernelBench L2/61, small): on subnormal inputs the
# convolution's products round on the subnormal grid and the group norm, whose variance underflows, multiplies that
# rounding by 1/sqrt(eps).
REF = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose3d(16, 32, 3, bias=False)
        self.relu = nn.ReLU()
        self.gn = nn.GroupNorm(4, 32)

    def forward(self, x):
        return self.gn(self.relu(self.conv(x)))


def get_inputs():
    return [torch.randn(2, 16, 6, 8, 8)]


def get_init_inputs():
    return []
'''
HONEST = REF.replace("class Model(", "class ModelNew(")
# Subnormal inputs flushed to zero before the convolution (a fast-math kernel): the outputs of the subnormal rows
# are then the group norm of zeros, 0, where the exact ones are ~1e-38..1e-37.
FLUSHED = HONEST.replace("return self.gn(self.relu(self.conv(x)))",
                         "x = torch.where(x.abs() < 1.1754943508222875e-38, torch.zeros_like(x), x)\n"
                         "        return self.gn(self.relu(self.conv(x)))")


def test_reduction_lengths_read_from_the_operators():
    lengths = R._ReductionLengths()
    x = torch.randn(2, 16, 6, 8, 8, dtype=torch.float64)
    with torch.no_grad(), lengths:
        torch.nn.functional.conv3d(x, torch.randn(4, 16, 3, 3, 3, dtype=torch.float64))
    assert lengths.longest == 16 * 27
    lengths = R._ReductionLengths()
    with torch.no_grad(), lengths:
        torch.nn.functional.instance_norm(torch.randn(2, 3, 14, 30, 30, dtype=torch.float64))
    assert lengths.longest == 14 * 30 * 30
    lengths = R._ReductionLengths()
    with torch.no_grad(), lengths:
        torch.randn(5, 7, dtype=torch.float64) @ torch.randn(7, 3, dtype=torch.float64)
        torch.randn(4, 9, dtype=torch.float64).sum(dim=1)
    assert lengths.longest == 9


def test_a_subnormal_moves_on_the_absolute_grid_and_a_normal_value_as_before():
    gen = torch.Generator().manual_seed(0)
    t = torch.tensor([1.5, -3.0, 0.0, 1e-40, -2e-39], dtype=torch.float64)
    u, tiny = 2.0**-24, 2.0**-126
    moved = R._rounding_move(t, u, tiny, gen)
    d = R._signs(t.shape, torch.Generator().manual_seed(0), "cpu")
    assert torch.equal(moved[:2], t[:2] * (1.0 + u * d[:2]))  # the same bits as the relative move
    assert moved[2] == 0.0  # an exact zero stays exact
    assert torch.allclose((moved[3:] - t[3:]).abs(), torch.full((2,), u * tiny, dtype=torch.float64), rtol=1e-6, atol=0)


def _subnormal_ratio(row: dict) -> float:
    ev = json.loads(row["gates"]["EXC-02"]["evidence"])["probes"]["subnormal"]
    return max(o.get("max_err_over_tol", 0.0) for o in ev["outputs"])


def test_subnormal_conv_and_group_norm_three_states():
    api._REF_CACHE.clear()
    honest = api.verify(REF, HONEST, seed=5, runner=inprocess_runner, device="cpu", only_gates=["CMP-01", "EXC-02"])
    assert honest["gates"]["EXC-02"]["status"] == "pass", _subnormal_ratio(honest)
    assert honest["gates"]["CMP-01"]["status"] == "pass", honest["gates"]["CMP-01"]["reason"]
    flushed = api.verify(REF, FLUSHED, seed=5, runner=inprocess_runner, device="cpu", only_gates=["EXC-02"])
    assert flushed["gates"]["EXC-02"]["status"] == "fail" and _subnormal_ratio(flushed) > 100
    assert kb_allclose(REF, FLUSHED, seed=5)
