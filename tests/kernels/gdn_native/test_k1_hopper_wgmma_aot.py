"""Ahead-of-time compile of the Hopper tensor-core K1 (sm_90a: TMA + wgmma) on the CPU (executed on the H200: test_native_gpu.py).

Checked from the generated code for d_v in {64, 128} with erase and dS_final, and d_v 128 without either: it targets
sm_90a and uses wgmma only (no tcgen05, no mma.sync); the wgmma count in the chunk loop equals what K1's products
imply (derived here from their reductions, one instruction per 16) and the SASS has as many HGMMA; the operands
arrive by TMA (UTMALDG); shared memory fits the 227 KB opt-in limit; the cubin neither spills nor uses local
memory. Also in split-operand mode (P and Qg as bf16 hi/lo pairs: two more products). The product order is the
Blackwell K1's, checked in float64 by test_k1_scan_model.py; the GPU check is
tests/kernels/gdn_native/test_native_gpu.py.
"""

import pytest
from lethe.kernels.gdn.native import CUTE_DSL_PIN, cute_dsl_available

pytestmark = pytest.mark.skipif(not cute_dsl_available(), reason=f"CuTe DSL not importable (pip install {CUTE_DSL_PIN})")

SMEM_OPTIN = 232448
K, C = 128, 64


def _expected(erase, split=False):
    reductions = [C, K, C] + ([C] if erase else [])   # P^T dO, Kend dS, Qg^T dO, Wm^T (-dd)
    reductions += [C, C] if split else []              # P_lo^T dO, Qg_lo^T dO
    return sum(r // 16 for r in reductions)


@pytest.fixture(scope="module", params=[(64, True, False), (128, True, False), (128, False, False), (128, True, True),
                                        (64, False, True)],
                ids=lambda p: f"dv{p[0]}-{'erase' if p[1] else 'plain'}{'-split' if p[2] else ''}")
def report(request):
    from lethe.kernels.gdn.native.k2_aot import compile_report

    V, erase, split = request.param
    return compile_report(dict(kernel="k1_wgmma", V=V, erase=erase, dsf=erase, split=split), arch="sm_90a")


def test_targets_sm90a_with_wgmma_only_and_the_expected_count(report):
    pc, cfg, sass = report["ptx_counts"], report["cfg"], report["cubin"]["sass_ops"]
    assert report["ptx_target"] == "sm_90a" and report["kernel"] == "k1_hopper_wgmma"
    assert pc["tcgen05_mma"] == 0 and pc["mma_sync"] == 0
    assert pc["wgmma"] == _expected(cfg["erase"], cfg.get("split", False)) == report["expected_wgmma"]
    assert sum(v for k, v in sass.items() if k.startswith("HGMMA")) == pc["wgmma"]


def test_operands_arrive_by_tma(report):
    assert sum(v for k, v in report["cubin"]["sass_ops"].items() if k.startswith("UTMALDG")) >= 4


def test_fits_shared_memory_and_does_not_spill(report):
    cub, pc = report["cubin"], report["ptx_counts"]
    assert 0 < report["smem_operand_bytes"] + cub["shared_static"] <= SMEM_OPTIN
    assert cub["stack"] == 0 and cub["local"] == 0 and cub["sass_spill_ops"] == 0
    assert pc["ld_local"] == 0 and pc["st_local"] == 0
