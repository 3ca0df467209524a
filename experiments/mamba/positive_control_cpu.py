"""The Mamba kernels C1 to C6 through the verifier's battery on the CPU (Triton on the interpreter), each as a
KernelBench pair in experiments/mamba/positive_control/cN/ (ref.py: the op written step by step in torch;
cand.py: the op's chooser).

    python experiments/mamba/positive_control_cpu.py [--json results/mamba/positive_control_cpu/summary.json]

The candidates run in-process (``lethe.verifier.testing.inprocess_runner``), not in the sandbox: an editable
install made from another checkout maps ``lethe.kernels`` to that checkout, so a sandboxed child would import
someone else's kernels; in-process, the mapping is pointed at this checkout first. Trusted kernels only. RES-02 is
na under the interpreter (no compiled artifact); the ahead-of-time figures are experiments/mamba/triton_aot.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: no GPU here

ROOT = Path(__file__).resolve().parents[2]
for p in (str(ROOT / "src"), str(ROOT)):
    if p not in sys.path:
        sys.path.insert(0, p)

PAIRS = ROOT / "experiments" / "mamba" / "positive_control"
SCHEMA = "lethe.mamba.positive_control_cpu/1"


def run(kernels=("c1", "c2", "c3", "c4", "c5", "c6"), profile: str = "strict", seed: int = 0) -> dict:
    import lethe.kernels

    ours = str(ROOT / "kernels")
    if list(lethe.kernels.__path__) != [ours]:
        lethe.kernels.__path__[:] = [ours]
    from lethe.verifier import api
    from lethe.verifier.testing import inprocess_runner

    api._sandbox = lambda: inprocess_runner
    out = {}
    for k in kernels:
        d = PAIRS / k
        row = api.verify((d / "ref.py").read_text(), (d / "cand.py").read_text(), device="cpu", profile=profile,
                         seed=seed)
        gates = {g: {"status": v.get("status"), "reason": v.get("reason", "")} for g, v in row["gates"].items()}
        out[k.upper()] = {"status": row.get("status"), "gates": gates,
                          "failed": sorted(g for g, v in gates.items() if v["status"] == "fail")}
    return {"schema": SCHEMA, "profile": profile, "seed": seed, "device": "cpu (Triton interpreter)",
            "runner": "in-process", "kernels": out,
            "all_pass": all(not v["failed"] for v in out.values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="strict")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    doc = run(profile=args.profile)
    for k, v in doc["kernels"].items():
        print(k, v["status"], "fails:", v["failed"] or "none")
    if args.json:
        from lethe import provenance

        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")
        provenance.write(out.parent / "provenance.json", command=" ".join(["python", *sys.argv]),
                         experiment="mamba.positive_control_cpu")
    return 0 if doc["all_pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
