"""The float64 reference: refuses reduced precision, decides which inputs are valid, reports when broken."""

from __future__ import annotations

import copy
from pathlib import Path

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


# --------------------------------------------------------------------------- reference faults (issue 23)

RAND_IN_FORWARD_REF = K.HEADER + '''
class Model(nn.Module):
    def forward(self, x):
        return x + 1e-3 * torch.rand_like(x)


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
'''

STATEFUL_REF = K.HEADER + '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
'''

FLOAT32_OUTPUT_REF = K.HEADER + '''
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x.float(), dim=1)


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("src, needle", [(RAND_IN_FORWARD_REF, "nondeterministic"),
                                         (STATEFUL_REF, "nondeterministic"),
                                         (FLOAT32_OUTPUT_REF, "returns float32")])
def test_faulty_reference_is_ref_broken_not_charged_to_its_copy(verify_local, src, needle):
    """The reference's own copy as the candidate: whatever the gates would say, the fault is the
    reference's, so the row is ref_broken with an error naming the fault, never a failed gate."""
    row = verify_local(src, K.as_candidate(src), only_gates=["CMP-01", "PRC-01"])
    assert row["status"] == "ref_broken", (row["status"], row["error"])
    assert needle in row["error"], row["error"]


def test_reference_fault_kinds(tmp_path):
    res, arrays = run_reference({"ref_src": RAND_IN_FORWARD_REF, "seed": 0}, {}, tmp_path)
    assert (res["ok"], res["fault"]) == (False, "nondeterministic") and "probe rand0" in res["error"]
    res, arrays = run_reference({"ref_src": FLOAT32_OUTPUT_REF, "seed": 0}, {}, tmp_path)
    assert (res["ok"], res["fault"]) == (False, "reduced_precision_output")


def _suite_references():
    root = Path(__file__).resolve().parents[2] / "data"
    return sorted(p for suite in ("positive_control", "red_team") for p in (root / suite).glob("*/ref.py"))


@pytest.mark.parametrize("path", _suite_references(), ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_suite_references_are_not_flagged(path, tmp_path):
    """The positive controls' and red team's references are deterministic float64 operators: the fault
    checks must leave every one of them gradeable (only the base probe and RES-01's run, to stay cheap)."""
    res, _ = run_reference({"ref_src": path.read_text(), "seed": 0, "only_gates": ["RES-01"]}, {}, tmp_path)
    assert res["ok"], res.get("error")


@pytest.mark.parametrize("name", K.CONFORMING_REFS + sorted(K.EDGE_REFS))
def test_fixture_references_are_not_flagged(name, tmp_path):
    src = getattr(K, name) if name in K.CONFORMING_REFS else K.EDGE_REFS[name]
    res, _ = run_reference({"ref_src": src, "seed": 0, "only_gates": ["RES-01"]}, {}, tmp_path)
    assert res["ok"], res.get("error")


# --------------------------------------------------------------------------- source decoding (issue 23)

LATIN1_SRC = "# -*- coding: latin-1 -*-\n" + K.SCALE_REF + "\nLABEL = 'caf\xe9 \xb5s'\n"


def test_read_source_decodes_bom_and_coding_line(tmp_path):
    """Files are decoded the way the interpreter decodes them: a UTF-8 byte-order mark is dropped, and a
    PEP 263 coding line picks the codec."""
    from lethe.verifier.reference import read_source

    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + K.SCALE_REF.encode())
    assert read_source(bom) == K.SCALE_REF
    lat = tmp_path / "lat.py"
    lat.write_bytes(LATIN1_SRC.encode("latin-1"))
    assert read_source(lat) == LATIN1_SRC


def test_load_source_executes_and_files_latin1_and_bom_sources(tmp_path):
    from lethe.verifier.reference import read_source

    ns = load_source("\ufeff" + K.SCALE_REF, "t_ref_bom", tmp_path)
    assert "Model" in ns
    ns = load_source(LATIN1_SRC, "t_ref_latin1", tmp_path)
    assert ns["LABEL"] == "caf\xe9 \xb5s"
    # What inspect/linecache read back from the file (Triton's @jit does) is the executed text.
    assert read_source(tmp_path / "t_ref_latin1.py") == LATIN1_SRC


# ---------------------------------------------------------------------------------------- reference device


