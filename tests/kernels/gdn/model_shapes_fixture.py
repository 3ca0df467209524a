"""A model-shape folder (rule gdn_model_shapes: fla_compare.py part (b) over a grid of heads and head-tokens),
written by the study's own code with the numerics faked, as ``fla_bench_fixture`` does for the H = 2 sweep.

The grid is the rule's, cut to two lengths: H 16 and 32, B*H*T 2**20 and 2**18, T 2048 and 32768, d_v 128 and 64,
members gdn and sgdn (7 shapes per member and d_v: the 2**18 point at H = 32, T = 32768 is the 2**20 one). The
plan is the driver's own (``plan`` with the grid), each bench task goes through ``run_task`` and ``bench_cell``;
inputs, first calls, the float64 slice and the timer are replaced. The slice limit stays at 16384, so T = 32768
shapes carry the "slice not run" check. Scenarios planted:
  * gdn  d_v=64,  H=16, T=2048, 2**18:  the task skipped for budget (the main loop's skip row);
  * sgdn d_v=128, H=32, T=2048, 2**20:  fla returns a NaN, fails the check and is not timed;
  * the last planned task never runs: a ``killed`` row, the summary incomplete.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
from fla_bench_fixture import CEILINGS, PROVENANCE, load_script, load_study

#: ours' medians are fla's times these, per member and pass
OURS_OVER_FLA = {"gdn": {"bwd": 1.5, "fwd": 2.0, "fwd+bwd": 1.6}, "sgdn": {"bwd": 1.1, "fwd": 1.2, "fwd+bwd": 1.14}}
SLICE_ERR = {"ours": 3e-3, "fla": 7e-3}
BUDGET_SKIP = ("gdn", 64, 2048, 16, 2**18)
FLA_NAN = ("sgdn", 128, 2048, 32, 2**20)
ARGS = ["--parts", "bench", "--bench-members", "gdn,sgdn", "--dvs", "128,64", "--heads", "16,32",
        "--head-tokens", "1048576,262144", "--bench-lengths", "2048,32768", "--impls", "ours,fla", "--reps", "1",
        "--sets", "3", "--no-torch-bench", "--budget-s", "1e9"]


def fla_ms(mode: str, member: str, V: int, T: int, B: int, H: int) -> list[float]:
    """fla's synthetic samples: time linear in the head-tokens, fwd + bwd = fwd+bwd."""
    scale = (B * H * T / 2**20) * (1.0 if V == 128 else 0.7) * (2.0 if member == "gdn" else 1.0)
    base = {"fwd": 1.0, "bwd": 2.0, "fwd+bwd": 3.0}[mode] * scale
    return [base * f for f in (0.98, 1.0, 1.03)]


def samples_for(impl: str, member: str, V: int, T: int, B: int, H: int) -> dict:
    out = {}
    for mode, key in (("bwd", "bwd"), ("fwd", "fwd"), ("fwd+bwd", "total")):
        f = 1.0 if impl == "fla" else OURS_OVER_FLA[member][mode]
        out[key] = [x * f for x in fla_ms(mode, member, V, T, B, H)]
    return out


def write_fixture_run(out: Path, ours_backend: str | None = None) -> Path:
    """rows.jsonl, summary.json and provenance.json of a synthetic model-shape run in ``out``."""
    fc, script = load_study(), load_script()
    out.mkdir(parents=True, exist_ok=True)
    (out / "rows.jsonl").write_text("")
    args = script.parse_args(["--out", str(out), *ARGS])
    if ours_backend:
        args.ours_backend = ours_backend  # what a GPU run with --ours-backend records (refused in a dry run)
    run = fc.Run(args=args, out=out, device="cpu", dtype=torch.bfloat16, g_dtype=torch.bfloat16, K=128, C=64,
                 impls=("ours", "fla"), bench_impls=("ours", "fla"))
    run.policy = fc.FlaAutotunePolicy()  # never installed: only what the rows record of it
    run.meta = {**fc.run_meta(args, ("ours", "fla"), ("ours", "fla"), "cuda", False),
                "torch": PROVENANCE["torch"], "triton": PROVENANCE["triton"], "fla": PROVENANCE["fla"],
                "gpu": PROVENANCE["gpu"], "capability": [9, 0], "fla_disable_backend_dispatch": "1",
                "fla_dispatch_disabled": True}
    run.emit({"kind": "meta", **run.meta, "args": vars(args)})
    run.ceilings = dict(CEILINGS)
    run.emit({"kind": "ceilings", **run.ceilings, "spec": fc.SPEC_H200})
    current = {}

    def fake_inputs(member, B, T, H, K, V, dtype, g_dtype, seed, device):
        leaves = {n: torch.zeros(1, 4, 1, 2, requires_grad=True) for n in fc.MEMBERS[member]["leaves"]}
        return leaves, torch.zeros(1, 4, 1, 2)

    def fake_fwd_bwd(run_, impl, member, leaves, do, scale):
        err = {"ours": 0.0, "fla": 4e-3}[impl]
        grads = {"d" + n: torch.ones(3) * (1 + err) for n in leaves}
        o = torch.ones(3) * (1 + err / 2)
        if impl == "fla" and current["task"] == FLA_NAN:
            o = o.clone()
            o[1] = float("nan")
        return o, grads, 1.5, fc.MEMBERS[member]["guarded"] and impl == "fla"

    def fake_slice(run_, member, leaves, do, results, scale):
        return {impl: {"errors": {"o": SLICE_ERR[impl] / 2, "dk": SLICE_ERR[impl]},
                       "worst_rel_err": SLICE_ERR[impl], "worst_tensor": "dk"} for impl in results}

    def fake_impl_call(run_, impl, member):
        return impl, fc.MEMBERS[member]["guarded"] and impl == "fla"

    def fake_time(run_, fn, sets, scale):
        m, V, T, H, ht = current["task"]
        return samples_for(fn, m, V, T, fc.bench_batch(ht, H, T), H), 1, 0.01

    patches = {"bench_inputs": fake_inputs, "fwd_bwd": fake_fwd_bwd, "_slice_check": fake_slice,
               "_impl_call": fake_impl_call, "_time_impl": fake_time,
               "bypass": lambda active: contextlib.nullcontext()}  # the real one imports fla
    saved = {k: getattr(fc, k) for k in patches}
    for k, v in patches.items():
        setattr(fc, k, v)
    try:
        tasks = [t for t in fc.plan([], args.bench_members, args.dvs, [], args.bench_lengths, args.parts,
                                    torch_bench=False, heads=args.bench_heads, head_tokens=args.bench_head_tokens)
                 if t.kind == "bench"]
        for task in tasks:
            current["task"] = (task.member, task.V, task.T, task.H, task.HT)
            if task is tasks[-1]:
                run.emit({"kind": "killed", "reason": "signal 15", "left_s": 0.0})
                break
            if current["task"] == BUDGET_SKIP:
                run.emit(fc.budget_skip_row(run, task, 99.0))
                continue
            fc.run_task(run, task)
            run.emit({"kind": "task_done", "task": task.name, "seconds": 0.0})
        fc.summarize(run, complete=False)
    finally:
        for k, v in saved.items():
            setattr(fc, k, v)
    (out / "provenance.json").write_text(json.dumps(PROVENANCE, indent=1, sort_keys=True) + "\n")
    return out
