"""The probe plan's admission of the base-shape probes (lethe.verifier.probes._admit_base): a problem whose
probes all fit is planned as before; one whose arrays would overflow the reference's result file keeps one
probe per gate first, within the file, and says why it skipped the rest."""

from __future__ import annotations

from dataclasses import replace

from lethe.verifier import fixtures as K
from lethe.verifier import probes as P
from lethe.verifier.reference import load_source


def _base(plan):
    return [p for p in plan if p.id in {q.id for q in plan[:20]}]


def _returned(ns, plan, budget):
    coster = P._Coster(ns, 0, P.call_get_inputs(ns, 0, ()), budget)
    return {p.id: P.returned_bytes(coster.base_meta, coster.base, p) for p in plan}


def test_a_problem_whose_probes_fit_is_planned_as_before(tmp_path):
    ns = load_source(K.SOFTMAX_REF, "t_probes_fit", tmp_path)
    roomy = replace(P.BUDGET, result_mb=1e9)
    assert [p.to_dict() for p in P.build_plan(ns, 3)] == [p.to_dict() for p in P.build_plan(ns, 3, budget=roomy)]
    assert not any(p.skip for p in _base(P.build_plan(ns, 3)))


def test_base_probes_over_the_result_file_keep_one_per_gate_first(tmp_path):
    ns = load_source(K.SOFTMAX_REF, "t_probes_tight", tmp_path)
    full = _base(P.build_plan(ns, 0))
    sizes = _returned(ns, full, P.BUDGET)
    # A result file that holds the one-per-gate probes and nothing more.
    first = [pid for pid in P.BASE_PRIORITY]
    tight = replace(P.BUDGET, result_mb=sum(sizes[pid] for pid in first) / 2**20)
    plan = _base(P.build_plan(ns, 0, budget=tight))
    ran = [p.id for p in plan if not p.skip]
    assert set(ran) == set(first)
    assert sum(sizes[pid] for pid in ran) <= tight.result_mb * 2**20
    for p in plan:
        if p.skip:
            assert p.skip.startswith("over the per-problem budget: returning") and "result file" in p.skip
    # Every gate a base probe serves keeps at least one probe, but EXC-02's subnormal comes last among them.
    gates = {g for p in plan if not p.skip for g in p.gates}
    assert {"CMP-01", "CMP-02", "EXC-01", "EXC-02", "ORD-01", "ORD-02", "ORD-03", "PRC-01", "PRC-02"} <= gates


def test_the_base_probe_always_runs(tmp_path):
    ns = load_source(K.SOFTMAX_REF, "t_probes_none", tmp_path)
    plan = _base(P.build_plan(ns, 0, budget=replace(P.BUDGET, result_mb=1e-6)))
    assert [p.id for p in plan if not p.skip] == ["rand0"]