def test_reference_device_resolution():
    """auto follows the candidate's device; a CUDA reference needs a CUDA verification; nothing else passes."""
    from lethe.verifier.api import resolve_reference_device

    # the GPU reference is opt-in until it has run on the H200 (api.AUTO_REFERENCE_DEVICE_ON_CUDA)
    assert resolve_reference_device("auto", "cuda") == "cpu"
    assert resolve_reference_device("auto", "cpu") == "cpu"
    assert resolve_reference_device("cpu", "cuda") == "cpu"
    assert resolve_reference_device("cuda", "cuda") == "cuda"
    with pytest.raises(ValueError):
        resolve_reference_device("cuda", "cpu")
    with pytest.raises(ValueError):
        resolve_reference_device("gpu", "cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback of a machine without a GPU")
def test_cuda_reference_without_a_gpu_falls_back_to_the_cpu_and_says_why(monkeypatch):
    """Asked for CUDA where the process sees no GPU: the reference is computed on the CPU, bit for bit the CPU
    reference, and the result says where and why (never a silent change of device)."""
    from lethe.verifier import api
    from lethe.verifier.testing import inprocess_runner

    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    api._REF_CACHE.clear()
    st_c, res_c, arr_c, _ = api.run_reference(K.SOFTMAX_REF, 0, runner=inprocess_runner, device="cpu")
    st_g, res_g, arr_g, _ = api.run_reference(K.SOFTMAX_REF, 0, runner=inprocess_runner, device="cuda")
    assert st_c == st_g == "ok" and res_c["ok"] and res_g["ok"]
    assert res_c["reference_device"] == res_g["reference_device"] == "cpu"
    assert "reference_fallback" not in res_c
    assert "no CUDA device" in res_g["reference_fallback"]
    assert sorted(arr_c) == sorted(arr_g)
    assert all(arr_c[k].tobytes() == arr_g[k].tobytes() for k in arr_c)
    assert api.reference_environment(res_g, "cuda") == {"reference_device": "cpu",
                                                        "reference_fallback": res_g["reference_fallback"]}
    assert api.reference_environment(res_c, "cpu") == {"reference_device": "cpu"}


def test_cuda_reference_child_reports_fault_cuda_without_a_gpu(tmp_path, monkeypatch):
    """The child's side of the fallback: no visible GPU is fault "cuda" (which the caller redoes on the CPU), not
    a broken reference."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res, arrays = run_reference({"ref_src": K.SOFTMAX_REF, "seed": 0, "device": "cuda"}, {}, tmp_path)
    assert res["ok"] is False and res["fault"] == "cuda" and arrays == {}
    res, _ = run_reference({"ref_src": K.SOFTMAX_REF, "seed": 0, "device": "tpu"}, {}, tmp_path)
    assert res["ok"] is False and "cpu or cuda" in res["error"]


def test_which_cuda_outcomes_are_redone_on_the_cpu():
    """Redone: fault "cuda" and a process that did not survive; kept: success and the faults the CPU reports
    the same way (a broken reference, its budget, a reduced-precision output)."""
    from lethe.sandbox.runner import SandboxResult
    from lethe.verifier.api import cuda_fallback_reason

    ok = SandboxResult(status="ok")
    assert cuda_fallback_reason(ok, {"ok": True}) is None
    assert "not possible" in cuda_fallback_reason(ok, {"ok": False, "fault": "cuda", "error": "x"})
    for kind in ("exception", "time", "memory", "reduced_precision_output", "nondeterministic"):
        assert cuda_fallback_reason(ok, {"ok": False, "fault": kind, "error": "x"}) is None, kind
    for status in ("crash", "error", "exit", "bad_result"):
        assert status in cuda_fallback_reason(SandboxResult(status=status, detail="d"), {})
    assert cuda_fallback_reason(SandboxResult(status="timeout"), {}) is None
    assert cuda_fallback_reason(SandboxResult(status="oom"), {}) is None


def test_reference_inputs_keep_the_cpu_path_as_it_was():
    """On the CPU a float64 input reaches the reference as the very tensor (what the CPU reference always did);
    others are cast or copied."""
    from lethe.verifier.reference import reference_inputs

    x64, x32, idx = torch.zeros(3, dtype=torch.float64), torch.zeros(3), torch.arange(3)
    a, b, c, d = reference_inputs([x64, x32, idx, 7])
    assert a is x64 and b.dtype == torch.float64 and c is not idx and torch.equal(c, idx) and d == 7


def test_cache_keys_name_the_reference_device():
    from lethe.verifier import refcache

    assert refcache.key("src", 0, None, False, "cpu") != refcache.key("src", 0, None, False, "cuda")
    assert refcache.key("src", 0, None, False) == refcache.key("src", 0, None, False, "cpu")


# ---- the conditioning spread (reference.conditioning_spread) -------------------------------------------------

from lethe.verifier import tolerance as _T  # noqa: E402
from lethe.verifier.reference import COND_DRAWS, cond_unit, conditioning_spread  # noqa: E402


class _ConvNorm(torch.nn.Module):
    """conv -> batch norm: on a zero input the conv returns its bias exactly, and the norm of that constant is
    beta exactly; fp32 leaves the rounding of the mean of the bias copies divided by sqrt(var + eps)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x))


