"""Which optional conditioning floors the float64 reference measures is decided by the plan's estimates alone
(lethe.plan/7), never by the clock or the process's memory: the same reference, seed and budget give the same
floors, and so the same verdict, on a fast machine and on a loaded one (trusted-corpus defect D10)."""

from __future__ import annotations

import time

import numpy as np

from lethe.verifier import probes as P
from lethe.verifier import reference as R

REF = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(48, 40)

    def forward(self, x):
        return torch.relu(self.lin(x)) - 0.5


def get_inputs():
    return [torch.randn(32, 48)]


def get_init_inputs():
    return []
'''

BUDGET = {"timeout_s": 120.0, "memory_mb": 4096}


def _run(tmp_path):
    payload = {"ref_src": REF, "seed": 7, "device": "cpu", "budget": BUDGET}
    tmp_path.mkdir()
    res, arrays = R._run_reference(payload, tmp_path, R._Budget(payload["budget"]))
    assert res["ok"], res
    floors = {m["id"]: (m.get("cond") or {}).get("draws", 0) for m in res["probes"]}
    reasons = {m["id"]: (m.get("cond") or {}).get("reason", "") for m in res["probes"]}
    return floors, reasons, arrays


def test_floors_do_not_depend_on_the_clock(tmp_path, monkeypatch):
    """A machine that runs every forward 50 s slower (a loaded host) measures the same floors, bit for bit:
    the old rule compared the seconds used so far with half the budget and refused them there."""
    floors, reasons, arrays = _run(tmp_path / "a")
    assert any(d > 0 for pid, d in floors.items() if pid not in ("rand0",)), floors
    clock = [0.0]

    def slow() -> float:
        clock[0] += 50.0
        return clock[0]

    monkeypatch.setattr(time, "monotonic", slow)
    floors2, reasons2, arrays2 = _run(tmp_path / "b")
    assert (floors2, reasons2) == (floors, reasons)
    assert sorted(arrays2) == sorted(arrays)
    assert all(np.array_equal(arrays[k], arrays2[k], equal_nan=True) for k in arrays)


def test_plan_carries_an_estimate_for_every_run_probe():
    ns: dict = {}
    exec(compile(REF, "ref", "exec"), ns)  # noqa: S102 - the test's own reference
    plan = P.build_plan(ns, 7)
    run = [p for p in plan if not p.skip]
    assert run and all(p.extra["est_s"] > 0 and p.extra["est_mb"] >= 0 for p in run)
    base = next(p for p in plan if p.id == "rand0")
    assert P.forwards_run(base) == 1
    grad = next(p for p in plan if p.id == "grad")
    assert P.forwards_run(grad) == 3 + 2 * P.FD_POSITIONS


def test_a_floor_over_the_estimated_budget_is_refused_and_says_why():
    budget = R._Budget({"timeout_s": 10.0, "memory_mb": 4096})
    probe = P.Probe("zeros", "zeros", ("CMP-01",), extra={"est_s": 1.0, "est_mb": 1.0})
    assert budget.floor_refusal(probe, 4, 1024, 0) == ""
    budget.charge(P.Probe("rand0", "rand", ("CMP-01",), extra={"est_s": 1.0}), 0)
    budget.charge(P.Probe("grad", "rand", ("CMP-02",), action="backward", extra={"est_s": 0.1}), 0)
    assert budget.est_used == 1.0 + 0.1 * (3 + 2 * P.FD_POSITIONS)
    why = budget.floor_refusal(probe, 4, 1024, 0)
    assert why.startswith("not measured: an estimated 2.1 s of reference work so far + 4 s") and "plan's" in why
    # memory: the arrays held, the spread and one forward's estimated peak against 60% of the budget
    assert "MB of arrays held" in budget.floor_refusal(
        P.Probe("x", "zeros", ("CMP-01",), extra={"est_s": 0.0, "est_mb": 100.0}), 4, 0, 2400 * 2**20)
    # a probe the plan could not estimate measures its floor
    assert budget.floor_refusal(P.Probe("y", "zeros", ("CMP-01",)), 4, 0, 0) == ""


def test_a_replay_of_one_gate_measures_the_floors_the_full_run_measured(tmp_path):
    """A gate filter (lethe replay, lethe repro) runs fewer probes; the ones it leaves out are charged as the full
    run charged them, so each kept probe's floor is measured or refused exactly as in the full run."""
    seen = set()
    for i, timeout in enumerate((1e-3, 3e-2, 1.0)):
        runs = []
        for only in ([], ["PRC-02"]):
            payload = {"ref_src": REF, "seed": 7, "device": "cpu", "only_gates": only,
                       "budget": {"timeout_s": timeout, "memory_mb": 4096}}
            work = tmp_path / f"{i}-{len(only)}"
            work.mkdir()
            res, _ = R._run_reference(payload, work, R._Budget(payload["budget"]))
            runs.append({m["id"]: (m.get("cond") or {}).get("draws", 0) for m in res["probes"]
                         if "PRC-02" in m["gates"]})
        full, replay = runs
        assert replay == full, (timeout, full, replay)
        seen |= {bool(d) for d in full.values()}
    assert seen == {True, False}  # some PRC-02 floors measured, some refused, over the budgets tried
