"""H200 benchmark of the Mamba ops C1 to C6 against mamba-ssm (its CUDA selective scan, its Mamba-3 Triton
forward) and the torch paths, correctness first (issue 26).

    python experiments/mamba/bench.py --out results/mamba/bench/runs/<name> [--ops C1,...,C6]
        [--shapes default|records|model] [--dtypes float32,bfloat16] [--max-s 330] [--dry-run]

Every cell (op, shape, dtype) is first checked: every side against ours on the first batch row of the timed
inputs within the sum of both sides' derived error bounds, and ours against the float64 oracle at the records'
small shapes (lethe.kernels.mamba.bench.check). A side that fails is not timed. Timing: lethe.perf.timing (CUDA
events, warm-up, the median over iterations rotating over several input sets). ``--max-s`` stops cleanly before
a cell that would start past the budget and writes what ran with status "partial". ``--dry-run`` runs the
plumbing on the CPU (Triton interpreter, tiny shapes): its times are wall clock and mean nothing. mamba-ssm is
imported normally (its built ``selective_scan_cuda`` and the package on PYTHONPATH); when it is not importable
the rows say so (``official``) and the official sides are absent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

SCHEMA = "lethe.mamba.bench/2"
ROOT = Path(__file__).resolve().parents[2]


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="run folder: bench.json and provenance.json are written there")
    ap.add_argument("--ops", default="C1,C2,C3,C4,C5,C6")
    ap.add_argument("--shapes", default="default", choices=("default", "records", "model"))
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--input-sets", type=int, default=2)
    ap.add_argument("--max-s", type=float, default=330.0)
    ap.add_argument("--published", default=str(ROOT / "data" / "published"))
    ap.add_argument("--slow-sides", default="small", choices=("small", "all", "none"),
                    help="the Python-loop torch paths: checked and timed at the small shapes only (default), "
                         "everywhere, or nowhere; at model shapes one call takes up to seconds")
    ap.add_argument("--skip-timed", default="",
                    help="comma-separated sides checked but not timed at the model shapes (e.g. ones a committed "
                         "run already timed there); each row names them under not_timed")
    ap.add_argument("--dry-run", action="store_true")
    return ap.parse_args(argv)


def time_side(side, sets, iters, warmup, cuda):
    from lethe.perf.timing import summary_ms, time_stages

    if side.slow:
        iters, warmup = max(2, iters // 10), 1
    n = len(sets)
    st = time_stages([lambda i, s: side.run(sets[i % n], s)], iters, cuda=cuda, warmup=warmup,
                     setup=lambda i: side.setup(sets[i % n]))
    return {**summary_ms(st.total), "iterations": iters}


def run_cell(bench, torch, op, shape, model, dtype, args, official, device):
    cuda = device == "cuda"
    sets = [bench.make_inputs(op, shape, dtype, device, seed=s) for s in range(args.input_sets)]
    impls = bench.sides(op, official)
    skipped_slow = [n for n, sd in impls.items() if sd.slow and (args.slow_sides == "none"
                                                                  or (args.slow_sides == "small" and model and not args.dry_run))]
    impls = {n: sd for n, sd in impls.items() if n not in skipped_slow}
    row = {"op": op, "name": bench.OPS[op]["name"], "direction": bench.OPS[op]["direction"], "shape": shape,
           "dtype": str(dtype).removeprefix("torch."), "model_shape": model, "impls": {}, "not_timed": {}}
    for n in skipped_slow:
        row["not_timed"][n] = f"slow side left out at this shape (--slow-sides {args.slow_sides})"
    if op in bench.NO_OFFICIAL:
        row["not_timed"]["official"] = bench.NO_OFFICIAL[op]
    elif bench.OFFICIAL[op] not in impls:
        row["not_timed"][bench.OFFICIAL[op]] = "mamba-ssm not importable (see official)"
    row["check"] = bench.check(op, shape, dtype, sets[0], impls, oracle=args.dry_run or not model)
    nbytes = bench.min_bytes(op, shape, dtype)
    skip_timed = {n for n in args.skip_timed.split(",") if n} if model else set()
    for name, side in impls.items():
        if name in skip_timed:
            row["not_timed"][name] = "checked, not timed at this shape (--skip-timed)"
            continue
        pair = row["check"]["pairs"].get(name)
        if name != "ours_triton" and pair is not None and not pair["pass"]:
            row["not_timed"][name] = "failed the correctness check against ours"
            continue
        t = time_side(side, sets, args.iters, args.warmup, cuda)
        t["effective_GBps"] = round(nbytes / (t["median_ms"] * 1e6), 2)
        row["impls"][name] = t
        if cuda:
            torch.cuda.empty_cache()
    off = bench.OFFICIAL.get(op)
    if off in row["impls"]:
        # > 1: ours is faster than the official side; every launch form of ours, the default one (ours_triton) first
        row["speedups_vs_official"] = {n: round(row["impls"][off]["median_ms"] / t["median_ms"], 4)
                                       for n, t in row["impls"].items() if n.startswith("ours_")}
    if "ours_triton" in row.get("speedups_vs_official", {}):
        row["speedup_vs_official"] = row["speedups_vs_official"]["ours_triton"]
        if model:
            row["goal"] = {"min_speedup": bench.GOALS[row["direction"]],
                           "met": row["speedup_vs_official"] >= bench.GOALS[row["direction"]]}
    row["min_bytes"] = nbytes
    return row


def main(argv=None) -> int:
    args = parse(argv)
    if args.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    import torch

    import lethe.kernels.mamba.bench as bench
    from lethe import provenance

    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --dry-run)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    official = bench.official_status()
    doc = {"schema": SCHEMA, "status": "running", "dry_run": args.dry_run,
           "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)",
           "official": official, "goals": bench.GOALS, "args": {k: v for k, v in vars(args).items()
                                                                if k not in ("out", "published")},
           "rows": [], "not_run": []}
    cells = bench.plan(args.ops.split(","), args.shapes, Path(args.published), args.dry_run)
    t0 = time.perf_counter()

    def write():
        doc["elapsed_s"] = round(time.perf_counter() - t0, 1)
        (out / "bench.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")

    # every dtype of a cell before the next cell, so a budget stop leaves whole shapes measured
    for op, shape, model in cells:
        for dt_name in args.dtypes.split(","):
            dtype = getattr(torch, dt_name)
            if time.perf_counter() - t0 > args.max_s:
                doc["not_run"].append({"op": op, "shape": shape, "dtype": dt_name, "why": "budget (--max-s)"})
                continue
            try:
                row = run_cell(bench, torch, op, shape, model, dtype, args, official, device)
            except torch.cuda.OutOfMemoryError as exc:  # a cell too large for this GPU: said, not fatal
                row = {"op": op, "shape": shape, "dtype": dt_name, "error": f"out of memory: {exc}"[:300]}
                torch.cuda.empty_cache()
            doc["rows"].append(row)
            print(json.dumps({k: row.get(k) for k in ("op", "shape", "dtype", "speedup_vs_official")}
                             | {"pass": row.get("check", {}).get("pass")}), flush=True)
            write()
    doc["status"] = "partial" if doc["not_run"] else "complete"
    doc["all_checks_pass"] = all(r.get("check", {}).get("pass", False) for r in doc["rows"])
    write()
    provenance.write(out / "provenance.json", command=" ".join(["python", *sys.argv]), experiment="mamba.bench")
    return 0 if doc["all_checks_pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
