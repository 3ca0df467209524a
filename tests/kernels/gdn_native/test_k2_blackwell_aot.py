"""Ahead-of-time compile of the Blackwell K2 kernel (sm_100a) on the CPU -- compiled, not executed (no B200).

Checked from the generated code, for d_v in {64, 128} at chunk 64, d_k 128: it compiles for sm_100a; the number
of ``tcgen05.mma`` instructions equals what the product list implies (sum over K2's seven products of
reduction / 16, derived here from the shapes, not an observed number); TMEM is ONE allocation of at most 512
columns holding every accumulator (one alloc, one relinquish, one dealloc); the operand buffers fit the 227 KB
shared-memory limit; the cubin neither spills nor uses local memory. Its arithmetic is checked through the
float64 model in test_k2_model.py.
"""

import pytest
from lethe.kernels.gdn.native import CUTE_DSL_PIN, cute_dsl_available

pytestmark = pytest.mark.skipif(not cute_dsl_available(), reason=f"CuTe DSL not importable (pip install {CUTE_DSL_PIN})")

TMEM_COLUMNS_PER_SM = 512
SMEM_OPTIN = 232448  # per-block opt-in shared memory (same 227 KB figure on sm_100 as on the H200)
K, C = 128, 64


def _expected_mma(V):
    # K2's products (M x N, reduction R); one bf16 tcgen05.mma per 16 of R.
    products = {
        "G = S0 dd^T": (K, C, V),
        "dXe^T = dW^T T": (K, C, C),
        "du^T = dd^T T": (V, C, C),
        "dT = dd U^T": (C, C, V),
        "dT += dW Xe^T": (C, C, K),
        "Y = T^T dT": (C, C, C),
        "Z = Y T^T": (C, C, C),
    }
    return sum(r // 16 for _, _, r in products.values())


@pytest.fixture(scope="module", params=[64, 128], ids=lambda v: f"dv{v}")
def report(request):
    from lethe.kernels.gdn.native.k2_aot import compile_report

    return compile_report(dict(L=2, V=request.param))


def test_compiles_for_sm100a_with_expected_mma_count(report):
    pc = report["ptx_counts"]
    assert report["ptx_target"] == "sm_100a"
    assert pc["wgmma"] == 0 and pc["mma_sync"] == 0
    assert pc["tcgen05_mma"] == _expected_mma(report["cfg"]["V"]) == report["expected_tcgen05_mma"]
    assert report["cubin"]["sass_ops"].get("UTCHMMA", 0) == pc["tcgen05_mma"]


def test_one_tmem_allocation_within_limit(report):
    pc = report["ptx_counts"]
    assert pc["tcgen05_alloc"] == 1 and pc["tcgen05_dealloc"] == 1 and pc["tcgen05_relinquish"] == 1
    assert report["tmem_alloc_columns"] == [report["tmem_cols_planned"]]
    assert 0 < report["tmem_cols_used"] <= report["tmem_alloc_columns"][0] <= TMEM_COLUMNS_PER_SM
    offs = sorted(report["tmem_offsets"].values())
    assert offs == sorted(set(offs)) and offs[-1] + C <= report["tmem_cols_used"]  # disjoint static offsets
    assert pc["tcgen05_ld"] == 6  # 3 intermediates + 3 outputs read from TMEM


def test_fits_shared_memory(report):
    assert 0 < report["smem_operand_bytes"] + report["cubin"]["shared_static"] <= SMEM_OPTIN


def test_no_spills(report):
    cub = report["cubin"]
    pc = report["ptx_counts"]
    assert cub["stack"] == 0 and cub["local"] == 0 and cub["sass_spill_ops"] == 0
    assert pc["ld_local"] == 0 and pc["st_local"] == 0
