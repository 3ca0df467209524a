"""The candidate worker's dtype groups start from the float32 weights (lethe.verifier.worker._restore)."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from lethe.verifier.worker import _restore


def test_bf16_group_after_fp16_group_sees_bf16_of_the_float32_weights():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(1024, 512), nn.BatchNorm1d(512))
    w32 = m[0].weight.detach().clone()
    state0 = copy.deepcopy(m.state_dict())
    held = m[0].weight  # a candidate may keep a reference to its parameter
    m.to(torch.float16)
    _restore(m, state0)
    assert m[0].weight.dtype == torch.float32 and torch.equal(m[0].weight, w32)
    m.to(torch.bfloat16)
    assert torch.equal(m[0].weight, w32.to(torch.bfloat16)) and m[0].weight is held
    assert m[1].running_var.dtype == torch.bfloat16  # buffers follow the group's cast too
    # What the old reload gave: bf16(fp16(w)) differs from bf16(w) for a few percent of the weights.
    twice = w32.to(torch.float16).to(torch.bfloat16)
    assert 0.01 < (twice != w32.to(torch.bfloat16)).float().mean() < 0.2
