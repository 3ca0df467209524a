"""Ahead-of-time compile of the Hopper tensor-core K2 (sm_90a: TMA + wgmma) on the CPU -- compiled, not yet executed.

Checked from the generated code for d_v in {64, 128}: it targets sm_90a and uses wgmma only (no tcgen05, no
mma.sync); the wgmma count equals what K2's seven products imply (one per 16 of each reduction, derived from the
product list the Blackwell K2 shares) and the SASS has as many HGMMA; the operands arrive by TMA (UTMALDG); shared
memory fits the 227 KB opt-in limit; no spills, no local memory. Its arithmetic is the Blackwell K2's, checked in
float64 by test_k2_model.py; execution on a GPU is pending.
"""

import pytest
from lethe.kernels.gdn.native import CUTE_DSL_PIN, cute_dsl_available

pytestmark = pytest.mark.skipif(not cute_dsl_available(), reason=f"CuTe DSL not importable (pip install {CUTE_DSL_PIN})")

SMEM_OPTIN = 232448
K, C = 128, 64


def _expected(V):
    reductions = [V, C, C, V, K, C, C]  # P1, P2, P3, P4b, P4a, P5, P6
    return sum(r // 16 for r in reductions)


@pytest.fixture(scope="module", params=[64, 128], ids=lambda v: f"dv{v}")
def report(request):
    from lethe.kernels.gdn.native.k2_aot import compile_report

    return compile_report(dict(kernel="k2_wgmma", V=request.param), arch="sm_90a")


def test_targets_sm90a_with_wgmma_only_and_the_expected_count(report):
    pc, sass = report["ptx_counts"], report["cubin"]["sass_ops"]
    assert report["ptx_target"] == "sm_90a" and report["kernel"] == "k2_hopper_wgmma"
    assert pc["tcgen05_mma"] == 0 and pc["mma_sync"] == 0
    assert pc["wgmma"] == _expected(report["cfg"]["V"]) == report["expected_wgmma"]
    assert sum(v for k, v in sass.items() if k.startswith("HGMMA")) == pc["wgmma"]


def test_operands_arrive_by_tma(report):
    assert sum(v for k, v in report["cubin"]["sass_ops"].items() if k.startswith("UTMALDG")) >= 9


def test_fits_shared_memory_and_does_not_spill(report):
    cub, pc = report["cubin"], report["ptx_counts"]
    assert 0 < report["smem_operand_bytes"] + cub["shared_static"] <= SMEM_OPTIN
    assert cub["stack"] == 0 and cub["local"] == 0 and cub["sass_spill_ops"] == 0
    assert pc["ld_local"] == 0 and pc["st_local"] == 0
