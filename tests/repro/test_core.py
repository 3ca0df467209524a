"""lethe.repro.core: a fixture violating kernel -> repro directory -> its pytest, run without lethe, fails; the
same directory with the conforming kernel passes. In-process runner (trusted fixture kernels only)."""

from __future__ import annotations

import json

import pytest

from lethe.repro import core
from lethe.repro.measure import BITWISE_TEST, CONTRACT_TEST, EXPECTATION_TEST, run_pytest
from lethe.verifier import api
from lethe.verifier import fixtures as F
from lethe.verifier.testing import inprocess_runner


def _row(files, ref, cand, seed=3):
    rp, cp = files("ref.py", ref), files("cand.py", cand)
    return api.verify_files(rp, cp, device="cpu", seed=seed, kernel_id="k", runner=inprocess_runner)


@pytest.mark.parametrize("ref,cand,gate", [
    (F.SOFTMAX_REF, F.SOFTMAX_NAN_TO_NUM, "EXC-01"),
    (F.SUM_REF, F.SUM_HALF_ACC, "PRC-02"),
    (F.SOFTMAX_REF, F.SOFTMAX_FIXED_BLOCKS, "CMP-03"),
])
@pytest.mark.slow
def test_repro_fails_standalone_and_the_conforming_kernel_passes(files, tmp_path, ref, cand, gate):
    row = _row(files, ref, cand)
    assert row["gates"][gate]["status"] == "fail"
    out = tmp_path / "repro"
    info = core.make_repro(row, gate, out, runner=inprocess_runner, budget_s=60)
    assert info["elements"] <= info["original_elements"]
    assert {"test_repro.py", "repro_harness.py", "candidate.py", "reference.py", core.TENSOR_FILE,
            "README.md"} <= set(info["files"])
    assert "import lethe" not in (out / "test_repro.py").read_text()
    tests = run_pytest(out)
    assert tests == {EXPECTATION_TEST: "passed", CONTRACT_TEST: "failed", BITWISE_TEST: "passed"}
    (out / "candidate.py").write_text(F.as_candidate(ref))
    assert run_pytest(out)[CONTRACT_TEST] == "passed"


def test_shrinking_keeps_the_failure_and_reduces_the_input(files, tmp_path):
    row = _row(files, F.SOFTMAX_REF, F.SOFTMAX_NAN_TO_NUM)
    info = core.make_repro(row, "EXC-01", tmp_path / "r", runner=inprocess_runner, budget_s=60)
    recorded = core.signature(json.loads(row["gates"]["EXC-01"]["evidence"])["probes"]["nonfinite"])
    assert core.same_way(recorded, info["signature"])
    assert info["shrink_factor"] > 1
    plain = core.make_repro(row, "EXC-01", tmp_path / "n", runner=inprocess_runner, shrink_input=False)
    assert plain["elements"] == plain["original_elements"] == info["original_elements"]


def test_a_gate_that_passed_or_cannot_be_stored_is_refused(files, tmp_path):
    row = _row(files, F.SOFTMAX_REF, F.SOFTMAX_NAN_TO_NUM)
    with pytest.raises(core.ReproError) as exc:
        core.make_repro(row, "CMP-01", tmp_path / "r", runner=inprocess_runner)
    assert exc.value.code == 2 and "did not fail" in str(exc.value)
    with pytest.raises(core.ReproError) as exc:
        core.make_repro(row, "RES-02", tmp_path / "r", runner=inprocess_runner)
    assert exc.value.code == 2


def test_a_fixed_candidate_does_not_reproduce(files, tmp_path):
    row = _row(files, F.SOFTMAX_REF, F.SOFTMAX_NAN_TO_NUM)
    fixed = files("fixed.py", F.as_candidate(F.SOFTMAX_REF))
    with pytest.raises(core.ReproError) as exc:
        core.make_repro(row, "EXC-01", tmp_path / "r", cand_path=fixed, runner=inprocess_runner)
    assert exc.value.code == 1


def test_same_way_needs_the_same_output_and_a_subset_of_the_classes():
    orig = {"where": "output 0", "classes": ["lost_nonfinite", "value"]}
    assert core.same_way(orig, {"where": "output 0", "classes": ["value"]})
    assert not core.same_way(orig, {"where": "output 0", "classes": ["new_nonfinite"]})
    assert not core.same_way(orig, {"where": "output 1", "classes": ["value"]})
    assert not core.same_way(orig, None)


def test_knob_values_are_smaller_and_include_primes():
    vals = core._knob_values(256)
    assert vals == sorted(vals) and max(vals) < 256 and 1 in vals and 127 in vals and 128 in vals
