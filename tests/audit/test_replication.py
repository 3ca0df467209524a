"""The replication's aggregates: KernelBench's real check decides the headline population (lethe.audit.replication)."""

from __future__ import annotations

import json

from lethe.audit.replication import corpus_aggregates
from lethe.audit.tables import render_markdown


def _row(i, profile, fail=()):
    gates = {g: {"status": "fail" if g in fail else "pass", "reason": ""} for g in ("CMP-01", "EXC-01", "ORD-02")}
    return {"id": i, "profile": profile, "status": "gated", "gates": json.dumps(gates), "error": None,
            "final_speedup": None, "op_class": None}


def test_headline_is_over_what_kernelbench_accepted_and_every_kernel_is_still_counted():
    rows = []
    for p in ("strict", "fast-math"):
        rows += [_row("level_1_problem_1_sample_0", p, fail=("EXC-01",) if p == "strict" else ()),
                 _row("level_1_problem_2_sample_0", p), _row("level_1_problem_3_sample_0", p, fail=("EXC-01",)),
                 _row("level_1_problem_4_sample_0", p)]
    kb = [{"id": "level_1_problem_1_sample_0", "correct": True}, {"id": "level_1_problem_2_sample_0", "correct": True},
          {"id": "level_1_problem_3_sample_0", "correct": False}]  # problem 4: not judged by KernelBench
    agg = corpus_aggregates(rows, kb, "demo", {"level_1_problem_1_sample_0": "matmul"})
    assert agg["population"] == {"audited": 4, "kernelbench_judged": 3, "kernelbench_accepted": 2,
                                 "kernelbench_rejected": 1, "not_judged_by_kernelbench": 1,
                                 "op_class": {"None": 3, "matmul": 1}}
    assert (agg["floor"]["kernels"], agg["floor"]["denominator"]) == (1, 2)  # problem 3's failure is not in it
    assert (agg["all_audited"]["floor"]["kernels"], agg["all_audited"]["floor"]["denominator"]) == (2, 4)
    assert agg["funnel"]["rows"] == 4 and agg["funnel"]["dropped_ids"]["not_accepted"] == [
        "level_1_problem_3_sample_0", "level_1_problem_4_sample_0"]
    assert agg["by_profile"]["fast-math"]["floor"]["kernels"] == 0  # the strict-only failure is gone there
    md = render_markdown(agg, "t", "n")
    assert "Accepted by KernelBench's own check" in md and "final_speedup" not in md
    assert "| fast-math | 0.0% |" in md and "every audited kernel | 2 | 4 | 50.0% |" in md