class _LinTanh(torch.nn.Module):
    """A gemm of large inputs cancelling into tanh's unsaturated range (the CMP-01 `large` false fails)."""

    def __init__(self, k=256):
        super().__init__()
        self.lin = torch.nn.Linear(k, 64)

    def forward(self, x):
        return torch.tanh(self.lin(x) * 1e-6)


def _spread(model, x, pid="p0", backward=False):
    torch.manual_seed(0)
    m64 = copy.deepcopy(model).double()
    state = {k: v.clone() for k, v in m64.state_dict().items()}
    probe = P.Probe(pid, "rand", ("CMP-01",))
    x64 = [x.double()]
    with torch.no_grad():
        out = m64(*x64)
    arrays = {f"p/{pid}/ref0": out.numpy().copy()}
    meta = conditioning_spread(m64, state, x64, probe, 7, arrays)
    after = m64.state_dict()
    assert all(torch.equal(after[k], state[k]) for k in state)  # the model is left as it was
    return arrays, meta, out


def test_spread_is_deterministic_and_stored_per_output():
    torch.manual_seed(1)
    model, x = _ConvNorm(), torch.randn(2, 3, 6, 6)
    a1, meta, _ = _spread(model, x)
    a2, _, _ = _spread(model, x)
    assert meta["draws"] == COND_DRAWS and meta["u"] == cond_unit("float32") == 2.0**-24
    assert a1["p/p0/cond0"].shape == a1["p/p0/ref0"].shape
    assert a1["p/p0/cond0"].tobytes() == a2["p/p0/cond0"].tobytes()


def test_norm_of_a_constant_gets_a_floor_covering_fp32():
    """Zero input through conv + batch norm: exact answer beta, value_tol's scale is |beta|, yet fp32 torch
    misses it by the rounded mean of the bias over sqrt(eps). The measured floor covers fp32 torch's error."""
    torch.manual_seed(2)
    model = _ConvNorm()
    with torch.no_grad():
        model.bn.bias.zero_()  # exact answer 0: S = 0, value_tol is only the underflow slack
    x = torch.zeros(4, 3, 9, 9)
    arrays, _, ref = _spread(model, x)
    with torch.no_grad():
        got = model(x).double()
    err = (got - ref).abs().numpy()
    n = _T.reduction_length([tuple(x.shape)], [tuple(ref.shape)])
    vt = _T.value_tol(ref.numpy(), "float32", n)
    assert (err > vt).any()  # the false fail this floor exists for
    t = _T.with_cond_floor(vt, arrays["p/p0/cond0"], n)
    assert (err <= t).all()


def test_ill_conditioned_gemm_floor_covers_fp32_and_not_bf16():
    """Large inputs cancelling through a gemm into tanh: fp32 torch within the floor; the same gemm with a
    bfloat16 accumulator far outside it (the floor must not license a narrower accumulator)."""
    torch.manual_seed(3)
    model, x = _LinTanh(), 1e6 * torch.randn(32, 256)
    arrays, _, ref = _spread(model, x)
    n = _T.reduction_length([tuple(x.shape)], [tuple(ref.shape)])
    t = _T.with_cond_floor(_T.value_tol(ref.numpy(), "float32", n), arrays["p/p0/cond0"], n)
    with torch.no_grad():
        fp32 = model(x).double()
        lin = model.lin
        bf16 = torch.tanh((x.bfloat16() @ lin.weight.bfloat16().t() + lin.bias.bfloat16()).double() * 1e-6)
    assert ((fp32 - ref).abs().numpy() <= t).all()
    assert ((bf16 - ref).abs().numpy() > t).mean() > 0.5


