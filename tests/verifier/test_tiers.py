"""The tiered check: the quick tier's gates, what it alone lets through, and that tiering keeps the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from lethe.verifier import tiers as T
from lethe.verifier.reference import read_source

ROOT = Path(__file__).resolve().parents[2]


def _row(i, status="gated", fail=()):
    return {"id": i, "status": status,
            "gates": {g: {"status": "fail" if g in fail else "pass"} for g in ("CMP-01", "ORD-02", "PRC-02")}}


def test_false_passes_count_full_rejections_outside_the_quick_gates():
    rows = [_row("a", fail=("CMP-01",)), _row("b", fail=("PRC-02",)), _row("c"), _row("d", status="crash"),
            _row("e", status="ref_broken")]
    res = T.false_passes(rows, "quick")
    assert (res["rejected_by_full"], res["passed_by_tier"], res["ids"]) == (3, 1, ["b"])
    assert T.false_passes(rows, "full")["passed_by_tier"] == 0


@pytest.mark.slow
def test_quick_gate_verdicts_equal_the_full_batterys_and_tiering_keeps_the_verdict():
    d = ROOT / "data" / "red_team" / "prc02_meanpool_half_running_total"  # passes quick, fails PRC-02
    ref, cand = read_source(d / "ref.py"), read_source(d / "cand.py")
    row, decided = T.verify_tiered(ref, cand, device="cpu", seed=20260829)
    assert decided == "full" and row["gates"]["PRC-02"]["status"] == "fail"
    from lethe.verifier import api

    quick = api.verify(ref, cand, device="cpu", seed=20260829, only_gates=list(T.TIERS["quick"]))
    for g in T.TIERS["quick"]:
        assert quick["gates"][g]["status"] == row["gates"][g]["status"], g
    d = ROOT / "data" / "red_team" / "exc01_gelu_nan_to_num"  # rejected by the quick tier already
    row, decided = T.verify_tiered(read_source(d / "ref.py"), read_source(d / "cand.py"), device="cpu",
                                   seed=20260829)
    assert decided == "quick" and row["gates"]["EXC-01"]["status"] == "fail"
