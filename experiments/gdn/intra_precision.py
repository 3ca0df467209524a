"""What the Triton backward's intra-chunk kernel gains and costs at each dot precision (H200).

``intra_bwd_kernel`` runs its products in single-pass TF32 (triton_bwd.INTRA_PRECISION: 3xTF32 does not fit its
shared memory at 8 warps). fla_compare part (a) found our one cell above the 5e-3 pin there -- sgdn, d_v 128,
T 4096, dbeta 5.97e-3 -- while the same cell through the float32 torch path is within 4e-7 of float64 and the
bf16 rounding of the result alone is in results/gdn/broadcast_sum_replay.json (CPU replay, docs/gdn.md §8). Variants of the kernel's launch entry
("default" plus ``--variant NAME=intra_bwd_kernel:KEY=VAL[,...]``, e.g. PREC=tf32rn, or PREC=tf32x3,num_warps=4)
are compared per cell:

1. correctness first: o and every input gradient of ``chunk_family(backend="triton")`` against the float64
   oracle (recurrent loop, fla_compare's inputs and metric), each variant run twice and required to repeat bit
   for bit;
2. then the backward's time: CUDA events around ``torch.autograd.grad`` (the forward outside the timed region),
   ``--warmup`` launches first, the median over ``--reps`` launches on each of ``--sets`` input sets.

    python experiments/gdn/intra_precision.py --out results/gdn/intra_precision \\
        --cells sgdn:128:4096,gdn:128:4096 --variant rn=intra_bwd_kernel:PREC=tf32rn
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from lethe.kernels.gdn.bench import oracle_fn, ours_fn, parse_cells, rounded_inputs
from lethe.kernels.gdn.inputs import rel_err

from lethe.perf.timing import time_ms

ROOT = Path(__file__).resolve().parents[2]

SCHEMA = "lethe.gdn.intra_precision/1"
PIN = 5e-3  # the ladder's end-to-end pin


def parse_variant(text: str) -> tuple[str, dict]:
    from lethe.kernels.gdn.launch_tables import overrides_from_cli

    name, sep, spec = text.partition("=")
    if not sep or not name or name == "default":
        raise SystemExit(f"--variant {text!r}: expected NAME=intra_bwd_kernel:KEY=VAL[,KEY=VAL] (NAME not 'default')")
    return name, overrides_from_cli([spec], option="--variant")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "results" / "gdn" / "intra_precision"))
    ap.add_argument("--cells", default="sgdn:128:4096,gdn:128:4096,kda:64:1024")
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--dk", type=int, default=128)
    ap.add_argument("--seed", type=int, default=20260829)
    ap.add_argument("--sets", type=int, default=2, help="input sets timed (seed, seed+1, ...)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--budget-s", type=float, default=0.0, help="stop starting cells after this (0: no limit)")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="run the script's logic on the CPU (Triton interpreter, wall-clock timing): for tests only")
    args = ap.parse_args(argv)
    if not args.cpu_smoke and not torch.cuda.is_available():
        raise SystemExit("intra_precision.py times CUDA kernels: it needs a CUDA GPU")
    from lethe.kernels.gdn.fwd_options import DOT_PRECISION_DEFAULT
    from lethe.kernels.gdn.launch_tables import overridden
    from lethe.kernels.gdn.triton_bwd import intra_precision

    from lethe import provenance

    cells = parse_cells(args.cells)
    variants = [("default", {})] + [parse_variant(v) for v in args.variant]
    # bf16 is not trustworthy under the interpreter (pitfalls.md): the smoke run is float32
    dev, dt = ("cpu", torch.float32) if args.cpu_smoke else ("cuda", torch.bfloat16)
    K, H = args.dk, args.heads
    sync = (lambda: None) if args.cpu_smoke else torch.cuda.synchronize
    scale = K ** -0.5
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    rows_path.write_text("")
    t_start, rows = time.time(), []

    def emit(row):
        rows.append(row)
        with rows_path.open("a") as fh:  # one line per measurement: a killed run keeps what it measured
            fh.write(json.dumps(row, sort_keys=True) + "\n")
        print(json.dumps(row, sort_keys=True), flush=True)

    for member, V, T in cells:
        if args.budget_s and time.time() - t_start > args.budget_s:
            emit({"schema": SCHEMA, "kind": "skip", "member": member, "V": V, "T": T, "reason": "budget"})
            continue
        low, do = rounded_inputs(member, 1, T, H, K, V, args.seed, dt, dev)
        leaves64 = {n: t.double().requires_grad_() for n, t in low.items()}
        ref = oracle_fn(member)(leaves64, scale)
        grads = torch.autograd.grad(ref, list(leaves64.values()), do.double())
        ref_t = {"o": ref.detach(), **{"d" + n: g for n, g in zip(leaves64, grads, strict=True)}}
        del leaves64, ref, grads
        fn = ours_fn(member, "triton", 64)
        for vname, launch in variants:
            with overridden(launch) as entries:
                results = []
                for _ in range(2):
                    lv = {n: t.clone().requires_grad_() for n, t in low.items()}
                    o = fn(lv, scale)
                    g = torch.autograd.grad(o, list(lv.values()), do)
                    results.append({"o": o.detach(), **{"d" + n: x for n, x in zip(lv, g, strict=True)}})
                sync()
                bitwise = all(torch.equal(results[0][n], results[1][n]) for n in results[0])
                errs = {n: rel_err(results[0][n], ref_t[n]) for n in ref_t}
                worst = max(errs, key=errs.get)
                del results
                times = []
                for s in range(args.sets):
                    lo, d = rounded_inputs(member, 1, T, H, K, V, args.seed + s, dt, dev) if s else (low, do)
                    lv = {n: t.clone().requires_grad_() for n, t in lo.items()}
                    # the backward alone: the forward is the untimed setup of each iteration
                    ms = time_ms(lambda i, o, lv=lv, d=d: torch.autograd.grad(o, list(lv.values()), d), args.reps,
                                 cuda=not args.cpu_smoke, warmup=args.warmup, setup=lambda i, lv=lv, fn=fn: fn(lv, scale))
                    times.append(statistics.median(ms))
                emit({"schema": SCHEMA, "kind": "cell", "member": member, "V": V, "T": T, "B": 1, "H": H, "K": K,
                      "dtype": str(dt).replace("torch.", ""), "variant": vname, "launch_overrides": launch,
                      "intra_entry": entries.get("intra_bwd_kernel") or _default_entry(),
                      # what the kernel's products ran at: the Triton path's dot_precision for bf16 is the default
                      "intra_precision": intra_precision(DOT_PRECISION_DEFAULT),
                      "errors": errs, "worst_rel_err": errs[worst], "worst_tensor": worst,
                      "within_pin": errs[worst] <= PIN, "pin": PIN, "bitwise_repeat": bitwise,
                      "bwd_ms_median_per_set": times, "bwd_ms": statistics.median(times),
                      "warmup": args.warmup, "reps": args.reps})
    summary = {"schema": SCHEMA, "mode": "cpu-smoke" if args.cpu_smoke else "gpu", "args": vars(args), "variants": dict(variants),
               "seconds": round(time.time() - t_start, 1), "n_cells": sum(r["kind"] == "cell" for r in rows),
               "skipped": [r for r in rows if r["kind"] == "skip"]}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    provenance.write(out / "provenance.json", experiment="gdn_intra_precision")
    return summary, rows


def _default_entry() -> dict:
    from lethe.kernels.gdn.triton_bwd import BWD_LAUNCH

    return dict(BWD_LAUNCH["intra_bwd_kernel"])


if __name__ == "__main__":
    main()
