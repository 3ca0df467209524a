"""fla 0.6.0 against our Triton GDN-family path on the H200: (a) correctness, (b) backward timing.

    python experiments/gdn/fla_compare.py --out $OUT/flacmp --budget-s 480        # on the H200, fla importable
    python experiments/gdn/fla_compare.py --out /tmp/flacmp --dry-run             # CPU, no fla (plumbing)
    python experiments/gdn/fla_compare.py --parts bench --heads 16,32 --head-tokens 1048576,262144 ...  # a grid

The driver: CLI, the plan's wiring and the output folder (``rows.jsonl``, ``summary.json``, ``provenance.json``;
``--append`` adds a run to a folder). What the study measures and how -- the members and calls, the correctness
cells, the bench cells and their check, fla's bounded autotuning, the budget, the summary and its caveats -- is
:mod:`lethe.kernels.gdn.fla_compare` (its docstring is this experiment's full description; docs/gdn.md §8).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from lethe.kernels.gdn.bench import MEMBERS
from lethe.kernels.gdn.fla_compare import (
    BENCH_IMPLS,
    DRY_BENCH_IMPLS,
    Run,
    cell_shape,
    log,
    native_in_main,
    plan,
    print_summary,
    resolve_impls,
    resume_tasks,
    run_meta,
    run_plan,
    setup_env,
    start_fla,
    summarize,
)

ROOT = Path(__file__).resolve().parents[2]
FLA_WHEEL = ROOT / ".whl" / "fla_core-0.6.0-py3-none-any.whl"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=480.0, help="no task starts past this (its estimate counts)")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU, no fla: our Triton kernels on the interpreter and our torch path standing in for "
                         "fla, float32, tiny sizes (K=16, chunk 16); exercises every code path and the outputs")
    ap.add_argument("--parts", default="correct,bench")
    ap.add_argument("--members", default="gdn,sgdn,kda,gla,ssd", help="members of (a); la is also available")
    ap.add_argument("--bench-members", default="gdn,sgdn")
    ap.add_argument("--dvs", default=None, help="d_v values (default 128,64; dry run 32,16)")
    ap.add_argument("--lengths", default=None, help="(a) lengths (default 1024,4096; dry run 32,48)")
    ap.add_argument("--bench-lengths", default=None, help="(b) lengths (default 4096,1024,16384,32768; the first "
                                                          "is where fla re-tunes)")
    ap.add_argument("--dk", type=int, default=None)
    ap.add_argument("--chunk", type=int, default=None)
    ap.add_argument("--batch", type=int, default=1, help="B of (a)")
    ap.add_argument("--heads", default="2", help="H of (a) and (b) (the ladder's H=2); a comma-separated list "
                                                 "makes (b) a grid over them, (a) runs at the first")
    ap.add_argument("--head-tokens", default=None, help="B*H*T of (b) (default 2**20; dry run 256); a "
                                                        "comma-separated list makes (b) a grid over them")
    ap.add_argument("--ours-backend", choices=("triton", "hybrid-tc"), default="triton",
                    help="the chunk_family backend of 'ours' (hybrid-tc needs the CuTe DSL and the GPU; the "
                         "scalar-gate member runs its own Triton kernels under both)")
    ap.add_argument("--torch-head-tokens", type=int, default=None, help="B*H*T of our torch-path bench "
                                                                        "(default 2**16; its [.., C, C, K] tensors)")
    ap.add_argument("--dtype", default=None, help="bfloat16 (default) or float16; float32 in the dry run")
    ap.add_argument("--g-dtype", default=None, help="dtype of g (default: same as --dtype)")
    ap.add_argument("--seed", type=int, default=20260829)
    ap.add_argument("--oracle-device", default=None)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--slice-check-max-t", type=int, default=16384)
    ap.add_argument("--reserve-s", type=float, default=5.0, help="kept free when sizing the timing loops")
    ap.add_argument("--no-torch-bench", action="store_true")
    ap.add_argument("--impls", default="auto",
                    help="implementations of (b), comma-separated from ours,fla,native (dry run: ours,torch,native); "
                         "auto: ours, fla and, where CUDA and the CuTe DSL are importable, native (dry run: ours,torch)")
    ap.add_argument("--bench-cells", choices=("all", "main", "native"), default="all",
                    help="which cells of (b) to plan: the main sweep, native's own cells, or both")
    ap.add_argument("--native-lengths", default=None, help="lengths of the bench_native cells (default: the bench "
                                                           "lengths)")
    ap.add_argument("--native-head-tokens", type=int, default=None,
                    help="B*H*T of native's cells (default: --torch-head-tokens; its torch forward's [.., C, C, K] "
                         "tensors); at or above --head-tokens native joins the main cells instead")
    ap.add_argument("--append", action="store_true",
                    help="add this run to an --out that already holds a run (rows.jsonl keeps growing; summary.json "
                         "covers every run in it; provenance.json lists the earlier runs under previous_runs), so a "
                         "sweep too long for one device call can be split (e.g. by --dvs, or native cells apart)")
    ap.add_argument("--resume", action="store_true",
                    help="implies --append: leave out the cells that the runs already in --out timed (every impl "
                         "of the cell) or checked, so a second call finishes what a first one's budget left")
    ap.add_argument("--check-gate-rel", type=float, default=0.05,
                    help="an impl whose worst relative error vs the float64 slice (or vs ours where T exceeds "
                         "--slice-check-max-t) exceeds this is not timed (0: gate on non-finite values only); "
                         "10x the paper's pin, so it catches broken results, not bf16 rounding")
    # fla autotuning
    ap.add_argument("--fla-max-configs", type=int, default=0, help="0: all configs of every fla autotuner")
    ap.add_argument("--fla-select", choices=("spread", "first"), default="spread")
    ap.add_argument("--fla-precompile", choices=("parallel", "off"), default="parallel")
    ap.add_argument("--fla-workers", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--fla-tune-bench-ms", default="5,20", help="do_bench warm-up,rep per config while tuning")
    ap.add_argument("--fla-retune", choices=("once", "per-size"), default="once",
                    help="once: re-tune per (op, d_v) at its first bench shape; per-size: at every bench shape")
    ap.add_argument("--fla-correct-configs", type=int, default=2,
                    help="configs per fla autotuner during (a), where speed is not measured (0: all)")
    ap.add_argument("--fla-slow-tune-s", type=float, default=90.0)
    ap.add_argument("--fla-fallback-configs", type=int, default=4,
                    help="cap applied after a first fla call slower than --fla-slow-tune-s (0: never cap)")
    # budget estimates (seconds)
    ap.add_argument("--est-fla-tune-s", type=float, default=45.0, help="a full tuning of one op at one d_v")
    ap.add_argument("--est-fla-correct-s", type=float, default=20.0, help="a capped tuning (part a)")
    ap.add_argument("--est-fla-retune-s", type=float, default=10.0)
    ap.add_argument("--est-ours-compile-s", type=float, default=25.0)
    ap.add_argument("--est-bench-cell-s", type=float, default=15.0)
    ap.add_argument("--est-precompile-s", type=float, default=60.0)
    ap.add_argument("--est-native-compile-s", type=float, default=20.0, help="one CuTe DSL compile of native K1")
    args = ap.parse_args(argv)
    dry = args.dry_run
    args.dvs = [int(x) for x in (args.dvs or ("32,16" if dry else "128,64")).split(",")]
    args.lengths = [int(x) for x in (args.lengths or ("32,48" if dry else "1024,4096")).split(",")]
    args.bench_lengths = [int(x) for x in (args.bench_lengths or ("64,32" if dry else "4096,1024,16384,32768"))
                          .split(",")]
    args.dk = args.dk or (16 if dry else 128)
    args.chunk = args.chunk or (16 if dry else 64)
    args.bench_heads = [int(x) for x in str(args.heads).split(",") if x]
    args.heads = args.bench_heads[0]
    args.bench_head_tokens = [int(x) for x in str(args.head_tokens or (256 if dry else 2**20)).split(",") if x]
    args.head_tokens = args.bench_head_tokens[0]
    if args.resume:
        args.append = True
    if args.ours_backend != "triton" and dry:
        raise SystemExit(f"--ours-backend {args.ours_backend} needs the GPU (not --dry-run)")
    args.torch_head_tokens = args.torch_head_tokens or (128 if dry else 2**16)
    args.native_head_tokens = args.native_head_tokens or args.torch_head_tokens
    args.native_lengths = ([int(x) for x in args.native_lengths.split(",") if x] if args.native_lengths is not None
                           else list(args.bench_lengths))
    args.dtype = args.dtype or ("float32" if dry else "bfloat16")
    args.g_dtype = args.g_dtype or args.dtype
    args.members = [m for m in args.members.split(",") if m]
    args.bench_members = [m for m in args.bench_members.split(",") if m]
    args.parts = [p for p in args.parts.split(",") if p]
    for m in args.members + args.bench_members:
        if m not in MEMBERS:
            raise SystemExit(f"unknown member {m!r}; expected one of {sorted(MEMBERS)}")
    for p in args.parts:
        if p not in ("correct", "bench"):
            raise SystemExit(f"unknown part {p!r}")
    w, r = (float(x) for x in args.fla_tune_bench_ms.split(","))
    args.fla_tune_bench_ms = (w, r)
    known = DRY_BENCH_IMPLS if dry else BENCH_IMPLS
    if args.impls != "auto":
        asked = [i for i in args.impls.split(",") if i]
        bad = [i for i in asked if i not in known]
        if bad:
            raise SystemExit(f"unknown impl(s) {bad} for {'--dry-run' if dry else 'the GPU'}; expected from {known}"
                             + (" (fla cannot run in the dry run: 'torch' stands in for it)" if dry else ""))
        if "ours" not in asked:
            raise SystemExit("--impls must include ours: every other impl is checked against it")
    return args

def main(argv=None) -> dict:
    args = parse_args(argv)
    setup_env(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("fla_compare needs the GPU (use --dry-run on the CPU)")
    impls = ("ours", "torch") if args.dry_run else ("ours", "fla")
    from lethe.kernels.gdn.native import cute_dsl_available

    cute = cute_dsl_available()
    bench_impls = resolve_impls(args.impls, args.dry_run, torch.cuda.is_available(), cute)
    if args.ours_backend == "hybrid-tc" and not cute:
        raise SystemExit("--ours-backend hybrid-tc needs the CuTe DSL (lethe.kernels.gdn.native.cute_dsl_available())")
    if "native" in bench_impls:
        from lethe.kernels.gdn.native.backend import register

        register()  # chunk_family(backend="native") dispatches through NATIVE_BACKENDS["default"]
    run = Run(args=args, out=out, device=device, dtype=getattr(torch, args.dtype), g_dtype=getattr(torch, args.g_dtype),
              K=args.dk, C=args.chunk, impls=impls, bench_impls=bench_impls)
    rows_path = out / "rows.jsonl"
    earlier = [json.loads(x) for x in rows_path.read_text().splitlines() if x.strip()] if rows_path.exists() else []
    if earlier and not args.append:
        raise SystemExit(f"{rows_path} already holds {len(earlier)} rows: pass --append to add this run to them, "
                         "or give a new --out")
    run.rows.extend(earlier)  # the summary and its caveats then describe every run in the file
    prev_prov = None
    if earlier and (out / "provenance.json").exists():
        prev_prov = json.loads((out / "provenance.json").read_text())
    rows_path.touch()
    meta = run_meta(args, impls, bench_impls, device, cute)
    if not args.dry_run:
        meta.update(start_fla(run, FLA_WHEEL))
    run.meta = meta
    from lethe import provenance

    prov = dict(experiment="gdn_fla_compare", dry_run=args.dry_run, budget_s=args.budget_s, fla=meta.get("fla"))
    if prev_prov is not None:  # the earlier runs' machine, versions and commit stay on record
        prov["previous_runs"] = prev_prov.pop("previous_runs", []) + [prev_prov]
    provenance.write(out / "provenance.json", **prov)
    run.emit({"kind": "meta", **meta, "args": vars(args)})
    log(f"device {device}, impls {impls}, bench impls {bench_impls}, budget {args.budget_s:.0f} s, fla {meta.get('fla')}, "
        f"triton cache {meta['triton_cache_dir']}")
    native_apart = "native" in bench_impls and not native_in_main(args)
    tasks = plan(args.members, args.bench_members, args.dvs, args.lengths, args.bench_lengths, args.parts,
                 torch_bench=not args.no_torch_bench and args.bench_cells != "native",
                 native_lengths=args.native_lengths if native_apart and args.bench_cells != "main" else (),
                 main_cells=args.bench_cells != "native", heads=args.bench_heads, head_tokens=args.bench_head_tokens,
                 shape=lambda t: cell_shape(args, t))
    if args.resume:
        tasks, done = resume_tasks(run, tasks, earlier)
        run.emit({"kind": "resume", "left_out": done})
        log(f"resume: {len(done)} cells already in {out} left out")
    complete = run_plan(run, tasks)
    doc = summarize(run, complete=complete)
    provenance.write(out / "provenance.json", **prov, seconds=doc["seconds"], complete=complete,
                     fla_autotune=doc["autotune"]["policy"])
    print_summary(doc)
    return doc


if __name__ == "__main__":
    main()
