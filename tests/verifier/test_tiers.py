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


def test_measured_false_passes_compare_each_kernels_own_quick_run():
    # Full battery: a crashes (a probe outside the quick tier kills the process), b fails PRC-02, c passes,
    # d times out in both runs, e fails CMP-01 in both. The quick tier's own rows: a graded and passing.
    full = [_row("a", status="crash"), _row("b", fail=("PRC-02",)), _row("c"), _row("d", status="timeout"),
            _row("e", fail=("CMP-01",))]
    quick = [_row("a"), _row("b"), _row("c"), _row("d", status="timeout"), _row("e", fail=("CMP-01",))]
    res = T.measured_false_passes(full, quick)
    assert (res["rejected_by_full"], res["passed_by_tier"], res["ids"]) == (4, 2, ["a", "b"])
    assert res["derived_ids"] == ["b"]  # the full rows alone cannot see a's quick pass
    assert res["rejected_by_tier_only"] == [] and res["quick_rows"] == "measured"
    assert res["verdicts"]["a"] == {"quick": "pass", "full": "crash"}
    flaky = T.measured_false_passes([_row("c")], [_row("c", status="timeout")])
    assert flaky["rejected_by_tier_only"] == ["c"] and flaky["passed_by_tier"] == 0
    with pytest.raises(ValueError):
        T.measured_false_passes(full, quick[:2])
    doc = T.measure({"x": full, "y": full}, quick_rows_by_corpus={"x": quick}, notes_by_corpus={"x": "cpu"})
    assert doc["corpora"]["x"]["ids"] == ["a", "b"] and doc["corpora"]["x"]["run"] == "cpu"
    assert doc["corpora"]["y"]["ids"] == ["b"] and doc["corpora"]["y"]["quick_rows"] == "derived"


def test_render_names_what_a_measured_corpus_lets_through(tmp_path):
    full = [_row("a", status="crash"), _row("b")]
    doc = T.measure({"hostile": full}, quick_rows_by_corpus={"hostile": [_row("a"), _row("b")]},
                    notes_by_corpus={"hostile": T.run_note({"device": "cpu", "timeout_s": 60, "memory_mb": 2048},
                                                           full)})
    T.render(doc, {}, str(tmp_path / "t.md"), str(tmp_path / "t.tex"))
    md = (tmp_path / "t.md").read_text()
    assert "| hostile | 2 | 1 | 1 |" in md and "run on its own" in md and "(cpu, strict profile, " in md
    assert "60 s and 2048 MB" in md and "the count would be 0" in md
