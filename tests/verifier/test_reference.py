"""The float64 reference: refuses reduced precision, decides which inputs are valid, reports when broken."""

from __future__ import annotations

import copy

import pytest
import torch

from lethe.verifier import fixtures as K
from lethe.verifier import probes as P
from lethe.verifier.reference import Float64Reference, ReferencePrecisionError, load_source, run_reference


def test_refuses_float32_input():
    ref = Float64Reference(torch.nn.Linear(3, 2).double())
    assert ref(torch.randn(4, 3, dtype=torch.float64)).dtype == torch.float64
    with pytest.raises(ReferencePrecisionError):
        ref(torch.randn(4, 3, dtype=torch.float32))
    with pytest.raises(ReferencePrecisionError):
        ref(torch.randn(4, 3, dtype=torch.float16))


def test_refuses_reduced_precision_parameters():
    with pytest.raises(ReferencePrecisionError):
        Float64Reference(torch.nn.Linear(3, 2))  # float32 weights
    m = torch.nn.Linear(3, 2).double()
    ref = Float64Reference(m)
    m.weight.data = m.weight.data.float()  # demoted after wrapping: refused at call time
    with pytest.raises(ReferencePrecisionError):
        ref(torch.randn(1, 3, dtype=torch.float64))


def test_integer_inputs_are_allowed():
    class Gather(torch.nn.Module):
        def forward(self, x, idx):
            return x[idx]

    ref = Float64Reference(Gather())
    out = ref(torch.arange(5, dtype=torch.float64), torch.tensor([0, 2]))
    assert out.tolist() == [0.0, 2.0]


def test_subnormal_probe_is_truly_subnormal(tmp_path):
    ns = load_source(K.SCALE_REF, "t_ref_scale", tmp_path)
    probe = next(p for p in P.build_plan(ns, 0) if p.kind == "subnormal")
    (x,) = P.make_inputs(ns, probe, 0)
    tiny = torch.finfo(torch.float32).tiny  # 1.175494e-38 is the smallest NORMAL
    assert x.dtype == torch.float32
    assert bool((x != 0).all()) and bool((x.abs() < tiny).all())


def test_plan_is_deterministic_and_filter_independent(tmp_path):
    ns = load_source(K.SOFTMAX_REF, "t_ref_softmax", tmp_path)
    a = [p.to_dict() for p in P.build_plan(ns, 5)]
    b = [p.to_dict() for p in P.build_plan(ns, 5)]
    assert a == b
    probe = next(p for p in P.build_plan(ns, 5) if p.id == "large")
    x1 = P.make_inputs(ns, probe, 5)[0]
    x2 = P.make_inputs(ns, copy.deepcopy(probe), 5)[0]
    assert torch.equal(x1, x2)
    assert float(x1.abs().max()) > 1e5


def test_shape_variants_leave_init_globals_alone(tmp_path):
    ns = load_source(K.LINEAR_REF, "t_ref_linear", tmp_path)
    assert P.shape_globals(ns) == {"batch_size": 4}  # in/out features feed get_init_inputs: not varied


def test_reference_decides_validity_and_reports_broken(tmp_path):
    res, arrays = run_reference({"ref_src": K.BROKEN_REF, "seed": 0}, {}, tmp_path)
    assert res["ok"] is False and "cannot run its own inputs" in res["error"]
    res, arrays = run_reference({"ref_src": "raise ValueError('nope')", "seed": 0}, {}, tmp_path)
    assert res["ok"] is False and "nope" in res["error"]


def test_reference_outputs_inputs_and_weights(tmp_path):
    res, arrays = run_reference({"ref_src": K.LINEAR_REF, "seed": 1}, {}, tmp_path)
    assert res["ok"]
    assert set(res["param_shapes"]) == {"fc.weight", "fc.bias"}
    assert arrays["sd/fc.weight"].dtype.name == "float32"
    assert arrays["p/rand0/ref0"].dtype.name == "float64"
    assert arrays["p/rand0/in0"].dtype.name == "float32"
    assert arrays["p/prc_fp16/in0"].dtype.name == "float16"
    grad = next(m for m in res["probes"] if m["id"] == "grad")
    assert grad["fd"]["ok"] and "p/grad/gpar/fc.weight" in arrays
