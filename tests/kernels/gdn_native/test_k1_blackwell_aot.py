"""Ahead-of-time compile of the Blackwell tcgen05 kernel (sm_100a) on the CPU -- compiled, not executed (no B200).

The properties checked from the generated code: the PTX targets sm_100a and issues tcgen05.mma (the tensor-core
path, not a SIMT fallback); TMEM is managed as ONE allocation of at most 512 columns (the per-SM limit; Triton's
Mamba-3 backward asks for 544 and is unlaunchable) with exactly one dealloc and one relinquish; the epilogue reads
TMEM with tcgen05.ld; and the cubin neither spills nor uses local memory.
"""

import pytest
from lethe.kernels.gdn.native import CUTE_DSL_PIN, cute_dsl_available

pytestmark = pytest.mark.skipif(not cute_dsl_available(), reason=f"CuTe DSL not importable (pip install {CUTE_DSL_PIN})")

TMEM_COLUMNS_PER_SM = 512


@pytest.fixture(scope="module")
def report():
    from lethe.kernels.gdn.native.aot import compile_report

    return compile_report("k1_blackwell", "sm_100a", dict(BH=2, T=256, V=128))


def test_targets_sm100a_with_tcgen05(report):
    assert report["ptx_target"] == "sm_100a"
    assert report["ptx_counts"]["tcgen05_mma"] >= 4  # 64 time steps per chunk / K=16 per instruction
    assert report["ptx_counts"]["wgmma"] == 0 and report["ptx_counts"]["mma_sync"] == 0


def test_one_tmem_allocation_within_limit(report):
    pc = report["ptx_counts"]
    assert pc["tcgen05_alloc"] == 1 and pc["tcgen05_dealloc"] == 1 and pc["tcgen05_relinquish"] == 1
    assert report["tmem_alloc_columns"] == [report["tmem_cols_planned"]]
    assert 0 < report["tmem_alloc_columns"][0] <= TMEM_COLUMNS_PER_SM
    assert pc["tcgen05_ld"] >= 1


def test_no_spills(report):
    cub = report["cubin"]
    assert cub["stack"] == 0 and cub["local"] == 0 and cub["sass_spill_ops"] == 0
