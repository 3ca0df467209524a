"""The candidate worker runs vendor libraries at float32 precision (lethe.verifier.worker.ieee_fp32_libraries)."""

from __future__ import annotations

import pytest
import torch

from lethe.verifier import api
from lethe.verifier import fixtures as K
from lethe.verifier.worker import ieee_fp32_libraries, library_fp32_state

# A conforming candidate that refuses to compute when the process would let cuDNN or cuBLAS use TF32: the row
# passes only if the worker switched TF32 off before the candidate's forward ran.
_REFUSES_TF32 = K.as_candidate(K.SOFTMAX_REF).replace(
    "    def forward(self", "    def forward_checked(self").replace(
    "class ModelNew(nn.Module):", '''class ModelNew(nn.Module):
    def forward(self, *args):
        if torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32:
            raise RuntimeError("TF32 is on in the candidate process")
        if torch.get_float32_matmul_precision() != "highest":
            raise RuntimeError("float32 matmul precision is not 'highest'")
        return self.forward_checked(*args)
''', 1)


def test_settings_are_switched_off_and_reported():
    prev = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
            torch.get_float32_matmul_precision())
    try:
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.set_float32_matmul_precision("medium")
        state = ieee_fp32_libraries()
        assert state == {"cudnn_allow_tf32": False, "matmul_allow_tf32": False,
                         "float32_matmul_precision": "highest"}
        assert library_fp32_state() == state
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = prev[:2]
        torch.set_float32_matmul_precision(prev[2])


def test_candidate_forward_sees_tf32_off(verify_local, monkeypatch):
    # the verifier's own process starts from torch's CUDA default (cuDNN TF32 on): the worker must override it
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    row = verify_local(K.SOFTMAX_REF, _REFUSES_TF32)
    assert row["status"] == "gated", row.get("error")
    assert row["gates"]["CMP-01"]["status"] == "pass"


_CONV_REF = K.HEADER + '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(32, 64, 3, padding=1)

    def forward(self, x):
        return self.conv(x)

def get_inputs():
    return [torch.randn(8, 32, 64, 64)]

def get_init_inputs():
    return []
'''


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("profile", ["strict", "cuda-default"])
def test_stock_cudnn_convolution_meets_the_float32_contract_on_cuda(profile):
    """torch's stock convolution (cuDNN) in float32 is correct code: CMP-01 must pass on the GPU."""
    row = api.verify(_CONV_REF, K.as_candidate(_CONV_REF), device="cuda", profile=profile,
                     only_gates=["CMP-01"])
    assert row["status"] == "gated", row.get("error")
    assert row["gates"]["CMP-01"]["status"] == "pass", row["gates"]["CMP-01"]
