"""lethe.kernels.gdn.fla_compare and its driver experiments/gdn/fla_compare.py on the CPU: the options, the plan
and its budget (estimates, skip / error / kill rows), the timing rows' floors, the caveats, the output schema (a
--dry-run end to end with our interpreter kernels and our torch path standing in for fla), and
experiments/gdn/triton_aot.py's launch configurations.

fla itself cannot run here (its autotuner needs a GPU driver even under TRITON_INTERPRET), so the fla-specific
calls are exercised only on the H200.
"""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _load(name):
    """The driver experiments/gdn/<name>.py, imported (the repository root is on pytest's path)."""
    return importlib.import_module(f"experiments.gdn.{name}")


@pytest.fixture(scope="module")
def fc():
    """The driver: its CLI (parse_args) and main()."""
    return _load("fla_compare")


@pytest.fixture(scope="module")
def lib():
    """The study module the driver runs."""
    return importlib.import_module("lethe.kernels.gdn.fla_compare")


# ---------------------------------------------------------------------------------------------- plan, args


def test_gpu_defaults(fc):
    a = fc.parse_args(["--out", "x"])
    assert a.dvs == [128, 64] and a.lengths == [1024, 4096] and a.bench_lengths == [4096, 1024, 16384, 32768]
    assert (a.dk, a.chunk, a.head_tokens, a.dtype, a.g_dtype, a.heads) == (128, 64, 2**20, "bfloat16", "bfloat16", 2)
    assert a.members == ["gdn", "sgdn", "kda", "gla", "ssd"] and a.bench_members == ["gdn", "sgdn"]
    assert a.fla_tune_bench_ms == (5.0, 20.0) and a.fla_max_configs == 0 and a.fla_retune == "once"
    with pytest.raises(SystemExit):
        fc.parse_args(["--out", "x", "--members", "mamba"])
    d = fc.parse_args(["--out", "x", "--dry-run"])
    assert (d.dk, d.chunk, d.dtype, d.dvs) == (16, 16, "float32", [32, 16])


