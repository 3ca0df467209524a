"""Three-state calibration of every gate: a conforming implementation passes, a violator fails that gate, and
(where meaningful) the violator passes a KernelBench-style allclose(atol=rtol=1e-2) check."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lethe.verifier import fixtures as K
from lethe.verifier import gates as G
from lethe.verifier import profiles
from lethe.verifier.api import verdict
from lethe.verifier.testing import kb_allclose, kb_grad_allclose

_ROWS: dict = {}


@pytest.fixture
def row(verify_local):
    def get(ref, cand, profile="strict"):
        key = (ref, cand, profile)
        if key not in _ROWS:
            _ROWS[key] = verify_local(ref, cand, profile=profile, seed=7)
        return _ROWS[key]

    return get


def status(r, gate):
    return r["gates"][gate]["status"]


@pytest.mark.parametrize("ref", [K.SOFTMAX_REF, K.SUM_REF, K.LINEAR_REF, K.SCALE_REF])
def test_conforming_references_pass_every_applicable_gate(row, ref):
    r = row(ref, K.as_candidate(ref))
    assert r["status"] == "gated"
    bad = {g: v["reason"] for g, v in r["gates"].items() if v["status"] not in ("pass", "na")}
    assert not bad, bad
    assert verdict(r) == "pass"
    assert status(r, "RES-02") == "na"  # no compiled artifact on a CPU


def test_cmp01_values(row):
    bad = row(K.SOFTMAX_REF, K.SOFTMAX_BF16_INSIDE)
    assert status(bad, "CMP-01") == "fail"
    assert kb_allclose(K.SOFTMAX_REF, K.SOFTMAX_BF16_INSIDE)
    ev = json.loads(bad["gates"]["CMP-01"]["evidence"])
    assert ev["probes"]["rand0"]["outputs"][0]["max_err_over_tol"] > 1


def test_cmp02_gradients(row):
    good = row(K.LINEAR_REF, K.LINEAR_CONFORMING)
    assert status(good, "CMP-02") == "pass" and good["weights_copied"]
    bad = row(K.LINEAR_REF, K.LINEAR_BAD_BACKWARD)
    assert status(bad, "CMP-01") == "pass"  # the forward is exact
    assert status(bad, "CMP-02") == "fail"
    assert kb_grad_allclose(K.LINEAR_REF, K.LINEAR_BAD_BACKWARD)
    fwd_only = row(K.LINEAR_REF, K.LINEAR_FORWARD_ONLY)
    assert status(fwd_only, "CMP-02") == "na"  # never "pass"
    assert "forward-only" in fwd_only["gates"]["CMP-02"]["reason"]


def test_cmp02_reference_is_cross_checked_by_finite_differences(row):
    ev = json.loads(row(K.LINEAR_REF, K.LINEAR_CONFORMING)["gates"]["CMP-02"]["evidence"])
    fd = ev["probes"]["grad"]["fd"]
    assert fd["checked"] > 0 and fd["ok"]


def test_cmp03_shapes(row):
    bad = row(K.SOFTMAX_REF, K.SOFTMAX_FIXED_BLOCKS)
    assert status(bad, "CMP-03") == "fail"
    assert "shape_dim=61" in bad["gates"]["CMP-03"]["reason"]
    assert kb_allclose(K.SOFTMAX_REF, K.SOFTMAX_FIXED_BLOCKS)
    ev = json.loads(row(K.SOFTMAX_REF, K.as_candidate(K.SOFTMAX_REF))["gates"]["CMP-03"]["evidence"])
    assert {"shape_batch_size=3", "shape_batch_size=5", "shape_dim=61", "shape_dim=67"} <= set(ev["probes"])


def test_ord01_reordered_summation_bound(row):
    bad = row(K.SUM_REF, K.SUM_BF16_BLOCKS)
    assert status(bad, "ORD-01") == "fail"
    assert kb_allclose(K.SUM_REF, K.SUM_BF16_BLOCKS)


def test_ord02_determinism_and_aliasing(row):
    nondet = row(K.SOFTMAX_REF, K.SOFTMAX_NONDET)
    assert status(nondet, "ORD-02") == "fail"
    assert kb_allclose(K.SOFTMAX_REF, K.SOFTMAX_NONDET)
    # fast-math asks for determinism only up to the ORD-01 bound; a last-bit wobble is inside it.
    assert status(row(K.SOFTMAX_REF, K.SOFTMAX_NONDET, "fast-math"), "ORD-02") == "pass"
    shared = row(K.SOFTMAX_REF, K.SOFTMAX_SHARED_BUFFER)
    assert status(shared, "ORD-02") == "fail" and shared["output_aliasing"]
    assert "later call overwrote" in shared["gates"]["ORD-02"]["reason"]
    assert kb_allclose(K.SOFTMAX_REF, K.SOFTMAX_SHARED_BUFFER)
    inplace = row(K.SCALE_REF, K.SCALE_INPLACE)
    assert status(inplace, "ORD-02") == "fail"
    assert "input" in inplace["gates"]["ORD-02"]["reason"]
    assert kb_allclose(K.SCALE_REF, K.SCALE_INPLACE)


def test_ord03_cancellation(row):
    # a serial running total kept in fp16: the cancellation row's small terms are all below half its ulp
    bad = row(K.SUM_REF, K.SUM_SEQUENTIAL)
    assert status(bad, "ORD-03") == "fail"
    ev = json.loads(bad["gates"]["ORD-03"]["evidence"])
    assert ev["probes"]["cancel"]["outputs"][0]["max_err_over_tol"] > 100
    assert kb_allclose(K.SUM_REF, K.SUM_SEQUENTIAL)


def test_prc01_precisions(row):
    bad = row(K.SOFTMAX_REF, K.SOFTMAX_FP16_QUANT)
    assert status(bad, "PRC-01") == "fail" and "prc_fp16" in bad["gates"]["PRC-01"]["reason"]
    assert kb_allclose(K.SOFTMAX_REF, K.SOFTMAX_FP16_QUANT)
    only32 = row(K.SOFTMAX_REF, K.SOFTMAX_FP32_ONLY)
    assert status(only32, "PRC-01") == "pass"  # charged only for the precision it accepts
    ev = json.loads(only32["gates"]["PRC-01"]["evidence"])["probes"]
    assert ev["prc_fp16"]["status"] == "na" and ev["rand0"]["status"] == "pass"


def test_prc02_fp32_accumulation(row):
    bad = row(K.SUM_REF, K.SUM_HALF_ACC)
    assert status(bad, "PRC-02") == "fail"
    assert status(bad, "CMP-01") == "pass"
    assert kb_allclose(K.SUM_REF, K.SUM_HALF_ACC)


def test_exc01_nonfinite_propagation(row):
    bad = row(K.SOFTMAX_REF, K.SOFTMAX_NAN_TO_NUM)
    assert status(bad, "EXC-01") == "fail"
    ev = json.loads(bad["gates"]["EXC-01"]["evidence"])["probes"]["nonfinite"]["outputs"][0]
    assert ev["lost_nonfinite"] > 0
    assert kb_allclose(K.SOFTMAX_REF, K.SOFTMAX_NAN_TO_NUM)
    # Under fast-math the reference's NaN positions are not graded (all of softmax's are NaN rows).
    assert status(row(K.SOFTMAX_REF, K.SOFTMAX_NAN_TO_NUM, "fast-math"), "EXC-01") == "pass"
    good = json.loads(row(K.SOFTMAX_REF, K.as_candidate(K.SOFTMAX_REF))["gates"]["EXC-01"]["evidence"])
    assert good["probes"]["nonfinite"]["outputs"][0]["agreeing_nonfinite"] > 0


def test_exc02_subnormals_per_profile(row):
    bad = row(K.SCALE_REF, K.SCALE_FTZ)
    assert status(bad, "EXC-02") == "fail"
    assert kb_allclose(K.SCALE_REF, K.SCALE_FTZ)
    assert status(row(K.SCALE_REF, K.SCALE_FTZ, "cuda-default"), "EXC-02") == "pass"
    assert status(row(K.SCALE_REF, K.SCALE_FTZ, "cuda-default"), "CMP-01") == "pass"


def test_res01_dtype(row):
    bad = row(K.SCALE_REF, K.SCALE_DOUBLE)
    assert status(bad, "RES-01") == "fail"
    assert "dtype" in bad["gates"]["RES-01"]["reason"]


def _res_bundle(reports, profile="strict"):
    return G.Bundle(ref={"probes": []}, ref_arrays={}, cand={"resources": reports}, cand_arrays={},
                    profile=profiles.get(profile), seed=3, device="cuda")


def test_res02_hardware_limits_pure():
    pytest.importorskip("lethe.aot.limits")
    base = {"target": "sm_90a", "kernel": "k", "registers": 128, "shared_bytes": 65536, "tmem_columns": 0,
            "spill_bytes": 0, "num_warps": 4, "num_stages": 3}
    assert G.res_02(_res_bundle([base])).status == "pass"
    # pitfalls.md: a 256^3 fp32 tile compiled "fine" to 2 MiB of shared memory on sm_90 (limit 232,448 B).
    big = dict(base, shared_bytes=2_097_152)
    res = G.res_02(_res_bundle([base, big]))
    assert res.status == "fail" and "shared memory" in res.reason
    tmem = dict(base, target="sm_100a", tmem_columns=1024)
    assert G.res_02(_res_bundle([tmem])).status == "fail"
    assert G.res_02(_res_bundle([])).status == "na"


def test_res02_spills_are_charged_under_strict_only():
    """The contract lists local-memory spill; strict allows none, the other profiles only report it
    (red_team/res02_matmul_wide_acc_triton compiles to 255 registers and 11 KB of spill on sm_90a)."""
    pytest.importorskip("lethe.aot.limits")
    spilling = {"target": "sm_90a", "kernel": "k", "registers": 255, "shared_bytes": 147456, "tmem_columns": 0,
                "spill_bytes": 11000, "num_warps": 4, "num_stages": 2}
    strict = G.res_02(_res_bundle([spilling]))
    assert strict.status == "fail" and "spill" in strict.reason
    for other in ("cuda-default", "fast-math"):
        assert G.res_02(_res_bundle([spilling], other)).status == "pass"
    assert G.res_02(_res_bundle([dict(spilling, spill_bytes=0)])).status == "pass"


def test_compare_nonfinite_semantics():
    p = profiles.get("strict")
    r = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert G.compare(r, r.astype(np.float32), "float32", 1e-6, p)["ok"]
    flipped = np.array([np.nan, -np.inf, -np.inf, 1.0], dtype=np.float32)
    assert not G.compare(r, flipped, "float32", 1e-6, p)["ok"]
    new_nan = np.array([np.nan, np.inf, -np.inf, np.nan], dtype=np.float32)
    s = G.compare(r, new_nan, "float32", 1e-6, p)
    assert not s["ok"] and s["new_nonfinite"] == 1
    # A float64 value beyond fp32's range must come back as +Inf in an fp32 contract.
    assert G.compare(np.array([1e39]), np.array([np.inf], dtype=np.float32), "float32", 0.0, p)["ok"]


def test_gate_error_is_recorded_not_raised():
    b = G.Bundle(ref={"probes": [{"id": "x", "gates": ["CMP-01"], "status": "ok"}]}, ref_arrays={},
                 cand={"probes": {"x": {}}}, cand_arrays={}, profile=profiles.get("strict"), seed=0)
    out = G.grade(b)
    assert out["CMP-01"].status == "error"


@pytest.mark.parametrize("case", K.CALIBRATION, ids=lambda c: f"{c[0]}-{c[2]}-{c[3]}")
def test_calibration_registry(row, case):
    """The registry the compute rule and the calibration stage use says what the tests observe."""
    gate, ref, cand, profile, expected, kb = case
    r = row(getattr(K, ref), getattr(K, cand), profile)
    assert status(r, gate) == expected, r["gates"][gate]["reason"]
    if kb is not None:
        assert kb_allclose(getattr(K, ref), getattr(K, cand)) is kb


def test_profiles_share_one_run():
    """verify_profiles grades the same two process runs under every profile (the gates are pure)."""
    from lethe.verifier import api
    from lethe.verifier.testing import inprocess_runner

    rows = api.verify_profiles(K.SCALE_REF, K.SCALE_FTZ, profiles=["strict", "cuda-default", "fast-math"],
                               device="cpu", seed=7, runner=inprocess_runner)
    assert [r["profile"] for r in rows] == ["strict", "cuda-default", "fast-math"]
    assert [status(r, "EXC-02") for r in rows] == ["fail", "pass", "pass"]


@pytest.mark.parametrize("name", sorted(K.EDGE_REFS))
@pytest.mark.slow
def test_kernelbench_shaped_references_conform(verify_local, name):
    ref = K.EDGE_REFS[name]
    r = verify_local(ref, K.as_candidate(ref), seed=3)
    assert r["status"] == "gated"
    bad = {g: v["reason"] for g, v in r["gates"].items() if v["status"] not in ("pass", "na")}
    assert not bad, bad
    if name == "argmax":
        assert status(r, "CMP-02") == "na"  # integer output: nothing to differentiate


STABLE_SOFTMAX_REF = '''
import torch
import torch.nn as nn
batch_size = 4096
dim = 4096
class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.softmax(x, dim=-1)
def get_inputs():
    return [torch.randn(batch_size, dim)]
def get_init_inputs():
    return []
'''
# Hand-written, max-shifted softmax with autograd's backward: correct, and numerically stable. Its backward sums
# each row's N = 4096 gradient terms for the max's gradient (exactly 0 in exact arithmetic), which lands on the
# argmax element with the rounding of an N-term sum.
STABLE_SOFTMAX = '''
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
        return e / e.sum(dim=-1, keepdim=True)
'''


@pytest.mark.slow
def test_cmp02_stable_hand_softmax_passes_at_kernelbench_width(verify_local):
    r = verify_local(STABLE_SOFTMAX_REF, STABLE_SOFTMAX, seed=0, only_gates=["CMP-02"])
    g = r["gates"]["CMP-02"]
    assert g["status"] == "pass", g["reason"]
    ev = json.loads(g["evidence"])
    # graded, not skipped: the gradient of the input was compared on every element
    assert ev["probes"]["grad"]["checks"]["input0"]["n"] == 4096 * 4096


@pytest.mark.parametrize("member", ["cmp02_silu_wrong_backward", "cmp02_rmsnorm_detached_rstd"])
def test_cmp02_red_team_violators_still_fail(verify_local, member):
    from lethe.redteam.manifest import DATA_ROOT

    d = DATA_ROOT / "red_team" / member
    r = verify_local((d / "ref.py").read_text(), (d / "cand.py").read_text(), seed=0, only_gates=["CMP-02"])
    assert r["gates"]["CMP-02"]["status"] == "fail"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_prc02_probe_catches_a_half_total_of_fp32_block_sums_at_every_block_size(dtype):
    """On the accumulation probe's bracketed rows, adding fp32 block sums into a 16-bit total fails the value
    tolerance for every power-of-two block size the probe claims (fp16 up to 1024, bf16 up to 2048 at N = 4099),
    while an fp32 total of the same blocks -- any block size -- is exact."""
    import torch

    from lethe.verifier import probes as VP
    from lethe.verifier import tolerance as VT

    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    n = VP.LONG_LEN
    x = VP.accumulation_values((3, n)).to(tdt)
    ref = x.double().sum(-1).numpy()
    t = VT.prc02_bracket_tol(ref, VT.output_scale(x.double().abs().sum(-1).numpy()), dtype, n)

    def blocked(block, total_dtype):
        acc = torch.zeros(3, dtype=total_dtype)
        for s in range(0, n, block):
            acc = (acc.float() + x[:, s:s + block].float().sum(-1)).to(total_dtype)
        return acc.to(tdt).double().numpy()

    for block in [2**k for k in range(0, 12 if dtype == "bfloat16" else 11)]:
        assert (np.abs(blocked(block, tdt) - ref) > t).any(), block
        # the fp32 total is exact: its output is the exact sum correctly rounded to the dtype
        assert np.array_equal(blocked(block, torch.float32), torch.from_numpy(ref).to(tdt).double().numpy()), block
        assert (np.abs(blocked(block, torch.float32) - ref) <= t).all(), block