def test_gradient_spread_is_stored_for_inputs_and_parameters():
    torch.manual_seed(4)
    model = _LinTanh(k=32)
    m64 = copy.deepcopy(model).double()
    state = {k: v.clone() for k, v in m64.state_dict().items()}
    x = (1e6 * torch.randn(8, 32)).double().requires_grad_(True)
    out = m64(x)
    up = torch.randn(out.shape, dtype=torch.float64)
    out.backward(up)
    arrays = {"p/g/gin0": x.grad.numpy().copy(), "p/g/gpar/lin.weight": m64.lin.weight.grad.numpy().copy()}
    conditioning_spread(m64, state, [x.detach()], P.Probe("g", "rand", ("CMP-02",), action="backward"), 7,
                        arrays, ups=[up])
    assert arrays["p/g/gcond0"].shape == tuple(x.shape)
    assert arrays["p/g/gcondpar/lin.weight"].shape == tuple(m64.lin.weight.shape)
    assert (arrays["p/g/gcond0"] > 0).any()


class _MeanRelu(torch.nn.Module):
    """relu of the mean of group-normalised values: exactly 0 before the relu (the L2/41 false fail)."""

    def __init__(self):
        super().__init__()
        self.gn = torch.nn.GroupNorm(4, 64)

    def forward(self, x):
        return torch.relu(self.gn(x).mean(dim=1, keepdim=True))


def test_antithetic_pairs_reach_the_sloped_side_of_a_kink():
    """Every element of relu(0) gets a non-zero spread: with single draws about 1 in 2^draws would not."""
    torch.manual_seed(5)
    arrays, meta, _ = _spread(_MeanRelu(), torch.randn(256, 64))
    assert meta["draws"] == COND_DRAWS
    assert (arrays["p/p0/cond0"] > 0).all()


# ---- the layer model on ORD-03's cancel rows, and the floor's budget --------------------------------------------

class _GemmNorm(torch.nn.Module):
    """gemm -> batch norm over the batch: ORD-03's +B ... -B rows make the gemm's products ~B while the norm's
    output is O(1), so sum|terms| taken at the output understates what the gemm summed (trusted-corpus D2)."""

    def __init__(self, k=512, n=24):
        super().__init__()
        self.lin = torch.nn.Linear(k, n)
        self.bn = torch.nn.BatchNorm1d(n)

    def forward(self, x):
        return self.bn(self.lin(x))


def _cancel_rows(b=32, k=512, seed=4):
    gen = torch.Generator().manual_seed(seed)
    return P.cancellation_values((b, k), gen).float()


def _cancel_spread(model, x):
    m64 = copy.deepcopy(model).double()
    state = {k: v.clone() for k, v in m64.state_dict().items()}
    probe = P.Probe("cancel", "cancel", ("ORD-03",))
    x64 = [x.double()]
    with torch.no_grad():
        out = m64(*x64)
    arrays = {"p/cancel/ref0": out.numpy().copy()}
    meta = conditioning_spread(m64, state, x64, probe, 7, arrays)
    return arrays, meta, out


def test_layer_terms_counts_the_products_of_one_output():
    from lethe.verifier.reference import layer_terms

    assert layer_terms(torch.nn.Linear(37, 5)) == 37
    assert layer_terms(torch.nn.Conv2d(6, 4, (3, 5), groups=2)) == 3 * 15
    assert layer_terms(torch.nn.ConvTranspose2d(6, 4, (3, 5))) == 6 * 15


def test_cancel_rows_get_the_layer_model_which_covers_fp32_and_not_fp16_totals():
    """The any-order layer model (reference._LayerRoundingRun) raises ORD-03's bound on a gemm -> norm to what an
    fp32 gemm may honestly err there; a gemm whose running total is fp16 stays far outside it."""
    torch.manual_seed(5)
    model, x = _GemmNorm(), _cancel_rows()
    model.train()
    arrays, meta, ref = _cancel_spread(model, x)
    assert meta["draws"] == COND_DRAWS and meta["layer_draws"] == P.LAYER_DRAWS
    n = _T.reduction_length([tuple(x.shape)], [tuple(ref.shape)])
    with torch.no_grad():
        xa = x.abs().double()
        m64 = copy.deepcopy(model).double()
        scale = _T.output_scale(m64(xa).numpy())
        bound = _T.ord03_bound(ref.numpy(), max(scale, _T.output_scale(ref.numpy())), "float32", n)
        t = _T.with_layer_floor(_T.with_cond_floor(bound, arrays["p/cancel/cond0"], n), arrays["p/cancel/layer0"])
        lin = model.lin
        # an honest fp32 gemm holding B in a serial running total, then the norm in float64
        y32 = torch.zeros(x.shape[0], lin.out_features, dtype=torch.float32)
        for i in range(x.shape[1]):
            y32 += x[:, i:i + 1] * lin.weight[:, i]
        y32 += lin.bias
        honest = model.bn(y32.double().float()).double()
        y16 = torch.zeros(x.shape[0], lin.out_features, dtype=torch.float16)
        for i in range(x.shape[1]):
            y16 += (x[:, i:i + 1] * lin.weight[:, i]).half()
        narrow = model.bn((y16.float() + lin.bias)).double()
    err = (honest - ref).abs().numpy()
    assert (err > bound).any()  # the false fail the layer model exists for
    assert (err <= t).all()
    assert ((narrow - ref).abs().numpy() > t).mean() > 0.5


