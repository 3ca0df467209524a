"""Root causes of a failed verdict: symptoms by probe, one accumulator collapsing many gates, property causes kept
apart, rows that never reached grading, the red-team measurement and the documented reward loop."""

from __future__ import annotations

import json
import re
from pathlib import Path

from lethe.verifier import causes as C
from lethe.verifier import fixtures as K
from lethe.verifier import records
from lethe.verifier.verdict import Verdict


def _row(failing: dict[str, dict[str, float | None]], rid: str = "k") -> dict:
    """A gated row whose gates fail on the given probes with the given err/tol (None: a property failure)."""
    gates = records.na_gates("not run", 0)
    for g in gates:
        gates[g] = {"status": "pass", "reason": "", "evidence": "{}", "seed": 0}
    for g, probes in failing.items():
        ev = {"probes": {p: {"status": "fail", "outputs": [{"ok": False, "n": 4, "n_bad": 1,
                                                              **({"max_err_over_tol": m} if m is not None else {})}]}
                         for p, m in probes.items()}}
        gates[g] = {"status": "fail", "reason": "x", "evidence": json.dumps(ev), "seed": 0}
    return records.make_row(id=rid, gates=gates)


def test_symptoms_come_from_the_probe_and_property_gates_from_the_gate():
    assert C.symptom("PRC-02", "accb_fp16_dim") == "narrow_accumulator"
    assert C.symptom("CMP-01", "subnormal") == C.symptom("EXC-02", "subnormal") == "subnormal_handling"
    assert C.symptom("CMP-03", "shape_dim=251") == "shape_specialisation"
    assert C.symptom("ORD-03", "offset") == "unstable_formula"
    assert C.symptom("ORD-02", "repeat") == "non_deterministic"
    assert C.symptom("ORD-02", "overwrite") == "aliasing_or_stale_state"
    assert C.symptom("RES-02", "_k@sm_90a#0") == "hardware_limit"
    assert C.symptom("CMP-01", "rand2") == "wrong_values"


def test_one_narrow_accumulator_is_one_cause_across_gates():
    v = Verdict.from_row(_row({"PRC-02": {"acc_fp16": 40.0}, "ORD-01": {"ord01": 5000.0},
                               "CMP-01": {"rand0": 200.0, "long_dim": 180.0}, "CMP-03": {"shape_dim=251": 160.0}}))
    causes = C.root_causes(v)
    assert [c["cause"] for c in causes] == ["narrow_accumulator"]
    assert causes[0]["gates"] == ["CMP-01", "CMP-03", "ORD-01", "PRC-02"]
    assert causes[0]["worst_margin"] == 5000.0
    assert set(causes[0]["explains"]) == {"wrong_values", "shape_specialisation"}


def test_random_inputs_erring_more_than_the_accumulator_probes_mean_wrong_values():
    # an accumulator's error is largest on its order-exact probes; here the random inputs err far more
    v = Verdict.from_row(_row({"PRC-02": {"accb_fp16": 100.0}, "CMP-01": {"rand0": 3e4}}))
    assert [c["cause"] for c in C.root_causes(v)] == ["wrong_values"]


def test_an_accumulator_probe_failing_within_tolerance_is_no_accumulator_evidence():
    # err/tol below 1 on a failing accumulator probe: it failed on a property (a NaN), not on the size of an error
    v = Verdict.from_row(_row({"PRC-02": {"accb_fp16": 0.02}, "EXC-02": {"subnormal": 3000.0}}))
    assert {c["cause"] for c in C.root_causes(v)} == {"narrow_accumulator", "subnormal_handling"}


def test_property_causes_stay_apart_from_value_causes():
    v = Verdict.from_row(_row({"ORD-02": {"overwrite": None}, "CMP-02": {"grad": None}}))
    assert {c["cause"] for c in C.root_causes(v)} == {"aliasing_or_stale_state", "wrong_gradient"}


def test_passing_and_ungraded_rows():
    assert C.root_causes(Verdict.from_row(_row({}))) == []
    crashed = Verdict.from_row(records.make_row(id="k", status="compile_fail", error="SyntaxError"))
    assert [c["cause"] for c in C.root_causes(crashed)] == ["row_compile_fail"]


def test_measure_counts_collapse_and_intent():
    rows = [_row({"PRC-02": {"acc_fp16": 40.0}, "ORD-01": {"ord01": 50.0}}, "prc02_a"),
            _row({"ORD-02": {"repeat": None}, "CMP-02": {"grad": None}}, "ord02_b"),
            _row({"CMP-03": {"shape_dim=7": 9.0}}, "exc01_c"), _row({}, "cmp01_ok"),
            records.make_row(id="x", status="ref_broken")]
    m = C.measure(rows)
    assert (m["failing"], m["not_judged"], m["one_cause"]) == (3, 1, 2)
    assert (m["failed_gates"], m["causes"]) == (5, 4)
    assert (m["with_intent"], m["first_is_intended"], m["intended_among"]) == (3, 2, 2)


def test_reward_carries_the_causes(local_sandbox):
    import lethe

    v = lethe.verify(K.SUM_REF, K.SUM_HALF_ACC, device="cpu")
    r = v.reward()
    assert r["causes"] == C.root_causes(v)
    assert r["causes"][0]["cause"] == "narrow_accumulator" and "PRC-02" in r["causes"][0]["gates"]


def test_the_documented_reward_loop_runs(local_sandbox):
    doc = (Path(__file__).parents[2] / "docs" / "verifier.md").read_text()
    code = re.search(r"<!-- example: reward-loop -->\n```python\n(.*?)```", doc, re.S).group(1)
    scope = {"ref_src": K.SUM_REF, "candidates": [K.as_candidate(K.SUM_REF), K.SUM_HALF_ACC]}
    exec(compile(code, "docs/verifier.md:reward-loop", "exec"), scope)
    good, bad = scope["log"]
    assert good == {"score": 1.0, "causes": []}
    assert bad["score"] < 0 and bad["causes"][0][0] == "narrow_accumulator"


def test_render_names_the_misses(tmp_path):
    doc = C.measure_corpora({"rt": [_row({"CMP-03": {"shape_dim=7": 9.0}}, "exc01_c"),
                                    _row({"PRC-02": {"acc_fp16": 40.0}}, "prc02_a")]})
    C.render(doc, str(tmp_path / "t.md"), str(tmp_path / "t.tex"))
    md = (tmp_path / "t.md").read_text()
    assert "| rt | 2 | 2 | 2 | 2 | 1 of 2 | 1 of 2 | exc01_c |" in md
