"""Ahead-of-time compile of the native K1 (CuTe DSL) on the CPU, checked from the generated code.

The properties: the kernel traces and compiles for sm_90a with no GPU (so CI catches a broken kernel before
anyone spends device time), the PTX targets sm_90a, the hot loop does its products in float32 FMA (the arithmetic
the accuracy claims rely on), the dynamic shared memory fits the H200's 227 KB opt-in limit, and the cubin's
spill traffic stays within a handful of instructions outside the chunk loop (a spill inside the loop would cost a
local-memory round trip per chunk). Skips when nvidia-cutlass-dsl is not installed.
"""

import pytest
from lethe.kernels.gdn.native import CUTE_DSL_PIN, cute_dsl_available

pytestmark = pytest.mark.skipif(not cute_dsl_available(), reason=f"CuTe DSL not importable (pip install {CUTE_DSL_PIN})")

H200_SMEM_OPTIN = 232448


@pytest.fixture(scope="module")
def report():
    from lethe.kernels.gdn.native.aot import compile_report

    cfg = dict(BH=4, N=3, C=64, K=128, V=64, BV=32, split=2, has_erase=True, has_dsf=True)
    return compile_report("k1_hopper", "sm_90a", cfg)


def test_targets_sm90a_and_uses_fp32_fma(report):
    assert report["ptx_target"] == "sm_90a"
    assert report["ptx_counts"]["fma_f32"] > 0
    assert report["cubin"]["sass_ops"].get("FFMA", 0) >= 64
    assert report["ptx_counts"]["tcgen05_mma"] == 0  # Hopper has no tcgen05: its presence would be a wrong target


def test_fits_h200_shared_memory(report):
    assert 0 < report["smem_dynamic_bytes"] + report["cubin"]["shared_static"] <= H200_SMEM_OPTIN


def test_no_spill_in_hot_loop(report):
    cub = report["cubin"]
    assert cub["local"] == 0
    assert cub["sass_spill_ops"] <= 16, cub["sass_spill_ops"]
    assert cub["stack"] <= 64
