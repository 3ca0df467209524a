"""CPU checks of the fla #640 experiment's generated pairs and of its guard bypass (no GPU, no fla needed).

What can be checked without a GPU: the generated sources parse and expose the intended shape knobs; the
reference Models agree with the project's float64 oracle (lethe.kernels.gdn.reference), written independently; the
guard in the fla-core 0.6.0 wheel is where the bypass expects it (read with ast); and -- when a side venv holding
fla exists (``cache/venvs/fla``) -- that the bypass really lets a faked-Hopper gated call past the guard and that
fla refuses it without the bypass.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from lethe.foreign import fla640 as F
from lethe.kernels.gdn import reference as KR
from lethe.verifier import probes as P
from lethe.verifier.reference import load_source

ROOT = Path(__file__).resolve().parents[2]
WHEEL = ROOT / ".whl" / f"fla_core-{F.FLA_VERSION}-py3-none-any.whl"
SIDE_PY = ROOT / "cache" / "venvs" / "fla" / "bin" / "python"


@pytest.mark.parametrize("op", sorted(F.OPS))
@pytest.mark.parametrize("cd", [None, "bfloat16", "float16"])
def test_sources_parse_and_vary_only_b_and_t(op, cd):
    ref = F.reference_source(op, B=1, T=64, H=2, K=64, V=64)
    cand = F.candidate_source(op, B=1, T=64, H=2, K=64, V=64, compute_dtype=cd)
    ast.parse(ref)
    tree = ast.parse(cand)
    assert "class ModelNew" in cand and "class Model(" in ref
    assert F.OPS[op].fla_function in cand
    # the bypass is executed before the fla op is imported (order of top-level statements)
    stmts = [ast.unparse(s) for s in tree.body]
    i_bypass = next(i for i, s in enumerate(stmts) if "TRITON_ABOVE_3_7_1 = True" in s)
    i_import = next(i for i, s in enumerate(stmts) if s.startswith(f"from {F.OPS[op].fla_module} import"))
    assert i_bypass < i_import
    ns = load_source(ref, f"fla640_ref_{op}", tempfile.mkdtemp())
    assert P.shape_globals(ns) == {"B": 1, "T": 64}


def test_candidate_without_bypass_leaves_guard_alone():
    cand = F.candidate_source("gdn", guard_bypass=False)
    assert "TRITON_ABOVE_3_7_1" not in cand
    assert 'os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"' in cand


def _raw(op, B, T, H, K, V, seed=0):
    return F.raw_inputs(op, B, T, H, K, V, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("op", sorted(F.OPS))
def test_reference_model_matches_project_oracle_in_float64(op):
    B, T, H, K, V = 2, 9, 3, 4, 5
    ns = load_source(F.reference_source(op, B=B, T=T, H=H, K=K, V=V), f"fla640_ref64_{op}", tempfile.mkdtemp())
    model = ns["Model"](*ns["get_init_inputs"]())
    raw = _raw(op, B, T, H, K, V)
    got = model(*[raw[n] for n in F.OPS[op].inputs])
    assert got.dtype == torch.float64
    want = F.oracle(op, F.domain_map(op, raw), K ** -0.5)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # and the gradients, which CMP-02 grades, agree too
    raw_a = {k: v.clone().requires_grad_(True) for k, v in raw.items()}
    raw_b = {k: v.clone().requires_grad_(True) for k, v in raw.items()}
    up = torch.randn(got.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (model(*[raw_a[n] for n in F.OPS[op].inputs]) * up).sum().backward()
    (F.oracle(op, F.domain_map(op, raw_b), K ** -0.5) * up).sum().backward()
    for n in F.OPS[op].inputs:
        torch.testing.assert_close(raw_a[n].grad, raw_b[n].grad, rtol=1e-10, atol=1e-12)


def test_gdn_reference_is_the_general_recurrence_with_scalar_gate():
    """Scalar-gated delta rule = the general GDN recurrence with g broadcast over K and b = w = beta."""
    B, T, H, K, V = 1, 6, 2, 4, 3
    x = F.domain_map("gdn", _raw("gdn", B, T, H, K, V, seed=3))
    g = x["g"].unsqueeze(-1).expand(B, T, H, K)
    b = x["beta"].unsqueeze(-1).expand(B, T, H, K)
    w = x["beta"].unsqueeze(-1).expand(B, T, H, V)
    general = KR.recurrent_gdn(x["q"], x["k"], x["v"], g, b, w, K ** -0.5)[0]
    torch.testing.assert_close(F.oracle("gdn", x, K ** -0.5), general, rtol=1e-12, atol=1e-12)


def test_domain_maps_land_in_the_valid_domain_on_adversarial_values():
    raw = {"q": torch.full((1, 2, 1, 4), 1e6, dtype=torch.float64), "k": torch.zeros(1, 2, 1, 4, dtype=torch.float64),
           "v": torch.ones(1, 2, 1, 4, dtype=torch.float64),
           "g": torch.tensor([[[1e6], [-1e6]]], dtype=torch.float64),
           "beta": torch.tensor([[[1e6], [-1e6]]], dtype=torch.float64)}
    x = F.domain_map("gdn", raw)
    assert bool((x["g"] <= 0).all()) and bool(torch.isfinite(x["g"]).all())
    assert bool(((x["beta"] >= 0) & (x["beta"] <= 1)).all())
    assert bool((x["k"].norm(dim=-1) <= 1).all())


def test_expected_tile_and_exposure():
    assert F.expected_bk(64) == 64 and F.expected_bk(128) == 128 and F.expected_bk(100) == 128
    ps = F.pairs()
    assert [p.exposed for p in ps if p.op in ("gdn", "sgla")] == [p.K == 64 for p in ps if p.op in ("gdn", "sgla")]
    # every exposed pair comes with its K=128 control, same op and compute dtype
    for p in ps:
        if p.exposed:
            assert any(c.op == p.op and c.compute_dtype == p.compute_dtype and c.K == 128 for c in ps)
    assert len({p.id for p in ps}) == len(ps)


@pytest.mark.skipif(not WHEEL.exists(), reason="fla-core wheel not downloaded into .whl/ (see docs/fla640.md)")
def test_wheel_guard_is_where_the_bypass_expects_it():
    facts = F.static_guard_facts(WHEEL)
    assert set(facts["condition_names"]) == {"g", *F.GUARD_CONDITION_NAMES}
    assert F.GUARD_MESSAGE_MARK in facts["message"]
    # rebinding the flag changes the guard and nothing else in chunk_o
    assert facts["flag_readers"] == [F.GUARD_FUNCTION]
    assert not facts["flag_read_at_module_level"]
    assert {"gated_delta_rule", "simple_gla"} <= set(facts["callers"])
    assert not {"gla", "kda", "gdn2"} & set(facts["callers"])


_DYNAMIC = r'''
import os, sys
os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"
import torch
import fla.ops.common.chunk_o as c
from lethe.foreign import fla640 as F
c.IS_NVIDIA_HOPPER = True  # pretend to be an H200; the Triton here is 3.6 like the device image
assert F.guard_state(c)["would_refuse"], F.guard_state(c)
B, T, H, K, V = 1, 64, 1, 64, 64
q = k = torch.zeros(B, T, H, K); v = do = torch.zeros(B, T, H, V)
h = dh = torch.zeros(B, 1, H, K, V); g = torch.zeros(B, T, H)
def call(gate):
    try:
        c.chunk_bwd_dqkwg(q=q, k=k, v=v, do=do, h=h, dh=dh, g=gate, scale=1.0)
    except RuntimeError as e:
        if "#640" in str(e):
            return "refused"
        return "past_guard"
    except Exception:
        return "past_guard"
    return "past_guard"
out = [call(g)]
with F.bypass(c):
    out.append(call(g))
out.append(call(g))
out.append(call(None))
ns = {}
exec(F.BYPASS_SNIPPET, ns)
out.append(str(ns["FLA640_GUARD_WOULD_REFUSE"]))
out.append(call(g))
print("RESULT", ",".join(out))
'''


def _fla_in_project_venv() -> bool:
    try:
        import fla  # noqa: F401
    except Exception:  # noqa: BLE001 - fla is deliberately not a project dependency
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not (SIDE_PY.exists() or _fla_in_project_venv()),
                    reason="fla not importable (no cache/venvs/fla side venv; see docs/fla640.md)")
def test_bypass_lets_a_faked_hopper_gated_call_past_the_guard():
    """Refused without the bypass, past the guard with it, refused again after it, ungated never refused;
    the candidate's inline snippet has the same effect. (fla's import takes tens of seconds on 2 busy cores.)"""
    py = sys.executable if _fla_in_project_venv() else str(SIDE_PY)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]), OMP_NUM_THREADS="1")
    r = subprocess.run([py, "-c", _DYNAMIC], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, r.stderr[-3000:]
    assert line.split(" ", 1)[1].split(",") == ["refused", "past_guard", "refused", "past_guard", "True",
                                                "past_guard"]


def _load_run_module():
    """experiments/fla640/run.py as a module, without letting its import-time env defaults leak into pytest."""
    import importlib

    saved = dict(os.environ)
    try:
        mod = importlib.import_module("experiments.fla640.run")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return mod


def _cell(op, K, dk_rel, dtype="bfloat16", T=256):
    errs = {n: {"rel_fro": 0.004} for n in ("o", "dq", "dv", "dg", "dbeta")}
    errs["dk"] = {"rel_fro": dk_rel}
    return {"op": op, "K": K, "dtype": dtype, "T": T, "bypassed": {"errors": errs}}


def _verif(op, K, cmp02, worst, cd="bfloat16"):
    return {"id": F.pair_id(op, K, cd), "op": op, "K": K, "T": 64, "compute_dtype": cd,
            "exposed": F.OPS[op].guarded and F.expected_bk(K) == 64,
            "cmp02": {"status": cmp02, "worst_err_over_tol": worst}}


def test_outcome_classification_catch_masked_miss_and_clean():
    run = F  # the run's comparisons and outcome live in the study module
    bad = [_cell("gdn", 64, 0.5), _cell("gdn", 128, 0.005)]
    comps = run.comparisons(bad)
    sig = {c["tensor"] for c in comps if c["signature"]}
    assert sig == {"dk"}  # only the tensor that is wrong AND far above its control
    catch = run.outcome(bad, [_verif("gdn", 64, "fail", 1e4), _verif("gdn", 128, "pass", 0.5)], comps)
    assert catch[0]["ground_truth"] == "miscompiled" and catch[0]["battery"].startswith("catch")
    masked = run.outcome(bad, [_verif("gdn", 64, "fail", 1e4), _verif("gdn", 128, "fail", 100.0)], comps)
    assert masked[0]["battery"].startswith("flagged, control also fails") and masked[0]["separation"] == 100.0
    miss = run.outcome(bad, [_verif("gdn", 64, "pass", 0.3), _verif("gdn", 128, "pass", 0.3)], comps)
    assert miss[0]["battery"].startswith("MISS")
    clean = [_cell("gdn", 64, 0.006), _cell("gdn", 128, 0.005)]
    ok = run.outcome(clean, [_verif("gdn", 64, "fail", 300.0)], run.comparisons(clean))
    assert ok[0]["ground_truth"] == "clean" and "precision" in ok[0]["battery"]
    # a pair whose compute dtype was never measured directly has no ground truth
    none = run.outcome(bad, [_verif("gdn", 64, "fail", 1e4, cd="float16")], comps)
    assert none[0]["ground_truth"] == "unmeasured"


def test_the_driver_is_thin_and_writes_the_direct_schema():
    run = _load_run_module()
    assert run.SCHEMA == F.DIRECT_SCHEMA == "lethe.fla640.direct/1"
    assert not hasattr(run, "direct_cell") and not hasattr(run, "comparisons")  # one place: lethe.foreign.fla640


def test_comparisons_keep_the_cells_tensor_order_unless_told():
    cells = [_cell("gdn", 64, 0.5), _cell("gdn", 128, 0.005)]
    assert [c["tensor"] for c in F.comparisons(cells)] == ["o", "dq", "dv", "dg", "dbeta", "dk"]
    tensors = ("o", "dq", "dk", "dv", "dg", "dbeta")
    assert [c["tensor"] for c in F.comparisons(cells, None, tensors)] == list(tensors)
    # the thresholds a run recorded decide the signature
    strict = {**F.THRESHOLDS, "wrong_rel": 0.9}
    assert not any(c["signature"] for c in F.comparisons(cells, strict))
    # a missing tensor or a cell without a bypassed run gives no comparison
    cells[1]["bypassed"]["errors"]["dk"] = {"missing": True}
    assert "dk" not in {c["tensor"] for c in F.comparisons(cells)}
    assert F.comparisons([_cell("gdn", 64, 0.5), {"op": "gdn", "K": 128, "dtype": "bfloat16", "T": 256,
                                                  "bypassed": {"error": "x"}}]) == []


def test_labels_and_thresholds():
    assert [F.label(x) for x in (None, 0.01, 0.02, 0.05, 0.1)] == ["n/a", "ok", "ok", "suspect", "wrong"]
    assert F.label(0.05, {"ok_rel": 0.06, "wrong_rel": 0.1}) == "ok"
    assert F.THRESHOLDS == {"ok_rel": F.OK_REL, "wrong_rel": F.WRONG_REL, "control_factor": F.CONTROL_FACTOR}


def test_errors_metric_counts_nonfinite_and_missing():
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)
    e = F.errors(torch.tensor([3.0, float("nan")]), ref)
    assert e["nonfinite"] == 1 and e["rel_fro"] == 0.0 and e["max_ref"] == 4.0
    assert F.errors(torch.tensor([3.0, 5.0]), ref)["rel_fro"] == pytest.approx(0.2)
    assert F.errors(None, ref) == {"missing": True}


def test_plan_estimates_and_task_names():
    full, quick = F.plan(False), F.plan(True)
    assert len(full) == 30 and len(quick) == 4
    assert [F.task_name(t) for t in quick] == ["direct gdn K=64 bfloat16 T=64", "direct gdn K=128 bfloat16 T=64",
                                               "verify fla640/gdn/K64/bfloat16", "verify fla640/gdn/K128/bfloat16"]
    # a cell dict and a verifier summary name themselves as the task that made them
    assert F.task_name({"op": "gdn", "K": 64, "dtype": "bfloat16", "T": 64}) == F.task_name(quick[0])
    assert F.task_name({"id": "fla640/gdn/K64/bfloat16"}) == F.task_name(quick[2])
    seen: set = set()
    assert F.estimate_s(quick[0], seen) == 90.0 and F.estimate_s(quick[2], seen) == 180.0
    seen.add(F.kernel_key(quick[0]))
    assert F.estimate_s(quick[1], seen) == 90.0  # K is in fla's autotune keys
    seen.add(F.kernel_key(quick[1]))
    assert F.estimate_s({**quick[0], "T": 1024}, seen) == 20.0 and F.estimate_s(quick[2], seen) == 60.0
    assert [t["kind"] for t in F.cpu_plumbing_plan()] == ["direct", "verify"]


def test_error_records():
    try:
        raise ValueError("boom")
    except ValueError as exc:
        cell = F.error_cell("gdn", 64, "bfloat16", 256, exc)
    assert cell["error"] == "ValueError: boom" and "Traceback" in cell["trace"] and cell["BK_expected"] == 64
    p = F.Pair(F.pair_id("gdn", 64, None), "gdn", 64, None)
    s = F.harness_error_summary(p, RuntimeError("x"))
    assert s["status"] == "harness_error" and s["compute_dtype"] == "native" and s["exposed"]
    assert F.task_name(s) == f"verify {p.id}"


def test_spy_records_every_launch_and_launches_the_real_kernel():
    launched = []

    class Kernel:
        best_config = "BV: 32"

        def __getitem__(self, grid):
            return lambda *a, **kw: launched.append((grid, kw["BK"]))

    chunk_o = type(sys)("fake_chunk_o")
    setattr(chunk_o, F.GUARD_KERNEL, Kernel())
    spy = F.install_spy(chunk_o)
    assert getattr(chunk_o, F.GUARD_KERNEL) is spy
    spy[(4,)](q=torch.zeros(1, dtype=torch.bfloat16), g=torch.zeros(1), BK=64, BV=32, K=64, V=64)
    assert launched == [((4,), 64)] and spy.best_config() == "BV: 32"
    assert spy.calls == [{"BK": 64, "BV": 32, "K": 64, "V": 64, "g": True, "g_gamma": False, "dw": False,
                          "dtype": "bfloat16"}]


def test_direct_cell_records_refusal_bypass_and_launches_with_a_stand_in_fla(monkeypatch):
    """direct_cell's plumbing on the CPU: fla's op replaced by the float64 oracle run in float32 behind a guard that
    reads the module flag, so the refusal, the bypass, the errors and the spy's launches are all exercised."""
    chunk_o = type(sys)("fake_chunk_o")
    chunk_o.IS_NVIDIA_HOPPER, chunk_o.TRITON_ABOVE_3_4_0, chunk_o.TRITON_ABOVE_3_7_1 = True, True, False

    class Kernel:
        def __getitem__(self, grid):
            return lambda *a, **kw: None

    setattr(chunk_o, F.GUARD_KERNEL, Kernel())
    monkeypatch.setattr(F, "_chunk_o", lambda: chunk_o)
    monkeypatch.setattr(F, "check_guard_target", lambda c=None: None)

    def fake_fla(op, x, scale):
        if chunk_o.IS_NVIDIA_HOPPER and not chunk_o.TRITON_ABOVE_3_7_1:
            raise RuntimeError("refused (see #640)")
        getattr(chunk_o, F.GUARD_KERNEL)[(1,)](q=x["q"], g=x["g"], BK=F.expected_bk(x["q"].shape[-1]), K=64)
        return F.oracle(op, {n: t.double() for n, t in x.items()}, scale).float()

    monkeypatch.setattr(F, "fla_call", fake_fla)
    spy = F.install_spy()
    cell = F.direct_cell("gdn", 64, "float32", 16, B=1, H=1, seed=0, device="cpu", oracle_device="cpu", spy=spy)
    assert cell["guarded"]["refused"] and cell["guard_state"]["would_refuse"]
    by = cell["bypassed"]
    assert by["bitwise_deterministic"] and by["repeats"] == 3 and by["label"] == "ok"
    assert set(by["errors"]) == {"o", "dq", "dk", "dv", "dg", "dbeta"} and by["worst_grad_rel"] < 1e-5
    assert [c["BK"] for c in cell["dqkwg_launches"]] == [64]
    assert chunk_o.TRITON_ABOVE_3_7_1 is False  # the bypass restored the flag