def test_the_optional_floor_is_measured_only_within_its_share_of_the_budget():
    """The share is counted at the plan's estimates (lethe.plan/7; tests/verifier/test_floor_admission.py shows it
    does not read the clock): within it the floor is measured, past it refused with a reason naming the budget."""
    from lethe.verifier.reference import FLOOR_TIME_SHARE, _Budget, measures_optional_floor

    zeros = P.Probe("zeros", "zeros", ("CMP-01",), extra={"est_s": 1.0, "est_mb": 0.0})
    assert _Budget({"timeout_s": 100}).floor_refusal(zeros, 4, 0, 0) == ""
    late = _Budget({"timeout_s": 100})
    late.est_used = FLOOR_TIME_SHARE * 100 - 0.5
    why = late.floor_refusal(zeros, 6, 0, 0)
    assert why.startswith("not measured") and "100 s budget" in why and "its 6 draws" in why
    assert "MB budget" in _Budget({"memory_mb": 1}).floor_refusal(zeros, 4, 0, 1 << 20)  # 1 MB held > 0.6 MB
    assert _Budget(None).floor_refusal(zeros, 4, 1 << 40, 1 << 40) == ""  # no budget: always measured
    # CMP-01's floor is part of its bound; every other value probe's is optional; shape variants measure none
    rand0 = P.Probe("rand0", "rand", ("CMP-01", "CMP-03", "PRC-01", "RES-01"))
    acc = P.Probe("acc_fp16", "ones", ("PRC-02",), dtype="float16")
    shape = P.Probe("shape_n=7", "rand", ("CMP-03",), patch=(("n", 7),), draw=3)
    longp = P.Probe("ord01_n", "positive", ("ORD-01",), patch=(("n", 4099),))
    grad = P.Probe("grad", "rand", ("CMP-02",), action="backward")
    assert P.measures_floor(rand0) and not measures_optional_floor(rand0)
    assert P.measures_floor(acc) and measures_optional_floor(acc)
    assert P.measures_floor(longp) and measures_optional_floor(longp)
    assert not P.measures_floor(shape) and not P.measures_floor(grad)
    assert P.is_shape_variant(shape) and not P.is_shape_variant(longp) and not P.is_shape_variant(rand0)


def test_layer_model_covers_a_norms_any_order_mean_and_not_a_one_pass_variance():
    """Cancel rows through gemm -> training-mode batch norm over 4099 rows: each column is ~940 +- 0.15, so the
    fp32 sum behind the mean may honestly err by gamma_4099 * sum|x| in any order, which torch's own CPU batch norm
    uses (0.3 off on an O(1) output, trusted-corpus L2/33); the layer model's norm term covers it, while a one-pass
    variance E[x^2] - E[x]^2 in fp32 is far outside it."""
    torch.manual_seed(0)
    model = _GemmNorm(k=96, n=40)
    model.train()
    x = _cancel_rows(b=4099, k=96, seed=1)
    arrays, _, ref = _cancel_spread(model, x)
    n = _T.reduction_length([tuple(x.shape)], [tuple(ref.shape)])
    with torch.no_grad():
        m64 = copy.deepcopy(model).double()
        scale = _T.output_scale(m64(x.abs().double()).numpy())
        bound = _T.ord03_bound(ref.numpy(), max(scale, _T.output_scale(ref.numpy())), "float32", n)
        t = _T.with_layer_floor(_T.with_cond_floor(bound, arrays["p/cancel/cond0"], n), arrays["p/cancel/layer0"])
        honest = model(x).double()
        y = model.lin(x)
        mean = y.mean(0)
        var = (y * y).mean(0) - mean * mean
        one_pass = ((y - mean) / torch.sqrt(var.clamp_min(0) + model.bn.eps) * model.bn.weight + model.bn.bias).double()
    assert ((honest - ref).abs().numpy() <= t).all()
    # the any-order worst case of a 4099-term mean is loose here (up to ~1.5 on an O(1) output), yet the one-pass
    # variance leaves it by two orders of magnitude on whole columns (the offset probe is its dedicated test)
    over = (one_pass - ref).abs().numpy() / t
    assert over.max() > 100 and (over > 1).mean() > 0.2


