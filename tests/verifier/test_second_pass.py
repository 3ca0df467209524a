"""The reference's second pass (lethe.plan/8): the floors of the probes a candidate failed, measured after it ran.

What it must do: ask only for probes whose failure a floor could change (a refused floor, a failure within
SECOND_PASS_RATIO of a measured one, any value failure of a cheap probe), never for shape or non-finite failures; measure floors that are a maximum
over a superset of the first pass's draws (so nothing the first pass passed can fail); return only floors; and
clear a correct kernel whose floor the budget refused while a violating one still fails."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lethe.verifier import api, battery
from lethe.verifier import probes as P
from lethe.verifier import reference as R
from lethe.verifier.testing import inprocess_runner


def _row(status: str, probes: dict) -> dict:
    return {"status": status, "reason": "", "seed": 0, "evidence": json.dumps({"probes": probes})}


def _summary(ok: bool, ratio: float, **kw) -> dict:
    return {"ok": ok, "n_bad": 0 if ok else 1, "max_err_over_tol": ratio, "new_nonfinite": 0, "lost_nonfinite": 0,
            **kw}


REF_META = {"probes": [{"id": pid, "status": "ok", "est_s": 1.0, "cond": {"draws": 0 if pid == "ord01" else 4}}
                       for pid in ("rand0", "ord01", "nonfinite", "grad", "repeat")]}


def test_requests_marginal_and_refused_failures_only():
    graded = {"strict": {
        "CMP-01": _row("fail", {"rand0": {"status": "fail", "outputs": [_summary(False, 14.0)]}}),
        "ORD-01": _row("fail", {"ord01": {"status": "fail", "outputs": [_summary(False, 9e5)],
                                          "floor": "not measured: an estimated ..."}}),
        "EXC-01": _row("fail", {"nonfinite": {"status": "fail",
                                              "outputs": [_summary(False, 1.1, new_nonfinite=3)]}}),
        "CMP-02": _row("fail", {"grad": {"status": "fail", "checks": {"input0": _summary(False, 50.0)}}}),
        "ORD-02": _row("fail", {"repeat": {"status": "fail", "outputs": [_summary(False, 1.0)]}}),
    }}
    req = api.second_pass_requests(graded, REF_META)
    # within SECOND_PASS_RATIO of a measured floor, or within SECOND_PASS_RATIO_UNMEASURED of a refused one; not a
    # non-finite change, a gate that reads no floor, or (below) a large failure of an expensive probe
    assert req == {"ord01": {"mult": battery.SECOND_PASS_MULT, "store": True, "unmeasured": True},
                   "rand0": {"mult": battery.SECOND_PASS_MULT, "store": True, "unmeasured": False}}


def test_no_request_for_a_large_failure_with_its_floor_measured_or_a_shape_failure():
    graded = {"strict": {
        "CMP-01": _row("fail", {"rand0": {"status": "fail", "outputs": [_summary(False, 20.0)]}}),
        "CMP-03": _row("fail", {"rand0": {"status": "fail",
                                          "outputs": [{"ok": False, "why": "shape"}], "floor": "not measured"}}),
        "PRC-01": _row("pass", {"rand0": {"status": "pass", "outputs": [_summary(True, 0.5)]}}),
    }}
    assert api.second_pass_requests(graded, REF_META) == {}
    # the same failure of a probe whose forward is cheap is re-measured; past the unmeasured ratio it is not
    cheap = {"probes": [{**m, "est_s": battery.SECOND_PASS_CHEAP_S} for m in REF_META["probes"]]}
    assert set(api.second_pass_requests(graded, cheap)) == {"rand0"}
    graded["strict"]["CMP-01"] = _row("fail", {"rand0": {"status": "fail", "outputs": [_summary(False, 2e6)]}})
    assert api.second_pass_requests(graded, cheap) == {}


def test_requests_merge_across_profiles_and_replays():
    a = {"rand0": {"mult": 1, "store": False, "unmeasured": True}}
    b = {"rand0": {"mult": 4, "store": True, "unmeasured": False}, "ord01": {"mult": 1, "store": True,
                                                                           "unmeasured": False}}
    assert api.merge_requests(a, b) == {"ord01": {"mult": 1, "store": True, "unmeasured": False},
                                        "rand0": {"mult": 4, "store": True, "unmeasured": True}}
    row = {"gates": {"CMP-01": _row("pass", {"rand0": {"status": "pass", "second_pass": {
                         "mult": 4, "store": True, "unmeasured": False, "mult_run": 4}}}),
                     "ORD-01": _row("fail", {"ord01": {"status": "fail", "second_pass": {
                         "mult": 1, "store": True, "unmeasured": False, "not_measured": "time"}}})}}
    assert api.recorded_requests(row) == b


def test_merge_replaces_only_measured_probes():
    ref = {"ok": True, "probes": [{"id": "rand0", "status": "ok", "cond": {"draws": 4}},
                                  {"id": "ord01", "status": "ok", "cond": {"draws": 0, "reason": "not measured"}}]}
    arrays = {"p/rand0/cond0": np.zeros(3), "p/ord01/ref0": np.ones(3)}
    second = {"ok": True, "probes": [{"id": "rand0", "status": "ok", "mult": 4, "cond": {"draws": 16}},
                                     {"id": "ord01", "status": "na", "reason": "reference exceeded its 1 s budget"}]}
    sarr = {"p/rand0/cond0": np.ones(3), "p/ord01/cond0": np.ones(3)}
    req = {"rand0": {"mult": 4, "store": True}, "ord01": {"mult": 1, "store": True}}
    ref2, arr2 = api.merge_second_pass(ref, arrays, second, sarr, req)
    m = {p["id"]: p for p in ref2["probes"]}
    assert m["rand0"]["cond"]["draws"] == 16 and m["rand0"]["second_pass"] == {**req["rand0"], "mult_run": 4}
    assert m["ord01"]["cond"]["draws"] == 0 and "budget" in m["ord01"]["second_pass"]["not_measured"]
    assert np.array_equal(arr2["p/rand0/cond0"], np.ones(3)) and "p/ord01/cond0" not in arr2
    assert ref["probes"][0]["cond"]["draws"] == 4 and np.array_equal(arrays["p/rand0/cond0"], np.zeros(3))


# Two nearly equal linear maps subtracted (KernelBench L2/93's shape of trouble, small: a layer's output cancelled
# by what follows it): the honest fp32 error of the layer is far above a bound scaled by the cancelled output, and
# only the conditioning floor admits it.
REF = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(256, 64)
        with torch.no_grad():
            self.lin.weight[32:] = self.lin.weight[:32] * (1 + 1e-4 * torch.randn(32, 256))
            self.lin.bias[32:] = self.lin.bias[:32]

    def forward(self, x):
        y = self.lin(x)
        return y[:, :32] - y[:, 32:]


def get_inputs():
    return [torch.randn(16, 256)]


def get_init_inputs():
    return []
'''


def _run_first(tmp_path, budget=None):
    payload = {"ref_src": REF, "seed": 3, "device": "cpu", "budget": budget or {"timeout_s": 600.0}}
    res, arrays = R._run_reference(payload, tmp_path, R._Budget(payload["budget"]))
    assert res["ok"], res
    return res, arrays


def test_second_pass_draws_are_a_superset_and_return_only_floors(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, farr = _run_first(tmp_path / "a")
    req = {"rand0": {"mult": 4, "store": True}, "offset": {"mult": 4, "store": True}}
    payload = {"ref_src": REF, "seed": 3, "device": "cpu", "budget": {"timeout_s": 600.0}, "floors_for": req}
    res, arrays = R._run_reference(payload, tmp_path / "b", R._Budget(payload["budget"]))
    assert res["second_pass"] and {m["id"] for m in res["probes"]} == set(req)
    assert all(R.SECOND_PASS_KEY.match(k) for k in arrays)
    meta = {m["id"]: m for m in res["probes"]}
    assert meta["rand0"]["cond"]["draws"] == 4 * P.COND_DRAWS and meta["rand0"]["cond"]["store_draws"] == 2 * 4
    # every first-pass floor is at most the second pass's, element by element
    for k in ("p/rand0/cond0",):
        assert np.all(arrays[k] >= farr[k])
    assert np.any(arrays["p/rand0/cond0"] > farr["p/rand0/cond0"])
    assert arrays["p/rand0/store0"].shape == farr["p/rand0/ref0"].shape
    if meta["offset"]["status"] == "ok":
        assert meta["offset"]["offset"]["draws"] == 4 * P.OFFSET_DRAWS
        assert np.all(arrays["p/offset/sens0"] >= farr["p/offset/sens0"])


CAND_FP32 = REF.replace("class Model(", "class ModelNew(")
# The same chain with the linear layer's output kept in bfloat16: a storage narrower than the contract's, ~2^8 over
# what fp32 storage does; no floor of the second pass (which stores in fp32) may admit it.
CAND_BF16 = CAND_FP32.replace("y = self.lin(x)\n", "y = self.lin(x).to(torch.bfloat16).to(x.dtype)\n")
assert CAND_BF16 != CAND_FP32


def test_the_second_pass_plans_its_rounds_from_the_estimates(tmp_path):
    """A budget that affords the first pass's draws of the unmeasured probe but not SECOND_PASS_MULT times them:
    round one measures it at the first pass's draws; the measured probe that asked only for more draws is not
    measured and says why. The same budget gives the same answer on any machine (estimates, not the clock)."""
    ns: dict = {}
    exec(compile(REF, "ref", "exec"), ns)  # noqa: S102 - the test's own reference
    plan = {p.id: p for p in P.build_plan(ns, 3)}
    req = {"ord01": {"mult": 4, "store": True, "unmeasured": True},
           "rand0": {"mult": 4, "store": True, "unmeasured": False}}
    one = R._second_pass_cost(plan["ord01"], {**req["ord01"], "mult": 1})
    four = R._second_pass_cost(plan["ord01"], req["ord01"])
    assert four > one > 0
    timeout = 1.01 * one / R.SECOND_PASS_TIME_SHARE
    payload = {"ref_src": REF, "seed": 3, "device": "cpu", "budget": {"timeout_s": timeout}, "floors_for": req}
    budget = R._Budget(payload["budget"])
    res, arrays = R.second_pass(ns, _model(ns), _states(ns), list(plan.values()), req, 3, budget, "cpu")
    meta = {m["id"]: m for m in res["probes"]}
    assert meta["ord01"]["status"] == "ok" and meta["ord01"]["mult"] == 1
    assert meta["ord01"]["cond"]["draws"] == P.COND_DRAWS and "p/ord01/store0" in arrays
    assert meta["rand0"]["status"] == "na" and meta["rand0"]["reason"].startswith("not measured: an estimated")
    assert not any(k.startswith("p/rand0/") for k in arrays)


def _model(ns):
    import torch

    torch.manual_seed(3)
    return ns["Model"]().double()


def _states(ns):
    m = _model(ns)
    st = {k: v.detach().clone() for k, v in m.state_dict().items()}
    return {"float32": st, "float16": R._round_state(st, "float16"), "bfloat16": R._round_state(st, "bfloat16")}


@pytest.mark.parametrize("share", [0.0, R.FLOOR_TIME_SHARE])
def test_a_refused_floor_is_measured_afterwards_three_states(monkeypatch, share):
    """The honest fp32 chain fails ORD-01 on its positive rows without the second pass (every optional floor refused,
    FLOOR_TIME_SHARE 0; or with the first pass's floor, a few draws' maximum) and passes with it; the bf16-storage
    chain fails with it; and KernelBench's own loose check (atol = rtol = 1e-2) passes the violator."""
    monkeypatch.setattr(R, "FLOOR_TIME_SHARE", share)
    api._REF_CACHE.clear()

    def run(cand, second):
        if not second:
            monkeypatch.setattr(api, "second_pass_requests", lambda graded, ref, arrays=None: {})
        try:
            return api.verify(REF, cand, seed=3, runner=inprocess_runner, device="cpu")
        finally:
            monkeypatch.undo()
            monkeypatch.setattr(R, "FLOOR_TIME_SHARE", share)

    honest_without = run(CAND_FP32, second=False)
    assert honest_without["gates"]["ORD-01"]["status"] == "fail", honest_without["gates"]["ORD-01"]["reason"]
    honest = run(CAND_FP32, second=True)
    assert honest["gates"]["ORD-01"]["status"] == "pass", honest["gates"]["ORD-01"]["reason"]
    failed_before = [pid for pid, e in json.loads(honest_without["gates"]["ORD-01"]["evidence"])["probes"].items()
                     if e["status"] == "fail"]
    after = json.loads(honest["gates"]["ORD-01"]["evidence"])["probes"]
    for pid in failed_before:  # each says what the second pass measured
        assert after[pid]["second_pass"]["store"] is True and "not_measured" not in after[pid]["second_pass"]
    bad = run(CAND_BF16, second=True)
    assert api.failed_gates(bad), bad["gates"]

    from lethe.verifier.testing import kb_allclose

    assert kb_allclose(REF, CAND_BF16, seed=3)
