"""The differential's pure functions on synthetic rows, and the published table's figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lethe.kernelbench import differential as diff
from lethe.kernelbench import tables

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "data" / "published" / "crossval_kernelbench.json"


def audit_row(i, fails=(), status="gated", speedup=1.2, aliasing=False, op="softmax", reason=""):
    gates = {g: {"status": "pass", "reason": ""} for g in ("CMP-01", "CMP-03", "EXC-01", "ORD-02", "PRC-02")}
    for g in fails:
        gates[g] = {"status": "fail", "reason": reason}
    return {"id": str(i), "op_class": op, "status": status, "final_speedup": speedup, "output_aliasing": aliasing,
            "error": None if status == "gated" else "RuntimeError: boom", "gates": gates if status == "gated" else {}}


def kb_row(i, correct, variant="paper", outcome=None):
    return {"id": str(i), "variant": variant, "correct": correct,
            "outcome": outcome or ("correct" if correct else "output_mismatch")}


AUDIT = [
    audit_row(1),                              # both pass
    audit_row(2, fails=["EXC-01"]),            # disputed, tolerance-free
    audit_row(3, fails=["CMP-01", "PRC-02"]),  # disputed, tolerance-dependent
    audit_row(4, status="cand_native_fail"),   # disputed, pre-gate (tolerance-free)
    audit_row(5, fails=["CMP-01"]),            # both fail
    audit_row(6),                              # KB fails, battery passes
    audit_row(7, speedup=0.0),                 # not accepted by the corpus: out of the denominator
    audit_row(8),                              # KB result dropped (retry quirk): excluded
    audit_row(9),                              # no KB result at all
]
KB = [kb_row(1, True), kb_row(2, True), kb_row(3, True), kb_row(4, True), kb_row(5, False), kb_row(6, False),
      kb_row(7, True), kb_row(8, None, outcome="dropped_retry"),
      kb_row(1, True, "hardened"), kb_row(2, False, "hardened")]


def test_contingency_cells_and_exclusions():
    res = diff.differential(AUDIT, KB)
    p = res["paper"]
    assert p["cells"] == {"ext_pass_our_pass": 1, "ext_pass_our_fail": 3, "ext_fail_our_pass": 1,
                          "ext_fail_our_fail": 1}
    assert p["n"] == 6 and p["ext_accept_rate"] == pytest.approx(4 / 6)
    assert p["excluded"] == {"kernelbench_dropped_retry": 1, "no_kernelbench_result": 1, "not_accepted": 1}
    h = res["hardened"]
    assert h["cells"]["ext_pass_our_pass"] == 1 and h["cells"]["ext_fail_our_fail"] == 1 and h["n"] == 2


def test_money_cell_breakdown():
    mc = diff.differential(AUDIT, KB)["paper"]["money_cell"]
    assert mc["size"] == 3 and mc["ids"] == ["2", "3", "4"]
    assert mc["by_gate"] == {"CMP-01": 1, "EXC-01": 1, "PRC-02": 1, diff.NO_GATE: 1}
    assert mc["tolerance_free"] == 2 and mc["not_tolerance_free"] == 1


def test_published_figures_and_computed_rates():
    res = diff.from_published(json.loads(PUBLISHED.read_text()))
    assert res["paper"]["cells"] == {"ext_pass_our_pass": 985, "ext_pass_our_fail": 1487,
                                     "ext_fail_our_pass": 14, "ext_fail_our_fail": 152}
    assert res["hardened"]["cells"] == {"ext_pass_our_pass": 969, "ext_pass_our_fail": 1263,
                                        "ext_fail_our_pass": 30, "ext_fail_our_fail": 376}
    assert round(res["paper"]["ext_accept_rate"], 3) == 0.937  # the paper's 93.7 %
    assert round(res["hardened"]["ext_accept_rate"], 3) == 0.846  # the paper's 84.6 %
    assert res["paper"]["money_cell"]["tolerance_free"] == 958
    assert round(res["paper"]["money_cell_rate"], 4) == 0.5637  # the published money_cell_rate
    assert res["paper"]["n"] == res["joined_rows"] == 2638


def test_published_tables_are_labelled_and_deterministic(tmp_path):
    a = tables.render_published_differential(PUBLISHED, tmp_path / "a")
    b = tables.render_published_differential(PUBLISHED, tmp_path / "b")
    for pa, pb in zip(a, b, strict=True):
        assert pa.read_bytes() == pb.read_bytes()
    md = (tmp_path / "a" / "differential_published.md").read_text()
    assert "published figures" in md and "1,487" in md and "93.7%" in md and "84.6%" in md
    gates = (tmp_path / "a" / "differential_published_by_gate.md").read_text()
    assert "| fails EXC-01 | 827 |" in gates and "958" in gates
