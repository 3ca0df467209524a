"""The GDN verification ladder: correctness first, one rung at a time, into results/gdn/ladder.json (the rungs and
the summary: lethe.kernels.gdn.ladder).

Rungs (each reports the worst relative error per tensor, err = max|x - ref| / max|ref|):

1. tile spec-pins   -- a kernel's tile math against float64 of the *same* tile: the triangular inverse T of
                       the WY kernel against a float64 solve of the float32 tile, plus structural exactness
                       (strict upper triangle exactly 0, diagonal exactly 1, the stored first-chunk state a
                       bit-exact copy of the initial state).
2. per stage        -- every Triton intermediate (T, W, S_n, delta, o; dS_n, d delta; all gradients) against
                       the float64 PyTorch chunked reference fed the same rounded inputs.
3. end to end       -- bf16 / fp16 inputs, d_k = 128, chunk 64, d_v in {64, 128}, several lengths: output,
                       final state and every gradient of ``chunk_family(..., backend="triton")`` against the
                       float64 oracle (the recurrent loop, autograd), with the paper's 5e-3 pin.
4. vs fla           -- against fla's chunk ops where fla is importable (optional; recorded as skipped if not).

The oracle receives the low-precision inputs upcast to float64, so the errors measure the kernels, not the
input quantisation. ``--cpu-smoke`` runs every rung at tiny float32 sizes on the Triton interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from lethe.kernels.gdn import ladder as L
from lethe.kernels.gdn.fwd_options import (
    DOT_PRECISION_DEFAULT,
    DOT_PRECISIONS,
    OUTPUT_PRECISION_DEFAULT,
    OUTPUT_PRECISIONS,
    WY_INVERSE_DEFAULT,
    WY_INVERSES,
    resolve_output_precision,
)
from lethe.kernels.gdn.inputs import PIN_E2E

ROOT = Path(__file__).resolve().parents[2]


def _write(out: Path, name: str, payload: dict, **prov) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    from lethe import provenance

    provenance.write(out / name.replace(".json", ".provenance.json"), **prov)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny float32 sizes on the Triton interpreter")
    ap.add_argument("--out", default=str(ROOT / "results" / "gdn"))
    ap.add_argument("--lengths", default="256,1024,4096")
    ap.add_argument("--seed", type=int, default=20260829)
    ap.add_argument("--fla", choices=("skip", "only"), default="skip",
                    help="'only': run just the fla rung into ladder_fla.json (fla autotuning can take minutes)")
    ap.add_argument("--fla-budget-s", type=float, default=240.0)
    ap.add_argument("--members", default="la,gla,ssd,kda,sgdn,gdn",
                    help="members of the end-to-end rung (sgdn: kda with a per-head g, the scalar-gate kernels)")
    ap.add_argument("--backend", choices=("triton", "native", "hybrid", "hybrid-tc"), default="triton",
                    help="backend of the end-to-end rung; the others than 'triton' (CuTe DSL kernels, CUDA only) "
                         "run that rung alone, with a bitwise repeat check, into ladder_<backend>.json (the tile "
                         "and stage rungs pin Triton intermediates)")
    ap.add_argument("--repeats", type=int, default=None, help="runs per end-to-end arm compared bit for bit "
                    "(default 1 for triton, 3 for native)")
    ap.add_argument("--dtypes", default="bfloat16,float16", help="input dtypes of the stage and end-to-end rungs (GPU)")
    ap.add_argument("--dot-precision", choices=DOT_PRECISIONS, default=DOT_PRECISION_DEFAULT,
                    help="tl.dot input precision of the Triton forward (and the Triton backward's scan)")
    ap.add_argument("--wy-inverse", choices=WY_INVERSES, default=WY_INVERSE_DEFAULT,
                    help="the Triton forward's triangular inverse (kernels/gdn/fwd_options.py)")
    ap.add_argument("--output-precision", choices=[p for p in OUTPUT_PRECISIONS if p], default=OUTPUT_PRECISION_DEFAULT,
                    help="tl.dot input precision of the forward's output kernel alone; its products feed only o "
                         "(auto: tf32rn for bf16/fp16 inputs under the default --dot-precision, else --dot-precision)")
    ap.add_argument("--launch", action="append", default=[], metavar="KERNEL:KEY=VAL[,KEY=VAL]",
                    help="run with a launch-table entry changed (kernels/gdn/launch_tables.py), e.g. "
                         "state_fwd_kernel:PREC=tf32rn; recorded in the summary (launch_overrides, fwd_launch)")
    ap.add_argument("--name", default=None, help="output file name (default ladder[_<backend>].json)")
    args = ap.parse_args(argv)
    from lethe.kernels.gdn.launch_tables import overridden, overrides_from_cli

    launch = overrides_from_cli(args.launch)
    with overridden(launch):
        return _run(args, launch)


def _run(args, launch: dict):
    """The ladder with the parsed arguments, inside ``launch``'s overrides of the launch tables."""
    fwd_options = {"dot_precision": args.dot_precision, "wy_inverse": args.wy_inverse,
                   "output_precision": args.output_precision}
    if args.backend == "native" and (launch or args.dot_precision != DOT_PRECISION_DEFAULT
                                     or args.output_precision != OUTPUT_PRECISION_DEFAULT
                                     or args.wy_inverse != WY_INVERSE_DEFAULT):
        raise SystemExit(f"--backend native: {L.NATIVE_FORWARD}, so the Triton forward's options and --launch would "
                         "change nothing")
    if args.cpu_smoke and (args.dot_precision != DOT_PRECISION_DEFAULT
                           or args.output_precision != OUTPUT_PRECISION_DEFAULT):
        raise SystemExit("--cpu-smoke runs the interpreter's float32 dots: --dot-precision and --output-precision "
                         "are GPU-only")
    repeats = args.repeats or (1 if args.backend == "triton" else 3)

    if args.cpu_smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        device, K, dvs, C, lengths, dtypes = "cpu", 16, (16, 32), 16, (32, 48), (torch.float32,)
        member_T = 32
    else:
        if not torch.cuda.is_available():
            raise SystemExit("the full ladder needs a CUDA GPU; use --cpu-smoke on the CPU")
        device, K, dvs, C = "cuda", 128, (64, 128), 64
        dtypes = tuple(getattr(torch, d) for d in args.dtypes.split(",") if d)
        lengths = tuple(int(t) for t in args.lengths.split(","))
        member_T = 1024
    # what the output kernel ran at: one word when every dtype resolves alike (the GPU ladder's bf16 + fp16)
    ran = {str(dt).removeprefix("torch."): resolve_output_precision(
        args.output_precision, args.dot_precision, dt in (torch.bfloat16, torch.float16)) for dt in dtypes}
    output_precision_ran = next(iter(ran.values())) if len(set(ran.values())) == 1 else ran
    kernels_ran = L.kernel_precisions_ran(args.dot_precision, dtypes, args.wy_inverse)
    if args.backend != "triton" and args.cpu_smoke:
        raise SystemExit(f"the {args.backend} backend runs CuTe DSL kernels: it needs the GPU (no --cpu-smoke)")
    from lethe.kernels.gdn.reference import MEMBERS

    members = [m for m in args.members.split(",") if m]
    unknown = set(members) - set(MEMBERS) - {"sgdn"}
    if unknown:
        raise SystemExit(f"unknown members {sorted(unknown)} (expected {', '.join((*MEMBERS, 'sgdn'))})")
    out = Path(args.out)
    t_start = time.time()
    if args.fla == "only":
        if args.cpu_smoke:
            raise SystemExit("the fla rung needs the GPU")
        sink = lambda rows: _write(out, "ladder_fla.json", {"rows": rows, "seconds": round(time.time() - t_start, 1)},
                                   experiment="gdn_ladder_fla")
        rows = L.rung_fla(device, K, 128, member_T, torch.bfloat16, args.seed, args.fla_budget_s, sink)
        sink(rows)
        print(json.dumps(rows, indent=1, sort_keys=True))
        return rows
    rows = []
    name = args.name or ("ladder_smoke.json" if args.cpu_smoke else ("ladder.json" if args.backend == "triton"
                                                                     else f"ladder_{args.backend}.json"))

    def flush(complete=False):
        """Summarise and write what has run so far, so a wall-clock cut still leaves a valid partial ladder."""
        summary = L.summarise(rows, cpu_smoke=args.cpu_smoke, backend=args.backend, complete=complete,
                              dot_precision=args.dot_precision, output_precision_ran=output_precision_ran,
                              kernels_ran=kernels_ran, wy_inverse=args.wy_inverse, launch=launch, members=members,
                              repeats=repeats, seconds=round(time.time() - t_start, 1))
        _write(out, name, {"summary": summary, "rows": rows},
               experiment="gdn_ladder" if args.backend == "triton" else f"gdn_ladder_{args.backend}",
               pins={"e2e": PIN_E2E, "tile": L.PIN_TILE})
        return summary

    for V in dvs if args.backend == "triton" else ():
        rows.append(L.guarded(lambda V=V: L.rung_tile(device, K, V, C, 2 * C, args.seed, args.cpu_smoke, fwd_options),
                             "tile", V=V))
        print("tile", V, rows[-1]["worst_rel_err"], rows[-1]["pass"], flush=True)
    for dtype in dtypes if args.backend == "triton" else ():
        for V in dvs:
            rows.append(L.guarded(lambda V=V, dtype=dtype: L.rung_stage(device, K, V, C, lengths[0], dtype, args.seed,
                                                                     fwd_options),
                                 "stage", V=V, dtype=str(dtype)))
            print("stage", dtype, V, rows[-1].get("worst_tensor"), rows[-1]["worst_rel_err"], flush=True)
            flush()
    for dtype in dtypes:
        for V in dvs:
            arms = [("gdn", T) for T in lengths] if "gdn" in members else []
            arms += [(m, member_T) for m in members if m != "gdn"]
            for member, T in arms:
                rows.append(L.guarded(
                    lambda member=member, T=T, V=V, dtype=dtype: L.rung_e2e(device, member, K, V, C, T, dtype,
                                                                          args.seed, backend=args.backend,
                                                                          repeats=repeats, fwd_options=fwd_options),
                    "e2e", member=member, V=V, T=T, dtype=str(dtype).replace("torch.", "")))
                print("e2e", member, dtype, V, T, rows[-1].get("worst_tensor"), rows[-1]["worst_rel_err"],
                      flush=True)
                flush()
    rows.append({"rung": "fla", "status": "skipped",
                 "reason": "cpu smoke" if args.cpu_smoke else "run separately (--fla only -> ladder_fla.json)"})
    summary = flush(complete=True)
    print(json.dumps(summary, indent=1, sort_keys=True))
    return summary


if __name__ == "__main__":
    main()
