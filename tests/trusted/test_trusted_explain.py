"""lethe.trusted.explain: a failing probe rebuilt as the verifier builds it, on tiny problems written here."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lethe.trusted import explain as E
from lethe.verifier import probes as P
from lethe.verifier import reference as REF
from lethe.verifier import tolerance as T

SEED = 7
SRC = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.gemm = nn.Linear(n_in, n_out)
        self.bn = nn.BatchNorm1d(n_out)

    def forward(self, x):
        return torch.relu(self.bn(self.gemm(x)))

batch_size = 8
n_in, n_out = 16, 6

def get_inputs():
    return [torch.randn(batch_size, n_in)]

def get_init_inputs():
    return [n_in, n_out]
'''
CUMPROD = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.cumprod(x, dim=1)

def get_inputs():
    return [torch.randn(3, 600)]

def get_init_inputs():
    return []
'''


def test_round_every_op_rounds_each_result_and_nothing_else():
    a, b, c = (torch.tensor([v], dtype=torch.float64) for v in (1 + 2.0**-8, 1 + 2.0**-9, 2.0**-12))
    with E.RoundEveryOp("float16"):
        got = a * b + c
    fp16 = torch.float16
    want = ((a.to(fp16).double() * b.to(fp16).double()).to(fp16).double() + c).to(fp16).double()
    assert torch.equal(got, want)
    assert got.dtype == torch.float64


def test_ideal_ops_computes_only_the_named_operator_in_float64():
    x = torch.linspace(-9, 3, 101)
    with E.ideal_ops(["gelu"]):
        got = torch.nn.functional.gelu(x)
        other = torch.exp(x)  # not named: torch's own float32 exp
    assert got.dtype == torch.float32
    assert torch.equal(got, torch.nn.functional.gelu(x.double()).float())
    assert torch.equal(other, torch.exp(x))


def test_case_rebuilds_the_verifiers_probe_inputs_and_weights():
    c = E.Case(SRC, SEED, "cancel")
    ns = REF.load_source(SRC, "lethe_test_explain")
    probe = {p.id: p for p in P.build_plan(ns, SEED)}["cancel"]
    assert all(torch.equal(a, b) for a, b in zip(c.inputs, P.make_inputs(ns, probe, SEED), strict=True))
    assert c.N == T.reduction_length([(8, 16)], [(8, 6)])
    assert c.abs_scale() > 0
    # the float64 reference is the float32 model's weights in float64; the candidate matches it to fp32 rounding
    c = E.Case(SRC, SEED, "rand0")
    ref, cand, ideal = c.ref()[0], c.cand()[0], c.ideal()[0]
    assert ref.dtype == cand.dtype == ideal.dtype == torch.float64
    assert torch.allclose(ref, cand, atol=1e-4)
    tol = c.bound()
    assert tol.shape == tuple(ref.shape)
    s = E.grade(ref, ideal, tol, "float32")
    assert s["n"] == ref.numel() and "max_err_over_tol" in s
    assert c.cond_floor().shape == tuple(ref.shape)


def test_half_precision_case_rounds_the_reference_weights_through_the_dtype():
    c = E.Case(SRC, SEED, "accb_bf16")
    w = c.state64["gemm.weight"]
    assert torch.equal(w, w.to(torch.bfloat16).double())
    assert c.candidate().gemm.weight.dtype == torch.bfloat16
    assert c.bound().shape == tuple(c.ref()[0].shape)


def test_batch_slice_keeps_the_verifiers_reduction_length():
    full, part = E.Case(SRC, SEED, "rand0"), E.Case(SRC, SEED, "rand0", batch=slice(0, 2))
    assert part.inputs[0].shape[0] == 2 and part.N == full.N
    assert torch.equal(part.inputs[0], full.inputs[0][:2])


def test_gradients_and_their_bounds_are_keyed_as_cmp02_evidence():
    c = E.Case(SRC, SEED, "grad")
    ref, cand = c.grads("ref"), c.grads("cand")
    assert set(ref) == set(cand) >= {"input0", "param:gemm.weight", "param:bn.weight"}
    bounds = c.grad_bounds(ref)
    assert {k: v.shape for k, v in bounds.items()} == {k: tuple(v.shape) for k, v in ref.items()}
    assert all(E.grade(ref[k], cand[k], bounds[k], "float32")["n_bad"] == 0 for k in ref)


def test_terms_ratio_of_a_linear_leaf_is_inside_the_any_order_bound():
    r = E.terms_ratio(E.Case(SRC, SEED, "cancel"), "gemm")
    assert r["K"] == 17  # 16 products and the bias
    assert r["max_err_over_gamma_K_terms"] <= 1.0
    assert r["rms_sum_terms"] > 0


def test_flip_counters_report_counts():
    c = E.Case(SRC, SEED, "rand0")
    f = E.sign_flips(c, "bn")
    assert f["n"] == 48 and 0 <= f["n_flips"] <= f["n"]
    a = E.argext_flips(c, "gemm", 1, "max")
    assert a["n"] == 8 and 0 <= a["n_flips"] <= 8


def test_serial_norm_is_a_batch_norm_in_the_worst_summation_order():
    x = torch.randn(64, 3, 5)
    with E.serial_norm():
        y = torch.nn.functional.batch_norm(x, None, None, training=True)
    assert torch.allclose(y, torch.nn.functional.batch_norm(x, None, None, training=True), atol=1e-5)
    # a serial fp32 sum of 4096 copies of 0.1 drifts; the mean torch returns does not
    v = torch.full((4096, 1), 0.1)
    assert abs(float(E._serial_sum(v)) - 409.6) > 1e-4


def test_cumprod_underflow_names_each_injected_infinity():
    c = E.Case(CUMPROD, SEED, "nonfinite")
    out = E.cumprod_underflow(c)
    assert len(out) == int(torch.isinf(c.inputs[0]).sum())
    for o in out:
        if o["fp32_serial_prefix"] == 0.0:
            assert o["fp32_serial_at_inf"] == "nan"


def test_fact_checks_have_their_fields():
    g = E.gelu_tails()
    assert set(g["forward_fp32"]) == {"+inf", "-inf"} and len(g["backward"]) == 11
    assert math.isinf(float(g["forward_fp64"]["+inf"]))
    h = E.half_batch_norm_stats()
    assert set(h) == {"exact_mean", "float16", "bfloat16"}
    assert set(E.cuda_matmul_defaults()) >= {"allow_bf16_reduced_precision_reduction", "torch"}
    fp = E.nonfinite_footprint(E.Case(SRC, SEED, "nonfinite"))
    assert len(fp["specials"]) == 3 and fp["outputs_per_batch_element"] == 6


def test_problem_source_reads_a_kernelbench_row_id(tmp_path):
    (tmp_path / "level2").mkdir()
    (tmp_path / "level2" / "7_Tiny.py").write_text(SRC)
    assert E.problem_source("L2/7_Tiny", tmp_path) == SRC
    assert E.problem_source("L2/7_Tiny:hand_kernel", tmp_path) == SRC
    with pytest.raises(ValueError):
        E.problem_source("not-an-id", tmp_path)


def test_grade_counts_a_bad_element():
    r = torch.zeros(4, dtype=torch.float64)
    s = E.grade(r, torch.tensor([0.0, 0.0, 1.0, 0.0]), np.full(4, 0.5), "float32")
    assert s["n_bad"] == 1 and s["first_bad"] == [[2]]
