"""Seed study of the family training check: one member, several seeds, the default forward and named variants.

The curve check of ``train_family.py`` compares 20-step window means of two loss curves at a sharp loss transition,
where a shift of a few steps is several percent. This script asks whether a forward-precision change moves that
statistic systematically or only reshuffles it: the same member is trained at each seed with the current launch
tables ("default") and with each variant's overrides, and every (seed, variant) row keeps the window deviation
and the verdict of the unchanged criterion. Deterministic algorithms are on (train_family.main), so each row is
reproducible bit for bit on the same machine and software.

    python experiments/gdn/train_seeds.py --member gdn --seeds 20260829,1,2,3,4,5 \\
        --variant fwd3x=wy_a_kernel:PREC=tf32x3,wy_apply_kernel:PREC=tf32x3,state_fwd_kernel:PREC=tf32x3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAIN_FAMILY = Path(__file__).with_name("train_family.py")


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``name=kernel:KEY=VAL,kernel:KEY=VAL`` -> (name, ["kernel:KEY=VAL", ...]) in train_family's --launch form."""
    name, sep, spec = text.partition("=")
    if not sep or not name or not spec:
        raise SystemExit(f"--variant {text!r}: expected NAME=KERNEL:KEY=VAL[,KERNEL:KEY=VAL...]")
    launches, cur = [], None
    for part in spec.split(","):
        if ":" in part:  # a new kernel entry
            cur = part
            launches.append(cur)
        elif cur is None:
            raise SystemExit(f"--variant {text!r}: {part!r} names no kernel")
        else:  # another KEY=VAL of the same kernel
            launches[-1] += "," + part
    return name, launches


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--member", default="gdn")
    ap.add_argument("--seeds", default="20260829,1,2,3,4,5")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=KERNEL:KEY=VAL[,...]")
    ap.add_argument("--out", default=str(ROOT / "results" / "gdn"))
    ap.add_argument("--name", default="train_seeds.json")
    ap.add_argument("--cpu-smoke", action="store_true")
    ap.add_argument("--fp32-control", action="store_true",
                    help="add the variant 'fast_fp32': the default launch tables with float32 recurrence inputs "
                         "on the fast path (what the kernels add without the bf16 rounding of their inputs)")
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default: train_family's)")
    args = ap.parse_args(argv)
    variants = [("default", [])] + [parse_variant(v) for v in args.variant]
    if args.fp32_control:
        variants.append(("fast_fp32", []))
    seeds = [int(s) for s in args.seeds.split(",")]
    rows, config, t0 = [], None, time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for vname, launches in variants:
                cli = ["--members", args.member, "--seed", str(seed), "--out", tmp, "--name", "run.json"]
                cli += [x for lv in launches for x in ("--launch", lv)]
                cli += ["--fast-dtype", "float32"] if vname == "fast_fp32" else []
                cli += ["--cpu-smoke"] if args.cpu_smoke else []
                cli += ["--steps", str(args.steps)] if args.steps else []
                # each training run is its own process: train_family.py is a program, not a library
                subprocess.run([sys.executable, str(TRAIN_FAMILY), *cli], check=True)
                doc = json.loads((Path(tmp) / "run.json").read_text())
                summary, results = doc["summary"], doc["members"]
                r = results[args.member]
                config = {k: v for k, v in summary["config"].items() if k != "seed"}
                rows.append({
                    "member": args.member, "seed": seed, "variant": vname,
                    "launch_overrides": summary["launch_overrides"], "fast_dtype": summary["config"]["fast_dtype"],
                    "max_window_curve_dev_rel": r["max_window_curve_dev_rel"],
                    "curve_match": r["curve_match"], "pass": r["pass"],
                    "last_window_loss_fast": r["last_window_loss_fast"],
                    "last_window_loss_ref": r["last_window_loss_ref"],
                    "last_window_acc_fast": r["last_window_acc_fast"],
                    "nondeterministic_ops": summary["nondeterministic_ops"],
                })
                print(f"seed {seed} {vname}: window deviation {r['max_window_curve_dev_rel']:.4f} "
                      f"{'pass' if r['pass'] else 'FAIL'}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"summary": {"member": args.member, "seeds": seeds, "variants": dict(variants), "config": config,
                       "mode": "cpu-smoke" if args.cpu_smoke else "gpu", "seconds": round(time.time() - t0, 1)},
           "rows": rows}
    (out / args.name).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    from lethe import provenance

    provenance.write(out / args.name.replace(".json", ".provenance.json"), experiment="gdn_train_seeds")
    return doc


if __name__ == "__main__":
    main()
