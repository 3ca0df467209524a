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


def _t(i, ref, cand, grade, status="gated", **kw):
    return {"id": i, "status": status, "reference_s": ref, "candidate_s": cand, "grade_s": grade, **kw}


def test_battery_seconds_adds_every_phase_not_the_first_profile_row():
    t = _t("a", 0.02, 4.0, 2.5, seconds=5.1, aot_s=1.0)  # seconds: strict row, cumulative, grading of 1 profile
    assert sc.battery_seconds(t) == 0.02 + 4.0 + 2.5 + 1.0
    assert sc.battery_seconds({"reference_s": 1.0}) == 1.0  # missing phases count as zero


def test_throughput_summary_keeps_cold_and_warm_apart_and_judges_the_goal():
    timings = [_t("cold", 28.6, 9.0, 3.1), _t("w1", 0.02, 4.0, 2.0), _t("w2", 0.03, 5.0, 3.0),
               _t("crash", 0.0, 1.0, 0.0, status="crash")]
    builds = [{"compiled": True, "compile_seconds": 90.0}, {"compiled": True, "compile_seconds": 100.0},
              {"compiled": False, "compile_seconds": 60.0}]
    tp = sc.throughput_summary(timings, builds, compile_wall_s=300.0, workers=16,
                               kb_rows=[{"seconds": 1.0}, {"seconds": 3.0}], scaling="not measured (time limit)",
                               goal={"kernels": 3, "per_kernel_s": 1.0},
                               published={"all_gated": {"n": 5, "median": 9.5, "p90": 13.2}})
    assert tp["kernels_audited"] == 4 and tp["kernels_timed"] == 3
    assert tp["per_kernel_cold_s"]["ids"] == ["cold"] and tp["per_kernel_cold_s"]["median"] == 40.7
    assert tp["per_kernel_warm_s"] == {"n": 2, "median": round((6.02 + 8.03) / 2, 3), "p90": 7.829}
    assert tp["per_kernel_s"]["median"] == 8.03
    assert tp["phases_warm_s"]["reference_s"]["n"] == 2
    c = tp["compile_s"]
    assert (c["builds"], c["built"], c["failed"], c["median"], c["wall_per_build"]) == (3, 2, 1, 95.0, 100.0)
    assert tp["kernelbench_s"]["median"] == 2.0
    assert tp["scaling"] == "not measured (time limit)"
    assert tp["goal"]["met"] is False and tp["goal"]["measured_kernels"] == 3
    assert tp["published_b200_s"]["all_gated"]["median"] == 9.5


def test_goal_met_only_with_enough_fast_kernels():
    fast = [_t(str(i), 0.01, 0.3, 0.2) for i in range(3)]
    goal = {"kernels": 3, "per_kernel_s": 1.0}
    assert sc.throughput_summary(fast, [], compile_wall_s=None, workers=1, goal=goal)["goal"]["met"] is True
    assert sc.throughput_summary(fast[:2], [], compile_wall_s=None, workers=1, goal=goal)["goal"]["met"] is False


def test_gate_status_counts_and_kb_outcomes():
    rows = [_row("a", fails=("CMP-03",)), _row("b"), _row("c", profile="fast-math"), _row("d", status="crash")]
    counts = sc.gate_status_counts(rows)
    assert counts["strict"]["CMP-03"] == {"fail": 1, "pass": 1}
    assert counts["fast-math"]["CMP-01"] == {"pass": 1}
    assert sc.kb_outcomes([{"outcome": "correct"}, {"outcome": "correct"}, {"outcome": "timeout"}]) == {
        "correct": 2, "timeout": 1}
