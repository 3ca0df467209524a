"""The positive control C1 to C7 through the verifier's battery under every contract profile, on the CPU or a
GPU: C1 to C6 are the Mamba kernels as KernelBench pairs (experiments/mamba/positive_control/cN/: ref.py the op
step by step in torch, cand.py the op's chooser), C7 our GDN backward (the existing pair
data/positive_control/pc_gdn_chunked, not a copy).

    python experiments/mamba/positive_control.py --device cpu|cuda [--profiles strict,cuda-default,fast-math]
        [--kernels C1,...,C7] --json results/mamba/positive_control/<device>.json

One candidate run per kernel, graded under each profile (``lethe.verifier.api.verify_profiles``). On cuda the
candidate runs in the sandbox, which imports the installed ``lethe.kernels``: the driver refuses to run unless
that is this checkout's kernels/ (an editable install made from another checkout would verify someone else's
kernels). On the CPU (Triton on the interpreter) the candidates run in-process with ``lethe.kernels`` pointed at
this checkout first; RES-02 is then na (no compiled artifact). Trusted kernels only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "lethe.mamba.positive_control/1"
# kernel id -> the folder of its KernelBench pair
PAIRS = {**{f"C{i}": ROOT / "experiments" / "mamba" / "positive_control" / f"c{i}" for i in range(1, 7)},
         "C7": ROOT / "data" / "positive_control" / "pc_gdn_chunked"}


def installed_kernels_are_this_checkout() -> bool:
    import lethe.kernels

    return [str(Path(p).resolve()) for p in lethe.kernels.__path__] == [str((ROOT / "kernels").resolve())]


def run(kernels, profiles, device: str, seed: int = 0) -> dict:
    from lethe.verifier import api

    runner = None
    if device == "cpu":
        import lethe.kernels
        from lethe.verifier.testing import inprocess_runner

        lethe.kernels.__path__[:] = [str(ROOT / "kernels")]
        runner = inprocess_runner
    out = {}
    for k in kernels:
        d = PAIRS[k]
        t0 = time.perf_counter()
        rows = api.verify_profiles((d / "ref.py").read_text(), (d / "cand.py").read_text(), profiles=tuple(profiles),
                                   device=device, seed=seed, runner=runner)
        per = {}
        for prof, row in zip(profiles, rows, strict=True):
            gates = {g: {"status": v.get("status"), "reason": v.get("reason", "")} for g, v in row["gates"].items()}
            per[prof] = {"status": row.get("status"), "gates": gates,
                         "failed": sorted(g for g, v in gates.items() if v["status"] == "fail")}
        out[k] = {"pair": str(d.relative_to(ROOT)), "profiles": per, "seconds": round(time.perf_counter() - t0, 1)}
        print(k, {p: v["failed"] or "pass" for p, v in per.items()}, f"{out[k]['seconds']} s", flush=True)
    return {"schema": SCHEMA, "device": device, "profiles": list(profiles), "seed": seed,
            "runner": "in-process" if runner else "sandbox", "kernels": out,
            "all_pass": all(not v["failed"] for k in out.values() for v in k["profiles"].values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--profiles", default="strict,cuda-default,fast-math")
    ap.add_argument("--kernels", default=",".join(PAIRS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: no GPU
    from lethe.verifier.profiles import PROFILES

    profiles = args.profiles.split(",")
    unknown = [p for p in profiles if p not in PROFILES]
    if unknown:
        print(f"unknown profiles {unknown}; the verifier has {sorted(PROFILES)}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not installed_kernels_are_this_checkout():
        print("the installed lethe.kernels is not this checkout's kernels/: pip install -e . here first",
              file=sys.stderr)
        return 2
    doc = run(args.kernels.split(","), profiles, args.device, args.seed)
    from lethe import provenance

    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    provenance.write(out.with_name(f"provenance_{out.stem}.json"), command=" ".join(["python", *sys.argv]),
                     experiment="mamba.positive_control")
    return 0 if doc["all_pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