def test_shape_variants_measure_a_floor_only_for_an_ill_conditioned_problem():
    from lethe.verifier.reference import ill_conditioned, measures_optional_floor

    shape = P.Probe("shape_batch=3", "rand", ("CMP-03",), patch=(("batch", 3),), draw=3)
    assert not measures_optional_floor(shape) and measures_optional_floor(shape, shape_floor=True)
    acc = P.Probe("acc_fp16", "ones", ("PRC-02",), dtype="float16")
    assert measures_optional_floor(acc) and measures_optional_floor(acc, shape_floor=True)
    # the norm of a constant (ill-conditioned: the floor rises above value_tol) against a plain gemm (it does not)
    torch.manual_seed(2)
    model = _ConvNorm()
    with torch.no_grad():
        model.bn.bias.zero_()
    arrays, _, ref = _spread(model, torch.zeros(4, 3, 9, 9))
    meta = {"id": "p0", "dtype": "float32", "N": 9, "outputs": [{"shape": list(ref.shape)}]}
    assert ill_conditioned(arrays, meta)
    lin = torch.nn.Linear(32, 8)
    arrays, _, ref = _spread(lin, torch.randn(16, 32))
    meta = {"id": "p0", "dtype": "float32", "N": 32, "outputs": [{"shape": list(ref.shape)}]}
    assert not ill_conditioned(arrays, meta)
    assert not ill_conditioned({}, meta)  # no spread measured: no floor for the variants


# ---- the storage model on PRC-02's half-precision rows ------------------------------------------------------------

class _GemmDivSum(torch.nn.Module):
    """x @ W^T / 2, summed over the hidden axis (KernelBench L2/14's shape of computation): on PRC-02's bracketed
    rows the gemm's output is ~2^7 |w|, stored in the data dtype by the reference's own code run in it, and the
    sum cancels it (trusted-corpus D4)."""

    def __init__(self, k=10, h=20):  # L2/14's sizes
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(h, k) / k**0.5)

    def forward(self, x):
        return torch.sum(torch.matmul(x, self.weight.T) / 2, dim=1, keepdim=True)


def test_half_precision_prc02_rows_get_the_storage_model_which_covers_stored_results_not_a_half_total():
    """The storage model (reference._StoreRoundingRun) raises PRC-02's bound to what storing each operator's result
    in fp16 already does: the op-by-op correctly rounded forward with an fp32 accumulator passes, and fails without
    the floor."""
    torch.manual_seed(3)
    model = _GemmDivSum()
    with torch.no_grad():
        # the first and last input columns made of +-a pairs (sums exactly 0): on the rows +B ... -B every hidden
        # output is ~B |w_h0 - w_h9| while their sum (and the same sum on |x|) is the small terms' alone
        model.weight.copy_(model.weight.half().float())
        h = model.weight.shape[0] // 2
        for col in (0, -1):
            a = model.weight[:h, col].clone()
            model.weight[:, col] = torch.cat([a, -a])[torch.randperm(2 * h)]
    x = P.accumulation_values((128, 10)).half()
    probe = P.Probe("accb_fp16", "accum", ("PRC-02",), dtype="float16")
    assert P.stores_in_dtype(probe) and P.extra_draws(probe) == P.STORE_DRAWS
    m64 = copy.deepcopy(model).double()
    state = {k: v.clone() for k, v in m64.state_dict().items()}
    x64 = [x.double()]
    with torch.no_grad():
        ref = m64(*x64)
        scale = _T.output_scale(m64(x64[0].abs()).numpy())
    arrays = {"p/accb_fp16/ref0": ref.numpy().copy()}
    meta = conditioning_spread(m64, state, x64, probe, 7, arrays)
    assert meta["store_draws"] == P.STORE_DRAWS and "p/accb_fp16/store0" in arrays
    n = _T.reduction_length([tuple(x.shape)], [tuple(ref.shape)])
    bound = _T.with_cond_floor(_T.prc02_bracket_tol(ref.numpy(), scale, "float16", n), arrays["p/accb_fp16/cond0"], n)
    t = _T.with_store_floor(bound, arrays["p/accb_fp16/store0"])
    with torch.no_grad():
        w64 = m64.weight
        y = (x64[0] @ w64.T).half().double()  # the gemm correctly rounded to fp16 (exact products, one rounding)
        y = (y / 2).half().double()
        honest = y.float().sum(dim=1, keepdim=True).half().double()  # an fp32 total, its result stored in fp16
    err = (honest - ref).abs().numpy()
    assert (err > bound).any()  # the false fail the storage model exists for
    assert (err <= t).all()


