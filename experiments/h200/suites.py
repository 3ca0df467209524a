"""Red team and positive control on the GPU: the battery and KernelBench's loose check for every kernel.

    python3 experiments/h200/suites.py --out $OUT [--suites red_team,positive_control]

Writes <out>/<suite>/{rows.parquet, loose.parquet, summary.json, provenance.json}; the lead copies them to
results/<suite>/h200/.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--suites", default="red_team,positive_control")
    ap.add_argument("--seed", type=int, default=20260829)
    args = ap.parse_args()
    import torch

    from lethe.redteam.run import run_suite

    device = "cuda" if torch.cuda.is_available() else "cpu"
    for suite in args.suites.split(","):
        summary = run_suite(suite, Path(args.out) / suite, device=device, seed=args.seed)
        print(suite, {k: v for k, v in summary.items() if k != "kernels"} if isinstance(summary, dict) else summary,
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
