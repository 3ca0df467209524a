"""Known KernelBench holes: each exploit is ACCEPTED by the check and REJECTED by the battery.

The check side runs at KernelBench's own shapes (paper-era ``randn`` inputs for softmax / L1 norm, v0.1 ``rand``
inputs for ReLU), where the hole is real and not an artefact of a toy shape. The battery side needs
``lethe.verifier.api.verify``; until the verifier lands those tests skip and say so.
"""

from __future__ import annotations

import importlib

import pytest

from lethe.audit import aggregate as agg
from lethe.kernelbench import check as kb
from lethe.kernelbench import differential as diff
from lethe.kernelbench.problems import CORRECT_SOFTMAX_CAND, KNOWN_HOLES, SOFTMAX_REF

HOLES = {h.name: h for h in KNOWN_HOLES}


@pytest.mark.parametrize("name", sorted(HOLES))
def test_paper_era_check_accepts_the_exploit(name):
    hole = HOLES[name]
    row = kb.check(hole.ref_src, hole.cand_src, variant="paper", device="cpu")
    assert row["outcome"] == "correct", (hole.why_check_accepts, row)
    assert row["trials_passed"] == 5


def test_zeros_fail_where_the_output_is_not_small():
    """Control: the all-zeros hole is a property of the output scale, not of the check always passing."""
    ref = SOFTMAX_REF.replace("dim = 16384", "dim = 64")
    assert kb.check(ref, HOLES["zeros_softmax"].cand_src)["correct"] is False


def test_identity_fails_relu_on_randn_inputs():
    """Control: with the paper-era randn inputs the identity is caught; the hole is the rand distribution."""
    hole = HOLES["identity_relu"]
    ref = hole.ref_src.replace("torch.rand(", "torch.randn(")
    assert kb.check(ref, hole.cand_src)["correct"] is False


def test_hardened_check_still_accepts_identity_and_hardcoded_shape():
    """fp32 atol 1e-4 closes the zeros hole at these shapes but not the input-distribution or shape holes."""
    for name in ("identity_relu", "shape_hardcoded_softmax"):
        hole = HOLES[name]
        assert kb.check(hole.ref_src, hole.cand_src, variant="hardened")["correct"] is True
    zeros = HOLES["zeros_softmax"]
    assert kb.check(zeros.ref_src, zeros.cand_src, variant="hardened")["correct"] is False


def _verify():
    try:
        api = importlib.import_module("lethe.verifier.api")
    except ImportError as e:
        pytest.skip(f"battery not available yet: lethe.verifier.api does not import ({e})")
    return api.verify


def _rejected(verdict) -> bool:
    """The differential's own predicate: a failed gate, a crash under a gate, or a failure before gating."""
    return diff.battery_rejects(verdict)


def _failing(verdict) -> list[str]:
    return diff.failing_gates(agg.normalize_row(verdict))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOLES))
def test_battery_rejects_the_exploit(name):
    verify = _verify()
    hole = HOLES[name]
    verdict = verify(hole.ref_src, hole.cand_src, profile="strict", device="cpu", seed=20260829)
    assert _rejected(verdict), (hole.battery_should_catch, verdict)
    assert _failing(verdict) != [diff.NO_GATE], verdict  # rejected by a gate, not by a harness failure


@pytest.mark.slow
def test_battery_accepts_a_correct_softmax():
    """Control for the battery side: the rejections above are not the battery rejecting everything."""
    verify = _verify()
    verdict = verify(SOFTMAX_REF, CORRECT_SOFTMAX_CAND, profile="strict", device="cpu", seed=20260829)
    assert not _rejected(verdict), verdict
