"""lethe.aot.triton_aot: compile Triton kernels for sm_90a / sm_100a on the CPU and read their resource needs.

Compiled, not executed: these tests never run a kernel; they need only the Triton wheel (its bundled ptxas and
cuobjdump), not a GPU.
"""

import pytest
from aot_kernels import matmul, three_accumulators

from lethe.aot.limits import check
from lethe.aot.triton_aot import compile_report, count_mma, parse_res_usage

triton = pytest.importorskip("triton")

MM_SIG = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "K": "i32", "stride_am": "i32",
          "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr", "stride_cm": "i32",
          "stride_cn": "constexpr", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
# what the JIT infers for contiguous torch tensors: unit strides folded, others divisible by 16
MM_ATTRS = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(MM_SIG)
            if n in ("a_ptr", "b_ptr", "c_ptr", "K", "stride_am", "stride_bk", "stride_cm")}


def _mm_const(bm, bn, bk):
    return {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1, "BM": bm, "BN": bn, "BK": bk}


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
def test_small_matmul_compiles_with_sane_numbers(target):
    rep = compile_report(matmul, MM_SIG, _mm_const(64, 64, 32), target, num_warps=4, num_stages=2, attrs=MM_ATTRS)
    assert rep.error is None
    assert rep.target == target and rep.kernel == "matmul"
    assert rep.triton_version == triton.__version__
    assert 16 <= rep.registers <= 255
    assert rep.spill_bytes == 0
    # two 64x32 / 32x64 bf16 tiles per stage, two stages: 2 * (4096 + 4096) = 16 KiB
    assert 16384 <= rep.shared_bytes < 32768
    assert (rep.num_warps, rep.num_stages) == (4, 2)
    if target == "sm_90a":
        assert rep.tmem_columns == 0
        assert rep.mma["wgmma"] > 0 and rep.mma["tcgen05_mma"] == 0
    else:
        # one 64x64 fp32 accumulator: 64 columns of tensor memory
        assert rep.tmem_columns == 64
        assert rep.mma["tcgen05_mma"] > 0 and rep.mma["wgmma"] == 0
        assert rep.mma["tcgen05_alloc"] == 1
    assert check(rep) == [] and rep.violations() == []


def test_big_tiles_many_stages_exceed_shared_memory_on_sm90():
    rep = compile_report(matmul, MM_SIG, _mm_const(256, 256, 128), "sm_90a", num_warps=8, num_stages=4,
                         attrs=MM_ATTRS)
    assert rep.error is None
    # four stages of 256x128 + 128x256 bf16 tiles: 4 * 2 * 65536 B = 512 KiB, more than twice the 227 KiB limit
    assert rep.shared_bytes >= 4 * 2 * 256 * 128 * 2
    problems = check(rep)
    assert len(problems) == 1 and problems[0].startswith(f"shared memory {rep.shared_bytes} B > 232448 B")


def test_three_wide_accumulators_exceed_tmem_on_sm100():
    rep = compile_report(three_accumulators, {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "K": "i32",
                                              "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
                         {"BM": 128, "BN": 256, "BK": 32}, "sm_100a", num_warps=4, num_stages=1)
    assert rep.error is None
    assert rep.shared_bytes <= 232448  # only tensor memory is over budget
    assert rep.tmem_columns >= 3 * 256
    problems = check(rep)
    assert problems == [f"tensor memory {rep.tmem_columns} columns > 512 on sm_100a"]
    # Triton gives up on the allocation and compiles a trap: the register figure is the trap's, and we say so
    assert rep.mma["trap"] >= 1 and rep.mma["tcgen05_mma"] == 0
    assert any("trap" in note for note in rep.notes)


def test_compile_failure_is_reported_not_raised():
    rep = compile_report(matmul, {**MM_SIG, "K": "not-a-type"}, _mm_const(64, 64, 32), "sm_90a")
    assert rep.error and rep.registers is None
    assert rep.violations()[0].startswith("did not compile for sm_90a")


def test_parsers():
    text = "Resource usage:\n Function mm:\n  REG:159 STACK:16 SHARED:0 LOCAL:8 CONSTANT[0]:0 TEXTURE:0"
    assert parse_res_usage(text) == {"REG": 159, "STACK": 16, "SHARED": 0, "LOCAL": 8}
    assert parse_res_usage("no function here") is None
    ptx = "\n".join([
        "\t@%p7 tcgen05.mma.cta_group::1.kind::f16 [ %r1 + 0 ], %rd1, %rd2, %r3, %p6;",
        "\ttcgen05.mma.cta_group::1.kind::f16 [ %r1 + 0 ], %rd1, %rd2, %r3, %p6;",
        "\t@%p1 tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r22], 512;",
        "\ttcgen05.commit.cta_group::1.mbarrier::arrive::one.b64 [%rd52];",
        "\twgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {...};",
        "\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {...};",
        "\t// tcgen05.mma in a comment does not count",
    ])
    counts = count_mma(ptx)
    assert counts["tcgen05_mma"] == 2 and counts["tcgen05_alloc"] == 1
    assert counts["wgmma"] == 1 and counts["mma_sync"] == 1