class _RowSum(torch.nn.Module):
    def forward(self, x):
        return torch.sum(x, dim=1)


def test_the_storage_floor_leaves_a_half_precision_running_total_outside():
    """A row sum's only stored result is its output, so the floor stays one rounding of it: an fp16 running total
    along PRC-02's 4099-long bracketed rows (it returns ~0 for the exact ~0.25) fails by orders of magnitude."""
    x = P.accumulation_values((8, 4099)).half()
    probe = P.Probe("accb_fp16", "accum", ("PRC-02",), dtype="float16")
    m64 = _RowSum()
    x64 = [x.double()]
    ref = m64(*x64)
    arrays = {"p/accb_fp16/ref0": ref.numpy().copy()}
    conditioning_spread(m64, {}, x64, probe, 7, arrays)
    floor = _T.store_floor(arrays["p/accb_fp16/store0"])
    assert (floor <= 4 * 2.0**-11 * ref.abs().numpy() * (1 + 1e-12)).all()
    total = torch.zeros(x.shape[0], dtype=torch.float16)
    for j in range(x.shape[1]):
        total += x[:, j]
    assert ((total.double() - ref).abs().numpy() > 100 * floor).all()


def test_the_storage_model_leaves_exact_operators_and_other_probes_alone():
    fp32 = P.Probe("acc_fp32", "ones", ("PRC-02",))
    prc = P.Probe("prc_fp16", "rand", ("PRC-01", "RES-01"), dtype="float16")
    assert not P.stores_in_dtype(fp32) and not P.stores_in_dtype(prc)
    m64 = torch.nn.ReLU().double()
    x = [torch.randn(64, 64, dtype=torch.float64)]
    probe = P.Probe("acc_fp16", "ones", ("PRC-02",), dtype="float16")
    with torch.no_grad():
        ref = m64(*x)
    arrays = {"p/acc_fp16/ref0": ref.numpy().copy()}
    conditioning_spread(m64, {}, x, probe, 7, arrays)
    assert (arrays["p/acc_fp16/store0"] == 0).all()  # relu rounds nothing


def test_backward_spread_stores_each_leafs_input_gradient_so_an_exact_zero_gradient_gets_a_floor():
    """(KernelBench L2/97's matmul.bias, trusted-corpus D5.) The backward draws also move each leaf module's input
    gradient once by u (what the backward stores between layers): the bias gradient in front of a batch norm, exactly 0, then gets a floor that covers fp32 autograd's
    residue, which the gradient tolerance alone (scaled by a ~0 reference) does not; a backward that forgets the
    norm's mean term (the bias gradient becomes the column sum of dy) stays outside."""
    for seed in range(6):
        _zero_bias_gradient_case(seed)


def _zero_bias_gradient_case(seed: int) -> None:
    torch.manual_seed(seed)
    model = _GemmNorm(k=64, n=32)  # the gemm's bias gradient is exactly 0: the norm removes any per-column constant
    model.train()
    x = torch.randn(256, 64)
    up = torch.randn(256, 32, dtype=torch.float64)
    m64 = copy.deepcopy(model).double()
    state = {k: v.clone() for k, v in m64.state_dict().items()}
    x64 = x.double().requires_grad_(True)
    m64(x64).backward(up)
    ref = m64.lin.bias.grad.clone()
    arrays = {"p/g/gin0": x64.grad.numpy().copy(), "p/g/gpar/lin.bias": ref.numpy().copy()}
    m64.zero_grad(set_to_none=True)
    meta = conditioning_spread(m64, state, [x64.detach()], P.Probe("g", "rand", ("CMP-02",), action="backward"),
                               seed, arrays, ups=[up])
    assert meta["draws"] == P.GRAD_COND_DRAWS
    n = _T.reduction_length([tuple(x.shape)], [(256, 32)])
    gt = _T.grad_tol(ref.numpy(), "float32", n)
    t = _T.with_cond_floor(gt, arrays["p/g/gcondpar/lin.bias"], n)
    m32 = copy.deepcopy(model)
    m32(x).backward(up.float())
    err = (m32.lin.bias.grad.double() - ref).abs().numpy()
    assert (err > gt).any()  # the false fail the stored-gradient draws exist for
    assert (err <= t).all()
    wrong = up.sum(0)  # the bias gradient without the norm's backward
    assert ((wrong - ref).abs().numpy() > t).all()


