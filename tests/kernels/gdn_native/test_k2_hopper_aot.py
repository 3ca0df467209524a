"""Ahead-of-time compile of the Hopper K2 kernel (sm_90a, CuTe DSL) on the CPU, checked from the generated code.

For d_v in {64, 128} at chunk 64, d_k 128, the properties: the kernel traces and compiles for sm_90a with no
GPU (a broken kernel fails here, before device time is spent); its products are float32 FFMA (no tensor-core
instruction, which would mean TF32 or bf16 rounding, nor a Blackwell instruction, which would mean a wrong
target); the cubin has no spills and no local memory (a spill inside a product loop costs a local-memory round
trip per multiply-add); the dynamic plus static shared memory fits sm_90a's 232,448 B per block; and the design
point the docs state holds: two CTAs per SM (their shared memory fits, and the launch bound keeps each thread at
<= 128 registers). Skips when nvidia-cutlass-dsl is not installed.
"""

import pytest
from lethe.kernels.gdn.native import CUTE_DSL_PIN, cute_dsl_available
from lethe.kernels.gdn.native.k2_hopper_plan import THREADS, smem_bytes

pytestmark = pytest.mark.skipif(not cute_dsl_available(), reason=f"CuTe DSL not importable (pip install {CUTE_DSL_PIN})")

SM90_SMEM_PER_BLOCK = 232448
SM90_SMEM_PER_SM = 233472      # 228 KB, of which the runtime reserves 1 KB per resident block
SM90_REGS_PER_SM = 65536
K, C = 128, 64


@pytest.fixture(scope="module", params=[64, 128], ids=lambda v: f"dv{v}")
def report(request):
    from lethe.kernels.gdn.native.aot import compile_report

    return compile_report("k2_hopper", "sm_90a", dict(L=6, K=K, V=request.param, C=C))


def test_targets_sm90a_with_fp32_fma_only(report):
    pc, ops = report["ptx_counts"], report["cubin"]["sass_ops"]
    assert report["ptx_target"] == "sm_90a"
    assert pc["fma_f32"] > 0 and ops.get("FFMA", 0) >= 256  # the unrolled product loops
    assert pc["wgmma"] == 0 and pc["mma_sync"] == 0 and pc["tcgen05_mma"] == 0
    assert not any(op.startswith(("HMMA", "UTCHMMA", "HGMMA")) for op in ops)


def test_no_spills(report):
    cub, pc = report["cubin"], report["ptx_counts"]
    assert cub["stack"] == 0 and cub["local"] == 0 and cub["sass_spill_ops"] == 0
    assert pc["ld_local"] == 0 and pc["st_local"] == 0


def test_fits_sm90_shared_memory(report):
    assert report["smem_dynamic_bytes"] == smem_bytes(K, report["cfg"]["V"], C)
    assert 0 < report["smem_dynamic_bytes"] + report["cubin"]["shared_static"] <= SM90_SMEM_PER_BLOCK


def test_two_ctas_per_sm(report):
    per_block = report["smem_dynamic_bytes"] + report["cubin"]["shared_static"] + 1024
    assert 2 * per_block <= SM90_SMEM_PER_SM
    assert 2 * report["cubin"]["reg"] * THREADS <= SM90_REGS_PER_SM
