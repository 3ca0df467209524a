"""First look at the lent GPU: environment facts, then one verifier run per candidate kind on CUDA.

    python3 experiments/smoke/gpu_smoke.py --out $OUT/smoke
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default="pc_softmax,pc_softmax_triton")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from lethe import provenance
    from lethe.verifier.api import verdict, verify_files

    facts = provenance.collect(command=" ".join(sys.argv))
    try:
        facts["nvcc"] = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip()[-80:]
    except OSError as exc:
        facts["nvcc"] = str(exc)
    print(json.dumps(facts, indent=1), flush=True)
    results = []
    for case in args.cases.split(","):
        base = ROOT / "data" / ("positive_control" if case.startswith("pc_") else "red_team") / case
        t0 = time.perf_counter()
        row = verify_files(base / "ref.py", base / "cand.py", device="cuda", seed=1)
        wall = time.perf_counter() - t0
        gates = {g: v["status"] for g, v in row.get("gates", {}).items()}
        print(f"{case}: {row['status']} verdict={verdict(row)} seconds={row['seconds']} wall={wall:.1f} "
              f"err={row['error'][:400]} gates={gates}", flush=True)
        results.append({"case": case, "status": row["status"], "verdict": verdict(row), "seconds": row["seconds"],
                        "gates": gates, "error": row["error"][:2000]})
    (out / "smoke.json").write_text(json.dumps({"facts": facts, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
