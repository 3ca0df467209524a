"""Where the backward's time goes: a kernel-level profile of fla, our Triton backward and the native backend.

The benchmark (experiments/gdn/fla_compare.py) says *how much* slower a backward is; this script says *why*, from
the device's own kernel trace (torch.profiler, CUPTI): for each implementation and cell it records the backward's
wall time (CUDA events, no profiler attached), the number of kernels it launches, the summed kernel time, the
time the GPU sits idle between kernels (host-bound launch gaps), and the time per kernel family (cuBLAS matmuls,
CuTe DSL kernels, Triton kernels, torch elementwise / reduction / copy kernels), plus the heaviest kernels by name.

Correctness comes first: each implementation's gradients are compared with ours (the Triton backward, itself
pinned against float64 by the ladder) before anything is profiled; an implementation off by more than
``--check-rel`` is recorded and not profiled.

Run on the device machine from the repository root (fla wheel unpacked on PYTHONPATH, the CuTe DSL too for
native; see docs/native.md):

    FLA_DISABLE_BACKEND_DISPATCH=1 LETHE_GIT_SHA=<sha> python3 experiments/native/kernel_profile.py --out $OUT/profile

Output: ``profile.json`` (one row per implementation and cell) and ``provenance.json``. The checks, timing,
trace summary and floors are :mod:`lethe.kernels.gdn.native.kernel_profile`; this script is the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from lethe.kernels.gdn.native.kernel_profile import parse_impl, profile_cells, profile_doc

# (named kernel_profile, not profile: run as a script its folder comes first on sys.path, and a module called
# "profile" there would shadow the standard library's, which cProfile and Triton import)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cells", default="gdn:128:4096:8,gdn:128:4096:128",
                    help="member:d_v:T:B[:H] (H=2 unless given, d_k=128, bf16), comma-separated")
    ap.add_argument("--impls", default="ours,fla,native",
                    help="from ours, fla, native, hybrid, hybrid-tc; ours/hybrid/hybrid-tc may name forward options "
                         "after '@' joined by '+' (rows|blocked|split, tf32x3|tf32|ieee), e.g. hybrid-tc@blocked+tf32")
    ap.add_argument("--native-max-head-tokens", type=int, default=65536,
                    help="native's torch forward materialises [B,H,N,C,C,K] float32 tensors: larger cells skip it")
    ap.add_argument("--seed", type=int, default=20260829)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10, help="timed backward passes per input set")
    ap.add_argument("--sets", type=int, default=2, help="input sets (seeds seed, seed+1, ...) rotated while timing")
    ap.add_argument("--profile-reps", type=int, default=3)
    ap.add_argument("--check-rel", type=float, default=0.05)
    ap.add_argument("--budget-s", type=float, default=400)
    args = ap.parse_args(argv)
    for impl in filter(None, args.impls.split(",")):  # a misspelt name stops here, before any device time is spent
        try:
            parse_impl(impl)
        except ValueError as exc:
            ap.error(str(exc))
    os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("profile.py needs a CUDA GPU")
    impls = [i for i in args.impls.split(",") if i]
    if "fla" in impls:
        from lethe.perf.fla_autotune import FlaAutotunePolicy

        policy = FlaAutotunePolicy(bench_ms=(5.0, 20.0), workers=min(16, os.cpu_count() or 1))
        policy.install()  # before fla builds its autotuners: bounded first-call tuning, as in the benchmark
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, start = [], time.time()

    # measured ceilings (the benchmark's own measurement), for the roofline floor of every row
    from lethe.perf.roofline import measure_ceilings

    ceilings = measure_ceilings()

    def save():
        doc = profile_doc(rows, ceilings, torch.cuda.get_device_name(), start)
        (out / "profile.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")

    from lethe import provenance

    provenance.write(out / "provenance.json", command=" ".join(["python3", "experiments/native/kernel_profile.py"]
                                                               + (argv or sys.argv[1:])),
                     experiment="native-profile")
    profile_cells(args.cells.split(","), impls, args, ceilings, rows, start, save)
    save()
    return {"rows": rows}


if __name__ == "__main__":
    main()
