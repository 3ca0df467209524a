"""Agreement study plumbing: the missing-checkout stop, checkout discovery, the 2x2 table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lethe.kernelbench import agreement as ag
from lethe.kernelbench import check as kb
from lethe.kernelbench.problems import CORRECT_SOFTMAX_CAND, IDENTITY_CAND, SOFTMAX_REF

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "workflow" / "scripts" / "differential_agreement.py"


def test_script_without_checkout_exits_nonzero_with_message():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--checkout", ""], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2
    assert "needs a local KernelBench checkout" in proc.stderr and "48642c5c" in proc.stderr


def test_not_a_checkout_is_refused(tmp_path):
    with pytest.raises(ag.AgreementSetupError, match="does not look like a KernelBench checkout"):
        ag.locate_eval(tmp_path)
    with pytest.raises(ag.AgreementSetupError, match="is not a directory"):
        ag.locate_eval(tmp_path / "nope")


def test_fake_checkout_is_imported_and_driven_like_the_driver(tmp_path):
    """A stand-in checkout whose eval delegates to ours: the plumbing must reproduce our verdicts exactly."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "__init__.py").write_text("")
    (tmp_path / "src" / "eval.py").write_text(
        "from lethe.kernelbench.check import eval_kernel_against_ref as _ours\n"
        "def eval_kernel_against_ref(o, c, seed_num=42, num_correct_trials=1, num_perf_trials=10, verbose=False,\n"
        "                            measure_performance=False, build_dir=None, device=None):\n"
        "    return _ours(o, c, seed_num=seed_num, num_correct_trials=num_correct_trials, device='cpu')\n"
    )
    fn = ag.load_eval(tmp_path)
    cases = {"1": CORRECT_SOFTMAX_CAND, "2": IDENTITY_CAND, "3": "def broken(:\n", "4": "raise OSError('lock')\n"}
    theirs = [{"id": i, **ag.run_theirs(fn, SOFTMAX_REF, c, "cpu")} for i, c in cases.items()]
    ours = [{"id": i, **kb.check(SOFTMAX_REF, c)} for i, c in cases.items()]
    assert [t["outcome"] for t in theirs] == ["correct", "output_mismatch", "other_error", "dropped_retry"]
    res = ag.agreement(theirs, ours)
    assert res["agreement_rate"] == 1.0 and res["joined_rows"] == 3 and res["skipped_dropped"] == 1


def test_agreement_counts_disagreements():
    theirs = [{"id": "1", "correct": True}, {"id": "2", "correct": False}, {"id": "3", "correct": True}]
    ours = [{"id": "1", "correct": True}, {"id": "2", "correct": True}, {"id": "4", "correct": False}]
    res = ag.agreement(theirs, ours)
    assert res["cells_their_vs_our_replica"]["their_fail_our_pass"] == 1
    assert res["agreement_rate"] == 0.5 and res["n_disagreements"] == 1
    assert res["only_theirs"] == 1 and res["only_ours"] == 1
