from lethe.foreign import second_corpus as sc


def _row(i, profile="strict", status="gated", fails=()):
    gates = {g: {"status": "fail" if g in fails else "pass"} for g in ("CMP-01", "CMP-03", "PRC-01", "PRC-02")}
    return {"id": i, "profile": profile, "status": status, "gates": gates if status == "gated" else {}}


def test_residual_removes_only_precision_gates():
    rows = [_row("a", fails=("PRC-02",)), _row("b", fails=("PRC-01", "CMP-03")), _row("c"),
            _row("d", status="timeout")]
    out = sc.gate_breakdown(rows)["strict"]
    assert out["gated"] == 3 and out["rows"] == 4
    assert out["findings_raw"] == 2 and out["findings_excl_precision"] == 1
    assert out["gate_fail_counts"] == {"CMP-03": 1, "PRC-01": 1, "PRC-02": 1}


def test_three_way_counts_each_combination_once():
    verdicts = [_row("a"), _row("b", fails=("CMP-03",)), _row("c", fails=("CMP-01",)), _row("d", status="crash")]
    kb = [{"id": "a", "correct": True, "outcome": "correct"}, {"id": "b", "correct": True, "outcome": "correct"},
          {"id": "c", "correct": False, "outcome": "incorrect"}, {"id": "d", "correct": True}]
    labels = {"a": True, "b": True, "c": False, "d": True}
    table = sc.three_way(verdicts, kb, labels)
    cell = {(r["sakana_correct"], r["kernelbench_accepts"], r["battery_passes"]): r["kernels"] for r in table}
    assert cell[(True, True, True)] == 1
    assert cell[(True, True, False)] == 1
    assert cell[(False, False, False)] == 1
    assert cell[(None, None, None)] == 1  # the crash never reached the gates
    assert sum(r["kernels"] for r in table) == 4


def test_throughput_percentiles():
    t = sc.throughput([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0])
    assert t["median"] == 5.5 and abs(t["p90"] - 9.1) < 1e-12
