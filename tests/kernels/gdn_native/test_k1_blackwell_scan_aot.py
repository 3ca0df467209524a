"""Ahead-of-time compile of the whole Blackwell K1 (sm_100a) on the CPU -- compiled, not executed (no B200).

Checked from the generated code, for d_v in {64, 128} with erase and dS_final, and d_v 128 without either: it
compiles for sm_100a with tcgen05 MMAs only; the ``tcgen05.mma`` count in the chunk loop equals what K1's
products imply (derived here from their shapes: P^T dO and Kend dS into dd, Qg^T dO and Wm^T dd onto dS; one
instruction per 16 of the reduction); TMEM is ONE allocation of at most 512 columns (dS and dd side by side), one
relinquish, one free; dS goes back to TMEM with tcgen05.st (the decay); the operand buffers fit 227 KB; the cubin
neither spills nor uses local memory. The arithmetic is checked through the float64 replay in
test_k1_scan_model.py.
"""

import pytest
from lethe.kernels.gdn.native import CUTE_DSL_PIN, cute_dsl_available

pytestmark = pytest.mark.skipif(not cute_dsl_available(), reason=f"CuTe DSL not importable (pip install {CUTE_DSL_PIN})")

TMEM_COLUMNS_PER_SM = 512
SMEM_OPTIN = 232448
K, C = 128, 64


def _expected_mma(V, erase):
    products = {"dd = P^T dO": C, "dd += Kend dS": K, "dS += Qg^T dO": C}
    if erase:
        products["dS += Wm^T (-dd)"] = C
    return sum(r // 16 for r in products.values())


@pytest.fixture(scope="module", params=[(64, True), (128, True), (128, False)],
                ids=lambda p: f"dv{p[0]}-{'erase' if p[1] else 'plain'}")
def report(request):
    from lethe.kernels.gdn.native.k2_aot import compile_report

    V, erase = request.param
    return compile_report(dict(kernel="k1_scan", V=V, erase=erase, dsf=erase))


def test_compiles_for_sm100a_with_the_expected_mma_count(report):
    pc, cfg = report["ptx_counts"], report["cfg"]
    assert report["ptx_target"] == "sm_100a" and report["kernel"] == "k1_blackwell_scan"
    assert pc["wgmma"] == 0 and pc["mma_sync"] == 0
    assert pc["tcgen05_mma"] == _expected_mma(cfg["V"], cfg["erase"]) == report["expected_tcgen05_mma"]
    assert report["cubin"]["sass_ops"].get("UTCHMMA", 0) == pc["tcgen05_mma"]


def test_one_tmem_allocation_within_limit_and_ds_stored_back(report):
    pc, V = report["ptx_counts"], report["cfg"]["V"]
    assert pc["tcgen05_alloc"] == 1 and pc["tcgen05_dealloc"] == 1 and pc["tcgen05_relinquish"] == 1
    assert report["tmem_alloc_columns"] == [report["tmem_cols_planned"]]
    assert report["tmem_cols_used"] == 2 * V <= report["tmem_alloc_columns"][0] <= TMEM_COLUMNS_PER_SM
    assert report["tmem_offsets"] == {"dS": 0, "dd": V}
    assert pc["tcgen05_st"] >= 1  # the decayed dS (and the initial dS_final) written back to TMEM


def test_fits_shared_memory(report):
    assert 0 < report["smem_operand_bytes"] + report["cubin"]["shared_static"] <= SMEM_OPTIN


def test_no_spills(report):
    cub, pc = report["cubin"], report["ptx_counts"]
    assert cub["stack"] == 0 and cub["local"] == 0 and cub["sass_spill_ops"] == 0
    assert pc["ld_local"] == 0 and pc["st_local"] == 0