class _StraightReLU(torch.autograd.Function):
    """relu whose backward forgets the mask (a wrong custom backward)."""

    @staticmethod
    def forward(ctx, x):
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, g):
        return g


class _StraightReLUModule(torch.nn.Module):
    def forward(self, x):
        return _StraightReLU.apply(x)


def _inplace_relu_net(inplace: bool = True, first: torch.nn.Module | None = None) -> torch.nn.Sequential:
    """conv -> relu(inplace) -> max pool, three conv -> relu(inplace), a max pool, a 1x1 classifier -> relu -> avg
    pool: KernelBench L3/18_SqueezeNet's pattern, small."""
    layers = [torch.nn.Conv2d(3, 16, 3, padding=1), first or torch.nn.ReLU(inplace=inplace),
              torch.nn.MaxPool2d(3, 2, ceil_mode=True)]
    for _ in range(3):
        layers += [torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(inplace=inplace)]
    layers += [torch.nn.MaxPool2d(3, 2, ceil_mode=True), torch.nn.Conv2d(16, 10, 1), torch.nn.ReLU(inplace=inplace),
               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()]
    return torch.nn.Sequential(*layers)


def test_backward_spread_is_measured_through_inplace_relu_and_covers_fp32_autograd():
    """(KernelBench L3/18_SqueezeNet, passing CMP-02 before 4de0a18 and failing after at err/tol 1339.) The backward
    draws move each leaf's input gradient with a gradient hook on the leaf's input tensors: a full backward hook
    made every nn.ReLU(inplace=True) raise, the spread was not measured and CMP-02 graded by grad_tol alone. Here
    the input is tiny against the biases (as deep in SqueezeNet, whose activations are bias-dominated), so fp32
    rounding decides max-pool near-ties and relu kinks: fp32 autograd's input gradient fails grad_tol by ~1e4
    and passes the floor; the in-place network's spread equals the out-of-place one's; a relu backward without
    its mask stays outside. (Seeds fixed: a near-tie that fp32 flips and no draw flips still fails, D8.)"""
    for seed in range(6):
        torch.manual_seed(seed)
        model = _inplace_relu_net()
        x = torch.rand(1, 3, 32, 32) * 1e-5
        up = torch.randn(1, 10, dtype=torch.float64)
        spreads = {}
        for inplace in (True, False):
            m64 = _inplace_relu_net(inplace).double()
            m64.load_state_dict(model.state_dict())
            state = {k: v.clone() for k, v in m64.state_dict().items()}
            x64 = x.double().requires_grad_(True)
            m64(x64).backward(up)
            ref = x64.grad.clone().numpy()
            arrays = {"p/g/gin0": ref.copy()}
            m64.zero_grad(set_to_none=True)
            meta = conditioning_spread(m64, state, [x64.detach()],
                                       P.Probe("g", "rand", ("CMP-02",), action="backward"), seed, arrays, ups=[up])
            assert meta["draws"] == P.GRAD_COND_DRAWS
            spreads[inplace] = arrays["p/g/gcond0"]
        assert (spreads[True] == spreads[False]).all()  # the in-place leaf's input gradient, as out of place
        n = _T.reduction_length([tuple(x.shape), (1, 10)], [ref.shape])
        gt = _T.grad_tol(ref, "float32", n)
        t = _T.with_cond_floor(gt, spreads[True], n)
        x32 = x.clone().requires_grad_(True)
        model(x32).backward(up.float())
        err = abs(x32.grad.double().numpy() - ref)
        assert (err > gt).any()  # the false fail
        assert (err <= t).all()
        wrong = _inplace_relu_net(first=_StraightReLUModule())
        wrong.load_state_dict(model.state_dict())
        x32 = x.clone().requires_grad_(True)
        wrong(x32).backward(up.float())
        assert (abs(x32.grad.double().numpy() - ref) > t).any()
