"""Agreement rule: KernelBench's own check (local checkout) vs our re-implementation on the same kernels.

Exits non-zero with a clear message when no checkout is configured (or it is unusable). Runs under
Snakemake's ``script:`` directive or from the command line:
``python workflow/scripts/differential_agreement.py --checkout PATH --kernels K.parquet --ours KB.parquet --out A.json``
"""

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from lethe import provenance
from lethe.kernelbench import agreement as ag
from lethe.sandbox import run_isolated


def main(checkout, kernels_path, ours_path, out_path, timeout_s=180.0):
    try:
        ag.locate_eval(checkout)
        ag.require_cuda()
    except ag.AgreementSetupError as e:
        print(f"differential_agreement: {e}", file=sys.stderr)
        return 2
    kernels = pd.read_parquet(kernels_path)
    ours = pd.read_parquet(ours_path)
    ours = ours[ours["variant"] == "paper"].to_dict("records")
    theirs = []
    for k in kernels.to_dict("records"):
        payload = {"checkout": checkout, "ref_src": k["ref_src"], "cand_src": k["cand_src"], "device": "cuda"}
        res = run_isolated("lethe.kernelbench.agreement:sandbox_entry", payload, None, timeout_s=timeout_s,
                           device="cuda")
        row = res.result if res.status == "ok" else {"correct": None, "outcome": f"sandbox_{res.status}"}
        theirs.append({"id": str(k["id"]), **row})
    result = ag.agreement(theirs, ours)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    provenance.write(Path(out_path).with_name("agreement_provenance.json"), kernelbench_checkout=str(checkout))
    return 0


if "snakemake" in globals():
    sm = globals()["snakemake"]
    sys.exit(main(sm.params.checkout, sm.input.kernels, sm.input.ours, sm.output.agreement))
elif __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--checkout", default="")
    p.add_argument("--kernels")
    p.add_argument("--ours")
    p.add_argument("--out")
    a = p.parse_args()
    sys.exit(main(a.checkout, a.kernels, a.ours, a.out))
