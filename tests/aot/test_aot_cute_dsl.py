"""lethe.aot.cute_dsl: reading TMEM allocations and tcgen05 counts out of CuTe DSL PTX (compiled, not executed)."""

import json

from lethe.aot.cute_dsl import judge, ptx_tmem_report
from lethe.provenance import REPO_ROOT

PROBE = REPO_ROOT / "results" / "aot" / "cute_probe" / "cute_probe.json"

PTX = """
.version 8.8
.target sm_100a
	mov.b32 	%r41, 256;
	@%p1 tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 	[%r5], %r41;
	tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
	tcgen05.mma.cta_group::1.kind::f16 [%r9], %rd1, %rd2, %r3, %p6;
	@%p2 tcgen05.mma.cta_group::1.kind::f16 [%r9], %rd1, %rd2, %r3, %p7;
	tcgen05.ld.sync.aligned.32x32b.x32.b32 {%r1}, [%r9];
	tcgen05.dealloc.cta_group::1.sync.aligned.b32 	%r9, %r250;
"""


def _report(ptx):
    rep = ptx_tmem_report(ptx)
    rep["cubin"] = {"functions": {"k": {"REG": 56, "STACK": 0, "SHARED": 0, "LOCAL": 0}}}
    return rep


def test_register_operand_resolved_through_its_move():
    rep = ptx_tmem_report(PTX)
    assert rep["ptx_target"] == "sm_100a"
    assert rep["tmem_alloc_columns"] == [256] and rep["tmem_columns"] == 256
    assert rep["counts"]["tcgen05_mma"] == 2 and rep["counts"]["tcgen05_ld"] == 1
    assert judge(_report(PTX)) == []


def test_unknown_size_is_not_zero():
    # the register is written twice: its value at the alloc is not a compile-time literal we can trust
    ptx = PTX.replace("mov.b32 	%r41, 256;", "mov.b32 	%r41, 256;\n	mov.b32 	%r41, 512;")
    rep = ptx_tmem_report(ptx)
    assert rep["tmem_columns"] is None
    assert "TMEM allocation size not a literal in the PTX" in judge(_report(ptx))


def test_discipline_violations():
    two_allocs = PTX + "\n	tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 	[%r6], 512;\n"
    problems = judge(_report(two_allocs))
    assert "tensor memory 768 columns > 512 on sm_100a" in problems
    assert "expected exactly one tcgen05_alloc, found 2" in problems
    no_mma = "\n".join(ln for ln in PTX.splitlines() if "tcgen05.mma" not in ln)
    assert judge(_report(no_mma)) == ["no tcgen05.mma in the PTX"]


def test_committed_probe_fits_and_keeps_the_tmem_discipline():
    if not PROBE.exists():
        import pytest

        pytest.skip("results/aot/cute_probe/cute_probe.json not computed yet")
    result = json.loads(PROBE.read_text())
    assert result["compiled_not_executed"] is True
    assert result["probes"]
    for probe in result["probes"]:
        assert "error" not in probe, probe.get("error")
        assert probe["ptx_target"] == "sm_100a"
        assert judge(probe) == probe["violations"] == []  # recomputed, not trusted
        assert probe["tmem_columns"] == probe["tmem_columns_planned"] <= 512
        assert probe["counts"]["tcgen05_mma"] > 0
        for use in probe["cubin"]["functions"].values():
            assert use["REG"] <= 255 and use["STACK"] == 0
