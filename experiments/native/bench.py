"""Native K1 and K2 on the H200: correctness first (torch code, float64 oracle, poison, bitwise determinism),
then timing.

Run on the device machine from the repository root (CuTe DSL on PYTHONPATH, see docs/native.md):

    LETHE_GIT_SHA=<sha> python3 experiments/native/bench.py --out $OUT/native [--stages ...] [--budget-s 540]
        [--merge results/native/bench.json]

Stages (``--stages``, comma-separated, default all, run in this order; each guarded: a failure is recorded
under ``<stage>_error`` and the script moves on, so one call returns everything it could measure):

1. ``ceilings``: device-to-device copy bandwidth and an fp32 (non-TF32) matmul rate, measured here;
2. ``correctness`` (K1): on real GDN data (chunked forward of random bf16 inputs, full member with erase, and
   the no-erase case): native K1 vs the torch K1 (``chunked.reverse_state_scan``) on the same float32 ctx, both
   vs the float64 oracle (the chunked path run in float64 on the upcast inputs); outputs poisoned with NaN
   first; three native runs compared bit for bit; the end-to-end native backward (now K1 and K2 native, see
   ``native_backend`` in each row) vs the float64 recurrence's autograd;
3. ``k2_correctness``: native K2 (``api.native_wy_vjp``, sm_90a) vs the torch K2 (``chunked.wy_vjp_torch``) on
   the same real float32 operands, both vs float64 on the same operands and vs the float64 pipeline;
   NaN-poisoned outputs, three runs compared bit for bit, dA zero on and above the diagonal;
4. ``k2_timing``: K2 alone, native vs torch on the same synthetic operands (K2 has no data-dependent control
   flow; operands random, T unit lower triangular), d_k=128, d_v in {64,128}, T in {1k,4k,16k}, B*H as for K1;
   CUDA events, warm-up, median over repetitions rotating between two input sets; floor from counted bytes and
   FLOPs;
5. ``backward_timing``: the whole chunked backward on real data: torch, native K1 only, native K1 + K2 (the
   ``backend="native"`` path); B*H capped so the torch path's [C, C, K] pairwise tensors fit in memory;
6. ``timing`` (K1): native (tile variants) vs Triton K1 (``triton_bwd.state_bwd_kernel``) vs torch K1, on
   synthetic operands, d_k=128, d_v in {64,128}, T in {1k,4k,16k}; the roofline floor.

``--budget-s``: wall-clock budget; a stage or timing row that would start after it is skipped and recorded as
such (the device command limit is 600 s). ``--merge FILE``: start from an earlier bench.json, so keys of stages
not run now are kept (its provenance is embedded under ``merged_from``). ``--dry-run``: on the CPU, with the
native kernels replaced by the torch code and tiny shapes, to exercise the script's plumbing (no numbers).

Writes ``bench.json`` (after every stage and timing row) and ``provenance.json`` under --out, prints progress
lines (``[t=..s] ...``) and a short summary last. The stages, their inputs and checks are
:mod:`lethe.kernels.gdn.native.bench` (tensor-core stages: :mod:`lethe.kernels.gdn.native.bench_wgmma`; their
order and guarded loop: :mod:`lethe.kernels.gdn.native.bench_stages`); this script is the command line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from lethe.kernels.gdn.native.bench import BenchRun
from lethe.kernels.gdn.native.bench_stages import STAGES, run_stages, start_from, summary_lines


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "results/native"))
    ap.add_argument("--quick", action="store_true", help="T in {1k, 4k} only")
    ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of " + ",".join(STAGES))
    ap.add_argument("--budget-s", type=float, default=None, help="skip what would start after this many seconds")
    ap.add_argument("--merge", default=None, help="start from this bench.json (keys of stages not run are kept)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, torch code in place of the native kernels")
    a = ap.parse_args(argv)
    run = BenchRun(budget_s=a.budget_s, device="cpu" if a.dry_run else "cuda")
    stages = [x.strip() for x in a.stages.split(",") if x.strip()]
    unknown = [x for x in stages if x not in STAGES]
    if unknown:
        ap.error(f"unknown stages {unknown}; choose from {STAGES}")
    outdir = run.out_dir = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    out = start_from(a.merge)
    out.update({"device": "cpu (dry run)" if not run.cuda else torch.cuda.get_device_name(),
                "torch": torch.__version__, "stages_run": stages,
                "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32)})
    try:
        import cutlass
        import triton

        out["cutlass_dsl"] = getattr(cutlass, "__version__", "unknown")
        out["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        out["import_error"] = repr(e)
    torch.backends.cuda.matmul.allow_tf32 = False  # every torch reference and timing here is true float32
    run_stages(run, out, stages, a.quick)
    from lethe import provenance

    provenance.write(outdir / "provenance.json", command="python3 experiments/native/bench.py " + " ".join(
        sys.argv[1:] if argv is None else argv), experiment="native-k1-k2", cutlass_dsl=out.get("cutlass_dsl"),
        stages_run=stages)
    print("== summary ==")
    for line in summary_lines(out, stages):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