def test_plan_priority(fc, lib):
    a = fc.parse_args(["--out", "x"])
    tasks = lib.plan(a.members, a.bench_members, a.dvs, a.lengths, a.bench_lengths, a.parts)
    names = [t.name for t in tasks]
    assert names[:2] == ["ceilings", "precompile 0"]
    # (a) core first: gdn and sgdn, both d_v, short length, then the long length
    assert names[2:6] == ["correct gdn V=128 T=1024", "correct gdn V=64 T=1024", "correct sgdn V=128 T=1024",
                          "correct sgdn V=64 T=1024"]
    first_bench = names.index("bench gdn V=128 T=4096")
    assert all(n.startswith("correct") for n in names[2:first_bench])
    assert "correct kda V=128 T=1024" in names[:first_bench] and "correct kda V=64 T=1024" in names[first_bench:]
    bench = [n for n in names if n.startswith("bench ")]
    assert bench[:4] == [f"bench gdn V=128 T={T}" for T in (4096, 1024, 16384, 32768)]
    assert bench[4].startswith("bench sgdn V=128") and bench[8].startswith("bench gdn V=64")
    assert names[-1].startswith("bench_torch") and len(names) == len(set(names))
    combos = lib.ours_combos(tasks)  # (erase, scalar-gate path, d_v, T, B, H); no shape given: one sequence
    assert (True, False, 128, 32768, 1, 1) in combos and (False, False, 128, 1024, 1, 1) in combos
    assert (False, False, 128, 32768, 1, 1) not in combos  # the members without erase are in (a) at 1024, 4096
    assert (True, True, 128, 4096, 1, 1) in combos  # sgdn's own kernels
    # our kernels are compiled in two batches: what runs first, then (before the d_v = 64 sweep) the rest
    assert names[names.index("bench gdn V=64 T=4096") - 1] == "precompile 1"
    p0, p1 = (t.combos for t in tasks if t.kind == "precompile")
    assert (True, False, 128, 32768, 1, 1) in p0 and (True, False, 64, 1024, 1, 1) in p0
    assert (True, False, 64, 32768, 1, 1) not in p0
    assert (True, False, 64, 32768, 1, 1) in p1 and (False, False, 64, 1024, 1, 1) in p1
    assert set(p0) | set(p1) == set(combos)
    # the driver passes its --heads and the cells' shapes: one value keeps the sweep above
    same = lib.plan(a.members, a.bench_members, a.dvs, a.lengths, a.bench_lengths, a.parts, heads=[2],
                    head_tokens=[2**20], shape=lambda t: lib.cell_shape(a, t))
    assert [t.name for t in same] == names
    shapes = {(c[3], c[4], c[5]) for t in same if t.kind == "precompile" for c in t.combos}
    assert (4096, 2**20 // (2 * 4096), 2) in shapes and (1024, 1, 2) in shapes  # a bench cell, a correctness cell


def test_model_shape_grid(fc, lib):
    """--heads and --head-tokens lists: one process covers the grid, each (d_v, H, member) group whole (fla tunes
    once per group), a shape two grid points share once, (a) at the first H; precompiles at each task's H."""
    a = fc.parse_args(["--out", "x", "--parts", "bench", "--heads", "16,32", "--head-tokens", "1048576,262144",
                       "--bench-lengths", "2048,4096,8192,32768", "--dvs", "128,64", "--no-torch-bench"])
    assert (a.heads, a.bench_heads, a.head_tokens, a.bench_head_tokens) == (16, [16, 32], 2**20, [2**20, 2**18])
    tasks = lib.plan(a.members, a.bench_members, a.dvs, a.lengths, a.bench_lengths, a.parts, torch_bench=False,
                     heads=a.bench_heads, head_tokens=a.bench_head_tokens)
    bench = [t for t in tasks if t.kind == "bench"]
    # 2 members x 2 d_v x (8 cells at H = 16, 7 at H = 32: its 2^18 point at T = 32768 is the 2^20 one, B = 1)
    assert len(bench) == 2 * 2 * (8 + 7) and len({t.name for t in bench}) == len(bench)
    assert bench[0].name == "bench gdn V=128 T=2048 H=16 HT=1048576"
    groups = [(t.V, t.H, t.member) for t in bench]
    assert groups == sorted(groups, key=lambda g: (-g[0], g[1], ["gdn", "sgdn"].index(g[2])))
    firsts = [i for i in range(len(bench)) if i == 0 or groups[i] != groups[i - 1]]
    assert len(firsts) == 8  # one fla tuning per (d_v, H, member)
    assert not any(t.H == 32 and t.HT == 2**18 and t.T == 32768 for t in bench)
    assert [t.kind for t in tasks[:2]] == ["ceilings", "precompile"] and tasks[2] is bench[0]
    p0, p1 = (t.combos for t in tasks if t.kind == "precompile")
    assert {(c[2], c[5]) for c in p0} == {(128, 16), (128, 32)} and {(c[2], c[5]) for c in p1} == {(64, 16), (64, 32)}
    sized = lib.plan(a.members, a.bench_members, a.dvs, a.lengths, a.bench_lengths, a.parts, torch_bench=False,
                     heads=a.bench_heads, head_tokens=a.bench_head_tokens, shape=lambda t: lib.cell_shape(a, t))
    p0 = next(t.combos for t in sized if t.kind == "precompile")
    # one launch set per cell shape and path: 15 (T, B, H) shapes at d_v 128, general (gdn) and scalar-gate (sgdn)
    assert len(p0) == 2 * 15 and (True, True, 128, 2048, 32, 16) in p0 and (True, False, 128, 32768, 1, 32) in p0
    import torch

    run = lib.Run(args=a, out=Path("x"), device="cpu", dtype=torch.bfloat16, g_dtype=torch.bfloat16, K=128, C=64,
                  impls=("ours", "fla"), bench_impls=("ours", "fla"))
    f = lib.task_fields(run, bench[0])
    assert (f["B"], f["H"], f["head_tokens"]) == (32, 16, 2**20)
    cold = lib.estimate_s(run, bench[0])
    run.seen |= {("fla", "gdn", 128, 16), ("fla_tuned_at_bench", "gdn", 128, 16)}
    assert lib.estimate_s(run, bench[0]) == cold - a.est_fla_tune_s - a.est_fla_retune_s + 2.0
    h32 = next(t for t in bench if t.H == 32 and t.member == "gdn")
    assert lib.estimate_s(run, h32) == cold  # a new H is a new fla tuning
    assert lib.tune_label("gdn", 128, 16, a) == "gdn V=128 H=16"
    assert lib.tune_label("gdn", 128, 2, fc.parse_args(["--out", "x"])) == "gdn V=128"


def test_resume_leaves_out_what_an_earlier_run_timed(fc, lib, tmp_path):
    a = fc.parse_args(["--out", str(tmp_path), "--parts", "bench", "--heads", "16,32", "--head-tokens", "262144",
                       "--bench-lengths", "2048,4096", "--dvs", "128", "--bench-members", "sgdn", "--resume"])
    assert a.append
    import torch

    run = lib.Run(args=a, out=tmp_path, device="cpu", dtype=torch.bfloat16, g_dtype=torch.bfloat16, K=128, C=64,
                  impls=("ours", "fla"), bench_impls=("ours", "fla"))
    tasks = lib.plan(a.members, a.bench_members, a.dvs, a.lengths, a.bench_lengths, a.parts, torch_bench=False,
                     heads=a.bench_heads, head_tokens=a.bench_head_tokens)
    assert [t.name for t in tasks if t.kind == "bench"] == [
        f"bench sgdn V=128 T={T} H={H} HT=262144" for H in (16, 32) for T in (2048, 4096)]

    def row(impl, T, H, mode="fwd+bwd", status="ok"):
        return {"kind": "bench", "impl": impl, "member": "sgdn", "V": 128, "T": T, "B": 2**18 // (H * T), "H": H,
                "cell": "bench", "mode": mode, "status": status}

    earlier = [row("ours", 2048, 16), row("fla", 2048, 16),  # done
               row("ours", 4096, 16),  # fla missing: stays
               row("ours", 2048, 32, "fwd"), row("fla", 2048, 32, "fwd"),  # no fwd+bwd row: stays
               row("ours", 4096, 32, status="error"), row("fla", 4096, 32)]
    keep, done = lib.resume_tasks(run, tasks, earlier)
    assert done == ["bench sgdn V=128 T=2048 H=16 HT=262144"]
    assert [t.name for t in keep if t.kind == "bench"] == [
        "bench sgdn V=128 T=4096 H=16 HT=262144", "bench sgdn V=128 T=2048 H=32 HT=262144",
        "bench sgdn V=128 T=4096 H=32 HT=262144"]
    pre = next(t for t in keep if t.kind == "precompile")
    assert (True, True, 128, 2048, 8, 16) not in pre.combos and (True, True, 128, 4096, 4, 16) in pre.combos


_RECORD = """
import json, os, sys, torch
from pathlib import Path
from experiments.gdn.fla_compare import parse_args
from lethe.aot import record_launches
from lethe.kernels.gdn import autograd as AG
from lethe.kernels.gdn import fla_compare as L
from lethe.kernels.gdn.bench import bench_inputs, ours_fn
from lethe.kernels.gdn.triton_fwd import decay_floor_check_off

args = parse_args(["--out", sys.argv[1], "--parts", "bench"])
run = L.Run(args=args, out=Path(sys.argv[1]), device="cpu", dtype=torch.bfloat16, g_dtype=torch.bfloat16, K=128,
            C=64, impls=("ours", "fla"), bench_impls=("ours", "fla"))
applies = AG.scalar_gate_applies


def on_cpu(*a, **k):  # the dispatch's CUDA-or-interpreter test, passed for this recording on the CPU
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        return applies(*a, **k)
    finally:
        del os.environ["TRITON_INTERPRET"]


AG.scalar_gate_applies = on_cpu
res = {}
for member, sg in (("gdn", False), ("sgdn", True)):
    B, T, H, V = 2, 128, 16, 64
    leaves, do = bench_inputs(member, B, T, H, 128, V, torch.bfloat16, torch.bfloat16, 1, "cpu")
    # nothing runs, so the host-side decay check would read unwritten memory: off, as in the precompile
    with record_launches(execute=False) as real, decay_floor_check_off():
        o = ours_fn(member, "triton", 64)(leaves, 128 ** -0.5)
        torch.autograd.grad(o, list(leaves.values()), do)
    want = {L.launch_key(r)[1:] + (r.jit.fn.__name__,) for r in real}
    for shape in ((B, H), (1, 1)):
        pre, errs = L.record_ours(run, [(True, sg, V, T, *shape)])
        got = {k[1:] + (r.jit.fn.__name__,) for k, r in pre.items()}
        res[f"{member} {shape}"] = {"real": len(want), "missing": sorted(x[-1] for x in want - got), "errors": errs}
print(json.dumps(res))
"""


@pytest.mark.slow
def test_precompile_records_what_the_cell_launches(tmp_path):
    """What the precompile records for a cell's shape is exactly what that cell's forward + backward launches
    (every kernel with the same arguments' specialisation and meta-parameters), for the general path (gdn) and
    the scalar-gate path (sgdn); recorded at one sequence of one head instead, most of them would differ. A
    fresh process without TRITON_INTERPRET, where the kernels are JIT functions; nothing is launched."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=f"{ROOT / 'src'}:{ROOT}", TRITON_CACHE_DIR=str(tmp_path / "tc"))
    out = subprocess.run([sys.executable, "-c", _RECORD, str(tmp_path)], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    for member in ("gdn", "sgdn"):
        cell, single = res[f"{member} (2, 16)"], res[f"{member} (1, 1)"]
        assert cell["real"] >= 8 and cell["missing"] == [] and cell["errors"] == []
        assert len(single["missing"]) >= 3


# ---------------------------------------------------------------------------------------------- end to end


def _rows(out):
    return [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]


def _env(monkeypatch, tmp_path):
    """main() sets these process-wide; pin them here so the test leaves the environment as it found it."""
    monkeypatch.setenv("LETHE_GIT_SHA", "0" * 40)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.setenv("FLA_DISABLE_BACKEND_DISPATCH", "1")


@pytest.mark.slow
def test_dry_run_end_to_end(fc, lib, tmp_path, monkeypatch):
    _env(monkeypatch, tmp_path)
    doc = fc.main(["--dry-run", "--out", str(tmp_path), "--members", "gdn,sgdn", "--bench-members", "gdn",
                   "--dvs", "16", "--lengths", "48", "--bench-lengths", "32", "--head-tokens", "64", "--reps", "1",
                   "--sets", "1", "--warmup", "1", "--no-torch-bench"])
    rows = _rows(tmp_path)
    assert all(r["schema"] == "lethe.gdn.fla_compare/1" for r in rows)
    kinds = [r["kind"] for r in rows]
    assert kinds[0] == "meta" and {"ceilings", "precompile", "correct", "agree", "bench_check", "bench"} <= set(kinds)
    corr = [r for r in rows if r["kind"] == "correct"]
    assert {(r["impl"], r["member"]) for r in corr} == {(i, m) for i in ("ours", "torch") for m in ("gdn", "sgdn")}
    for r in corr:  # float32 on the interpreter: within float32 rounding of the float64 oracle
        assert r["status"] == "ok" and r["worst_rel_err"] < 1e-5 and r["within_pin"]
        assert set(r["errors"]) == {"o"} | {"d" + n for n in lib.MEMBERS[r["member"]]["leaves"]}
    assert {"dbeta", "dg"} <= set(next(r for r in corr if r["member"] == "sgdn")["errors"])
    chk = next(r for r in rows if r["kind"] == "bench_check")
    assert chk["vs_ours"]["impl"] == "torch" and chk["vs_ours"]["worst_rel_err"] < 1e-5
    assert chk["vs_float64_slice"]["ours"]["worst_rel_err"] < 1e-5
    bench = [r for r in rows if r["kind"] == "bench"]
    assert {(r["impl"], r["mode"]) for r in bench} == {(i, m) for i in ("ours", "torch")
                                                       for m in ("bwd", "fwd", "fwd+bwd")}
    for r in bench:
        assert r["median_ms"] > 0 and r["p10_ms"] <= r["median_ms"] <= r["p90_ms"] and r["n"] == 1
        assert r["flops"] > 0 and r["bytes"] > 0 and r["floor_spec_ms"] > 0 and r["B"] == 1
    assert doc["complete"] and not doc["errors"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["complete"] and len(summary["speed"]) == 3
    assert json.loads((tmp_path / "provenance.json").read_text())["git_sha"] == "0" * 40


def test_budget_skips_are_recorded(fc, tmp_path, monkeypatch):
    _env(monkeypatch, tmp_path)
    doc = fc.main(["--dry-run", "--out", str(tmp_path), "--budget-s", "0", "--members", "gdn", "--dvs", "16",
                   "--lengths", "32", "--bench-lengths", "32"])
    rows = _rows(tmp_path)
    skips = [r for r in rows if r["kind"] == "skip"]
    assert skips and all(r["reason"] == "budget" for r in skips)
    assert not [r for r in rows if r["kind"] in ("correct", "bench")]
    assert doc["complete"] and len(doc["skipped"]) == len(skips)


# ---------------------------------------------------------------------------------------------- triton_aot


@pytest.mark.slow
def test_wrapper_launch_configs_at_dk128():
    """What the wrappers launch at d_k = 128 (recorded, nothing compiled): num_stages=1 everywhere (Triton's
    default 3 is what overflowed shared memory) and the block sizes of the documented table."""
    from gdn_helpers import recorded_launches

    launches = recorded_launches()
    assert all(r["num_stages"] == 1 for r in launches)
    got = {(r["kernel"], r["V"], r["erase"]): (r.get("BV"), r["num_warps"]) for r in launches}
    for V in (64, 128):
        # the default split WY step, at the H200 sweep's warps (A 4, inverse 2, products 4)
        assert got[("wy_a_kernel", V, True)] == (None, 4)
        assert got[("wy_inverse_kernel", V, True)] == (None, 2)
        assert got[("wy_apply_kernel", V, True)] == (None, 4)
        assert ("wy_fwd_kernel", V, True) not in got
        assert got[("state_fwd_kernel", V, True)] == (32, 4)
        assert got[("prep_fwd_kernel", V, True)] == (None, 4)
        assert got[("output_fwd_kernel", V, True)] == (64, 4)  # 4 warps since the H200 launch sweep
        assert got[("state_bwd_local_kernel", V, True)] == (64, 8)
        assert got[("state_bwd_kernel", V, True)] == (32, 4)
        assert got[("intra_bwd_kernel", V, True)] == (32, 8)
        assert not any((kern, V, False) in got for kern in ("wy_a_kernel", "wy_inverse_kernel", "wy_apply_kernel"))
        # no erase: no triangular solve
    assert {r["PREC"] for r in launches if r["kernel"] == "intra_bwd_kernel"} == {"tf32"}
    assert {r["SPLIT"] for r in launches if r["kernel"] == "state_bwd_kernel"} == {True}


@pytest.mark.slow
def test_backward_kernels_fit_sm90a_at_dk128(tmp_path):
    """Compile the three backward kernels of the state scan and the intra-chunk step for sm_90a at d_k = 128,
    d_v = 128 (the largest tiles) and check the H200's limits (a few compiles: tens of seconds on 2 cores)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["LETHE_GIT_SHA"] = "0" * 40
    out = tmp_path / "aot.json"
    subprocess.run([sys.executable, str(ROOT / "experiments/gdn/triton_aot.py"), "--dvs", "128", "--dtypes",
                    "bfloat16", "--variants", "erase", "--kernels",
                    "state_bwd_local_kernel,state_bwd_kernel,intra_bwd_kernel", "--json", str(out)], env=env, timeout=900, check=True, capture_output=True)
    doc = json.loads(out.read_text())
    assert doc["all_fit"] and len(doc["rows"]) == 3
    for r in doc["rows"]:
        assert r["error"] is None and r["shared_bytes"] <= 232_448 and r["registers"] <= 255


def test_caveats_separate_correctness_caps_from_bench_caps(fc, lib, tmp_path):
    args = fc.parse_args(["--out", str(tmp_path)])
    run = lib.Run(args=args, out=tmp_path, device="cpu", dtype=None, g_dtype=None, K=128, C=64, impls=("ours", "fla"))
    run.policy = lib.FlaAutotunePolicy()
    ev = lambda phase, n, of: {"phase": phase, "benchmarked": n, "after_fla_prune": of}  # noqa: E731
    run.policy.events = [ev("correct gdn V=128 T=1024", 2, 18), ev("bench gdn V=128 T=4096", 18, 18)]
    text = " ".join(lib.caveats(run))
    assert "part (a) ran fla with at most 2 configs" in text and "searched its full config lists" in text
    assert "CAPPED" not in text
    run.policy.events.append(ev("bench sgdn V=128 T=4096", 4, 18))
    run.rows.append({"member": "sgdn", "bypass_640": True})
    text = " ".join(lib.caveats(run))
    assert "CAPPED for 1 kernels" in text and "bypassed" in text and "['sgdn']" in text


# ---------------------------------------------------------------------------------------------- native impl, gate


def test_resolve_impls(fc, lib):
    assert lib.resolve_impls("auto", False, cuda=True, cute=True) == ("ours", "fla", "native")
    assert lib.resolve_impls("auto", False, cuda=True, cute=False) == ("ours", "fla")
    assert lib.resolve_impls("auto", False, cuda=False, cute=True) == ("ours", "fla")
    assert lib.resolve_impls("auto", True, cuda=False, cute=True) == ("ours", "torch")  # dry: only if asked
    assert lib.resolve_impls("native,ours", True, cuda=False, cute=False) == ("ours", "native")
    assert lib.resolve_impls("fla,ours", False, cuda=True, cute=True) == ("ours", "fla")
    with pytest.raises(SystemExit):
        lib.resolve_impls("ours,native", False, cuda=True, cute=False)
    with pytest.raises(SystemExit):  # fla cannot run in the dry run
        fc.parse_args(["--out", "x", "--dry-run", "--impls", "ours,fla"])
    with pytest.raises(SystemExit):  # everything is checked against ours
        fc.parse_args(["--out", "x", "--impls", "fla,native"])
    a = fc.parse_args(["--out", "x"])
    assert a.native_head_tokens == a.torch_head_tokens == 2**16 and a.native_lengths == a.bench_lengths
    assert not lib.native_in_main(a) and lib.NATIVE_MEMBERS >= {"gdn", "sgdn"}
    assert lib.native_meta(a, ("ours", "fla")) is None
    m = lib.native_meta(a, ("ours", "fla", "native"))
    assert m == {"head_tokens": 2**16, "in_main_cells": False, "lengths": [4096, 1024, 16384, 32768],
                 "members": ["gdn", "sgdn"]}
    big = fc.parse_args(["--out", "x", "--native-head-tokens", str(2**20)])
    assert lib.native_in_main(big) and lib.native_meta(big, ("ours", "native"))["head_tokens"] == 2**20


def test_plan_places_native_cells_after_the_sweep(fc, lib):
    a = fc.parse_args(["--out", "x", "--parts", "bench"])
    tasks = lib.plan(a.members, a.bench_members, a.dvs, a.lengths, a.bench_lengths, a.parts,
                    native_lengths=[1024, 4096])
    names = [t.name for t in tasks]
    nat = [n for n in names if n.startswith("bench_native")]
    assert nat == [f"bench_native {m} V={V} T={T}" for V in (128, 64) for m in ("gdn", "sgdn") for T in (1024, 4096)]
    last_sweep = max(i for i, n in enumerate(names) if n.startswith("bench "))
    assert names.index(nat[0]) > last_sweep and names[-1].startswith("bench_torch")
    # without native lengths the plan is the old one: the native cells only add, in one place
    without = [t.name for t in lib.plan(a.members, a.bench_members, a.dvs, a.lengths, a.bench_lengths, a.parts)]
    assert [n for n in names if not n.startswith("bench_native")] == without


def test_native_skip_reason_names_the_size(fc, lib, tmp_path):
    import torch

    args = fc.parse_args(["--out", str(tmp_path)])
    run = lib.Run(args=args, out=tmp_path, device="cpu", dtype=torch.bfloat16, g_dtype=torch.bfloat16, K=128, C=64,
                 impls=("ours", "fla"), bench_impls=("ours", "fla", "native"))
    (tmp_path / "rows.jsonl").touch()
    lib.skip_native_at_size(run, "gdn", 128, 4096)
    r = run.rows[-1]
    assert (r["kind"], r["impl"], r["cell"], r["B"], r["H"]) == ("skip", "native", "bench", 128, 2)
    assert "32 GiB" in r["reason"] and "65536" in r["reason"]
    t = lib.task_fields(run, lib.Task("bench_native", "sgdn", 64, 32768))
    assert (t["B"], t["cell"]) == (1, "bench_native") and t["counts"]["chunks"] == 2 * 512
    assert lib.native_labels(run, 3)["native_k1"] == "cute-dsl" and lib.native_labels(run, 0)["native_k1"].startswith(
        "torch scan") and lib.native_labels(run, None)["native_k1"].startswith("unknown")


@pytest.mark.slow
def test_append_splits_a_sweep_over_runs(fc, tmp_path, monkeypatch):
    """--append adds a run to a folder (the main sweep, then native's cells); without it a used folder is refused."""
    _env(monkeypatch, tmp_path)
    common = ["--dry-run", "--out", str(tmp_path), "--parts", "bench", "--bench-members", "gdn", "--dvs", "16",
              "--bench-lengths", "32", "--head-tokens", "128", "--native-head-tokens", "64", "--native-lengths", "32",
              "--reps", "1", "--sets", "1", "--warmup", "1", "--no-torch-bench"]
    fc.main(common + ["--bench-cells", "main"])
    first = _rows(tmp_path)
    assert {r["cell"] for r in first if r["kind"] == "bench"} == {"bench"}
    with pytest.raises(SystemExit):
        fc.main(common + ["--bench-cells", "native", "--impls", "ours,torch,native"])
    doc = fc.main(common + ["--bench-cells", "native", "--impls", "ours,torch,native", "--append"])
    rows = _rows(tmp_path)
    assert rows[:len(first)] == first and [r["kind"] for r in rows].count("meta") == 2
    new = [r for r in rows[len(first):] if r["kind"] == "bench"]
    assert {(r["cell"], r["impl"]) for r in new} == {("bench_native", i) for i in ("ours", "torch", "native")}
    assert doc["runs"] == 2 and {s["B"] for s in doc["speed"]} == {1, 2}  # both runs' cells in the summary
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert len(prov["previous_runs"]) == 1 and "previous_runs" not in prov["previous_runs"][0]


# ---------------------------------------------------------------------------------------------- budget, rows


def _run(fc, lib, tmp_path, *argv, **kw):
    import torch

    args = fc.parse_args(["--out", str(tmp_path), *argv])
    (tmp_path / "rows.jsonl").touch()
    return lib.Run(args=args, out=tmp_path, device="cpu", dtype=torch.bfloat16, g_dtype=torch.bfloat16, K=128, C=64,
                   impls=kw.get("impls", ("ours", "fla")), bench_impls=kw.get("bench_impls", ("ours", "fla")))


def test_estimates_shrink_with_what_is_compiled_and_tuned(fc, lib, tmp_path):
    run = _run(fc, lib, tmp_path)
    a = run.args
    bench, corr = lib.Task("bench", "gdn", 128, 4096), lib.Task("correct", "gdn", 128, 1024)
    assert lib.estimate_s(run, lib.Task("ceilings")) == 10.0
    assert lib.estimate_s(run, lib.Task("precompile", V=0)) == 0.0  # nothing to compile
    assert lib.estimate_s(run, lib.Task("precompile", V=0, combos=((True, False, 128, 4096, 128, 2),))) == (
        a.est_precompile_s)
    cold = lib.estimate_s(run, bench)
    assert cold == a.est_ours_compile_s + a.est_fla_tune_s + a.est_fla_retune_s + a.est_bench_cell_s
    run.seen |= {("ours", 128), ("fla", "gdn", 128, 2), ("fla_tuned_at_bench", "gdn", 128, 2)}
    assert lib.estimate_s(run, bench) == 6.0 + 2.0 + a.est_bench_cell_s
    run.seen.add(("ours", 128, 4096 // 64))
    assert lib.estimate_s(run, bench) == 1.0 + 2.0 + a.est_bench_cell_s
    assert lib.estimate_s(run, corr) == 6.0 + a.est_fla_correct_s + 2.0 + 3.0  # (a) counts its own fla tuning
    run.seen.add(("fla", "gdn", 128))
    assert lib.estimate_s(run, corr) == 6.0 + 2.0 + 2.0 + 3.0  # ours compiled for d_v only, fla tuned


def test_run_plan_records_skips_errors_and_the_kill(fc, lib, tmp_path, monkeypatch):
    run = _run(fc, lib, tmp_path, "--budget-s", "100")
    run.policy = lib.FlaAutotunePolicy()
    run.policy.installed, undone = True, []
    run.policy._restore = (type("C", (), {}), None, None, None)
    monkeypatch.setattr(run.policy, "uninstall", lambda: undone.append(True))
    tasks = [lib.Task("bench", "gdn", 128, T) for T in (1024, 2048, 4096, 8192, 16384)]
    ran = []

    def fake_run_task(run_, task):
        ran.append(task.T)
        if task.T == 2048:
            raise ValueError("planted")
        if task.T == 8192:
            raise lib.BudgetKill("signal 15")

    monkeypatch.setattr(lib, "run_task", fake_run_task)
    monkeypatch.setattr(lib, "estimate_s", lambda run_, t: 1e9 if t.T == 4096 else 0.0)
    assert lib.run_plan(run, tasks) is False
    assert ran == [1024, 2048, 8192] and undone == [True]
    rows = run.rows
    assert [r["kind"] for r in rows] == ["task_done", "task_error", "task_done", "skip", "killed"]
    err = rows[1]
    assert err["error"] == "ValueError: planted" and "planted" in err["trace"] and err["T"] == 2048
    assert err["counts"]["chunks"] == 2 * 2048 // 64 * (2**20 // (2 * 2048))  # where it would have landed
    assert rows[3]["reason"] == "budget" and rows[3]["estimate_s"] == 1e9 and rows[3]["T"] == 4096
    assert rows[4]["reason"] == "signal 15"
    assert json.loads((tmp_path / "summary.json").read_text())["complete"] is False  # rewritten per task
    assert [json.loads(x)["kind"] for x in (tmp_path / "rows.jsonl").read_text().splitlines()] == [
        r["kind"] for r in rows]


def test_timing_rows_carry_counts_and_both_floors(fc, lib, tmp_path):
    run = _run(fc, lib, tmp_path)
    _, counts, base = lib.bench_base(run, "gdn", 128, 4096)
    assert base["B"] == 2**20 // (2 * 4096) and base["cell"] == "bench" and base["counts"] is counts
    samples = {"bwd": [2.0, 1.0, 3.0], "fwd": [1.0, 1.0, 1.0], "total": [3.0, 2.0, 4.0]}
    rows = lib.timing_rows(run, "ours", base, counts, samples, 1, 3, 1.5, False, None)
    assert [r["mode"] for r in rows] == ["bwd", "fwd", "fwd+bwd"]
    bwd, _, tot = rows
    assert bwd["median_ms"] == 2.0 and bwd["flops"] == counts["bwd_flops"] and "bytes_with_states" in bwd
    assert tot["flops"] == counts["fwd_flops"] + counts["bwd_flops"] and "bytes_with_states" not in tot
    assert "floor_ms" not in bwd and bwd["over_floor_spec"] == pytest.approx(2.0 / bwd["floor_spec_ms"])
    run.ceilings = {"measured": True, "bf16_matmul_tflops": 700.0, "copy_tbps": 4.0}
    bwd = lib.timing_rows(run, "ours", base, counts, samples, 1, 3, 1.5, False, None)[0]
    floor = max(counts["bwd_flops"] / 700e12, counts["bwd_bytes"] / 4e12) * 1e3
    assert bwd["floor_ms"] == pytest.approx(floor) and bwd["floor_basis"] == "measured bf16 matmul + copy"
    assert lib.native_pair_gib(counts, 128) == pytest.approx(counts["chunks"] * 64**2 * 128 * 4 / 2**30)


def test_resource_errors_are_what_a_capped_config_list_meets(lib):
    assert lib._resource_error(RuntimeError("triton.runtime.errors.OutOfResources: out of resource: shared"))
    assert lib._resource_error(type("PTXASError", (Exception,), {})("ptxas failed"))
    assert not lib._resource_error(ValueError("shape mismatch"))


def test_summary_ratios_per_cell_and_size(fc, lib, tmp_path):
    run = _run(fc, lib, tmp_path)
    for impl, ms in (("ours", 3.0), ("fla", 2.0), ("native", 8.0)):
        for B in (1, 2):
            run.rows.append({"kind": "bench", "status": "ok", "impl": impl, "member": "gdn", "V": 128, "T": 4096,
                             "B": B, "mode": "bwd", "median_ms": ms * B})
    run.rows.append({"kind": "meta"})
    doc = lib.summarize(run, complete=True)
    assert doc["schema"] == lib.SCHEMA == "lethe.gdn.fla_compare/1" and doc["runs"] == 1
    assert [(s["B"], s["fla_over_ours"], s["native_over_fla"]) for s in doc["speed"]] == [(1, 2 / 3, 4.0),
                                                                                           (2, 2 / 3, 4.0)]
    for H in (16, 32):  # shapes that differ in H alone (B = 1) stay apart
        for impl in ("ours", "fla"):
            run.rows.append({"kind": "bench", "status": "ok", "impl": impl, "member": "sgdn", "V": 64, "T": 32768,
                             "B": 1, "H": H, "mode": "fwd+bwd", "median_ms": H * (2.0 if impl == "ours" else 1.0)})
    doc = lib.summarize(run, complete=True)
    assert [(s["H"], s["fla_over_ours"]) for s in doc["speed"] if s["member"] == "sgdn"] == [(16, 0.5), (32, 0.5)]
    assert json.loads((tmp_path / "summary.json").read_text())["speed"] == doc["speed"]
