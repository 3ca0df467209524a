"""A results folder of fla_compare.py part (b), written by the study's own code with the numerics faked.

:func:`write_fixture_run` drives ``bench_cell`` (and the budget loop's skip rows, ``summarize``) of
:mod:`lethe.kernels.gdn.fla_compare` on the CPU, with the options parsed by ``experiments/gdn/fla_compare.py``
and everything that needs a GPU or fla replaced: inputs are tiny
tensors, the first call returns gradients with chosen errors, the float64 slice returns chosen errors, and the
timer returns chosen samples. So the rows have exactly the schema the H200 run writes (the test module also checks
their keys against a real --dry-run), while every number is known in advance.

Scenarios planted (the tests look for each):
  * gdn  d_v=64,  T=4096, main cell:   the whole task skipped for budget (the main loop's skip row);
  * sgdn d_v=128, T=4096, main cell:   fla returns a NaN, fails the check and is not timed;
  * sgdn d_v=64,  T=1024, native cell: native's first call raises (an ``error`` bench row);
  * sgdn d_v=64,  T=4096, main cell:   ours gets no timing for budget (a per-impl skip row);
  * the last planned task (sgdn d_v=64 native T=4096) never runs: a ``killed`` row, summary incomplete.
Every main cell also has the script's skip row for native (too big for its torch forward).
"""

from __future__ import annotations

import contextlib
import importlib
import json
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]

#: bwd medians are fla's * these; fwd+bwd likewise (so ratios are known exactly)
OURS_OVER_FLA = {"bwd": 1.5, "fwd+bwd": 1.25}
NATIVE_OVER_FLA = {"bwd": 4.0, "fwd+bwd": 3.0}
PROVENANCE = {"schema": "lethe.provenance/1", "gpu": "NVIDIA H200", "driver": "580.159.04", "cuda_runtime": "13.0",
              "torch": "2.11.0+cu130", "triton": "3.6.0", "fla": "0.6.0", "git_sha": "0" * 40,
              "experiment": "gdn_fla_compare"}
CEILINGS = {"measured": True, "bf16_matmul_tflops": 700.0, "tf32_matmul_tflops": 350.0, "copy_tbps": 4.0,
            "method": "fixture"}
BUDGET_SKIP = ("gdn", 64, 4096, "bench")
FLA_NAN = ("sgdn", 128, 4096, "bench")
NATIVE_RAISES = ("sgdn", 64, 1024, "bench_native")
OURS_NO_TIME = ("sgdn", 64, 4096, "bench")
NEVER_REACHED = ("sgdn", 64, 4096, "bench_native")


def load_script():
    """experiments/gdn/fla_compare.py, imported (the repository root is on pytest's path)."""
    return importlib.import_module("experiments.gdn.fla_compare")


def load_study():
    """lethe.kernels.gdn.fla_compare, the module whose cells the driver runs (and whose calls are faked here)."""
    return importlib.import_module("lethe.kernels.gdn.fla_compare")


def fla_ms(mode: str, member: str, V: int, T: int, B: int, H: int) -> list[float]:
    """fla's synthetic samples: time linear in the head-tokens, a spread around the median."""
    base = (0.9 if mode == "bwd" else 1.3) * (B * H * T / 2**20) * (1.0 if V == 128 else 0.6) * (
        1.2 if member == "gdn" else 1.0)
    return [base * f for f in (0.97, 1.0, 1.05)]


def samples_for(impl: str, cell: tuple) -> dict:
    member, V, T, B, H = cell
    out = {}
    for mode, key in (("bwd", "bwd"), ("fwd+bwd", "total")):
        f = {"fla": 1.0, "ours": OURS_OVER_FLA[mode], "native": NATIVE_OVER_FLA[mode]}[impl]
        out[key] = [x * f for x in fla_ms(mode, member, V, T, B, H)]
    out["fwd"] = [t - b for t, b in zip(out["total"], out["bwd"], strict=True)]
    return out


