"""CPU experiments behind the hand-audit labels of the GPU disputed cell (data/hand_audit/gpu_disputed.csv).

The checks themselves live in lethe.hand_audit.gpu_checks (torch on the CPU: the arithmetic each CUDA kernel's
source performs beside the contract's, and the battery's PRC-02 on the hand-written trusted kernels); this driver
runs them and writes the document.

    python experiments/hand_audit/gpu_disputed_checks.py [--kb PATH] [--no-battery] [--out FILE]

Writes results/hand_audit/gpu_disputed/checks.json (one entry per check: what was computed and the figures).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lethe.hand_audit import gpu_checks

ROOT = Path(__file__).resolve().parents[2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb", default=str(ROOT.parent / "shared/third_party/kernelbench-48642c5c"))
    ap.add_argument("--out", default=str(ROOT / "results/hand_audit/gpu_disputed/checks.json"))
    ap.add_argument("--no-battery", action="store_true", help="skip the CPU battery runs of the hand kernels")
    a = ap.parse_args(argv)
    res = gpu_checks.run_all(Path(a.kb).resolve(), ROOT / "data/trusted/kernels", battery=not a.no_battery)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1, sort_keys=True, allow_nan=False) + "\n")
    print(json.dumps(res, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
