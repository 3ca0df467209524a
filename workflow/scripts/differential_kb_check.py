"""Run KernelBench's check (paper-era and hardened) on every kernel of a corpus, each in a sandboxed child."""

from pathlib import Path

import pandas as pd

from lethe import provenance
from lethe.kernelbench import check as kb

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

device = snakemake.params.device
if device == "auto":
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
kernels = pd.read_parquet(snakemake.input.kernels)
rows = []
for k in kernels.sort_values("id", key=lambda s: s.astype(str)).to_dict("records"):
    for variant in kb.VARIANTS:
        row = kb.check_isolated(k["ref_src"], k["cand_src"], variant=variant, device=device,
                                timeout_s=float(snakemake.params.timeout_s))
        rows.append({"id": str(k["id"]), **row})
Path(snakemake.output.kb_rows).parent.mkdir(parents=True, exist_ok=True)
pd.DataFrame(rows).to_parquet(snakemake.output.kb_rows, index=False)
provenance.write(snakemake.output.provenance, device=device, kernelbench_paper_commit=kb.PAPER_COMMIT,
                 kernelbench_hardened_commit=kb.HARDENED_COMMIT, trial_seeds=kb.trial_seeds())