def write_fixture_run(out: Path, native: bool = True, split: bool = False) -> Path:
    """Write rows.jsonl, summary.json and provenance.json of a synthetic bench run into ``out``. ``split``: the
    same cells as two runs, the main sweep without native, then native's cells added with --append."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "rows.jsonl").write_text("")
    if not split:
        _one_run(out, "ours,fla,native" if native else "ours,fla", [])
    else:
        _one_run(out, "ours,fla", ["--bench-cells", "main"], cute=True)
        _one_run(out, "ours,fla,native", ["--bench-cells", "native", "--append"], ceilings={**CEILINGS,
                                                                                         "copy_tbps": 4.2})
    return out


def _one_run(out: Path, impls: str, extra: list[str], ceilings: dict = CEILINGS, cute: bool | None = None) -> None:
    fc = load_study()
    args = load_script().parse_args(["--out", str(out), "--parts", "bench", "--bench-members", "gdn,sgdn", "--dvs", "128,64",
                          "--bench-lengths", "4096,1024", "--native-lengths", "1024,4096", "--impls", impls,
                          "--reps", "1", "--sets", "3", "--budget-s", "1e9", *extra])
    bench_impls = tuple(i for i in fc.BENCH_IMPLS if i in impls.split(","))
    run = fc.Run(args=args, out=out, device="cpu", dtype=torch.bfloat16, g_dtype=torch.bfloat16, K=128, C=64,
                 impls=("ours", "fla"), bench_impls=bench_impls)
    run.policy = fc.FlaAutotunePolicy()  # never installed: only what the rows record of it
    # what main() does with --append: earlier rows feed the summary, earlier provenance is kept
    run.rows.extend(json.loads(x) for x in (out / "rows.jsonl").read_text().splitlines() if x.strip())
    prov = dict(PROVENANCE)
    if args.append:
        prev = json.loads((out / "provenance.json").read_text())
        prov["previous_runs"] = prev.pop("previous_runs", []) + [prev]
    cute = "native" in bench_impls if cute is None else cute
    run.meta = {**fc.run_meta(args, ("ours", "fla"), bench_impls, "cuda", cute),
                # what main() adds once fla is imported on the device
                "torch": PROVENANCE["torch"], "triton": PROVENANCE["triton"], "fla": PROVENANCE["fla"],
                "gpu": PROVENANCE["gpu"], "capability": [9, 0], "fla_disable_backend_dispatch": "1",
                "fla_dispatch_disabled": True}
    run.emit({"kind": "meta", **run.meta, "args": vars(args)})
    run.ceilings = dict(ceilings)
    run.emit({"kind": "ceilings", **run.ceilings, "spec": fc.SPEC_H200})

    current = {}

    def fake_inputs(member, B, T, H, K, V, dtype, g_dtype, seed, device):
        leaves = {n: torch.zeros(1, 4, 1, 2, requires_grad=True) for n in fc.MEMBERS[member]["leaves"]}
        return leaves, torch.zeros(1, 4, 1, 2)

    def fake_fwd_bwd(run_, impl, member, leaves, do, scale):
        cell = current["cell"]
        if (member, cell["V"], cell["T"], cell["kind"]) == NATIVE_RAISES and impl == "native":
            raise RuntimeError("CUTE_DSL compile failed (planted)")
        err = {"ours": 0.0, "fla": 8e-3, "native": 2e-3}[impl]
        grads = {"d" + n: torch.ones(3) * (1 + err) for n in leaves}
        o = torch.ones(3) * (1 + err / 2)
        if impl == "fla" and (member, cell["V"], cell["T"], cell["kind"]) == FLA_NAN:
            o = o.clone()
            o[1] = float("nan")
        return o, grads, 1.5, fc.MEMBERS[member]["guarded"] and impl == "fla"

    def fake_slice(run_, member, leaves, do, results, scale):
        errs = {"ours": 3e-3, "fla": 7e-3, "native": 3e-3}
        return {impl: {"errors": {"o": errs[impl] / 2, "dq": errs[impl]}, "worst_rel_err": errs[impl],
                       "worst_tensor": "dq"} for impl in results}

    def fake_impl_call(run_, impl, member):
        return impl, fc.MEMBERS[member]["guarded"] and impl == "fla"

    def fake_time(run_, fn, sets, scale):
        impl, cell = fn, current["cell"]
        if (cell["member"], cell["V"], cell["T"], cell["kind"]) == OURS_NO_TIME and impl == "ours":
            return {"fwd": [], "bwd": [], "total": []}, 0, 0.5
        return samples_for(impl, (cell["member"], cell["V"], cell["T"], cell["B"], cell["H"])), 1, 0.01

    @contextlib.contextmanager
    def fake_count():
        yield {"calls": 4}  # what a CUDA run records: the CuTe K1 ran (once per backward)

    patches = {"bench_inputs": fake_inputs, "fwd_bwd": fake_fwd_bwd, "_slice_check": fake_slice,
               "_impl_call": fake_impl_call, "_time_impl": fake_time, "count_native_k1": fake_count,
               "bypass": lambda active: contextlib.nullcontext()}  # the real one imports fla
    saved = {k: getattr(fc, k) for k in patches}
    for k, v in patches.items():
        setattr(fc, k, v)
    try:
        tasks = fc.plan([], args.bench_members, args.dvs, [], args.bench_lengths, args.parts, torch_bench=False,
                        native_lengths=args.native_lengths if "native" in bench_impls and args.bench_cells != "main"
                        else (), main_cells=args.bench_cells != "native")
        for task in tasks:
            if task.kind not in ("bench", "bench_native"):
                continue
            ht = args.native_head_tokens if task.kind == "bench_native" else args.head_tokens
            cell = {"member": task.member, "V": task.V, "T": task.T, "kind": task.kind, "H": args.heads,
                    "B": fc.bench_batch(ht, args.heads, task.T)}
            current["cell"] = cell
            where = (task.member, task.V, task.T, task.kind)
            if where == NEVER_REACHED:
                run.emit({"kind": "killed", "reason": "signal 15", "left_s": 0.0})
                break
            if where == BUDGET_SKIP:
                run.emit(fc.budget_skip_row(run, task, 99.0))
                continue
            fc.run_task(run, task)
            run.emit({"kind": "task_done", "task": task.name, "seconds": 0.0})
        fc.summarize(run, complete=False)
    finally:
        for k, v in saved.items():
            setattr(fc, k, v)
    (out / "provenance.json").write_text(json.dumps(prov, indent=1, sort_keys=True) + "\n")
