"""Select the stratified hand-audit sample of one corpus's disputed cell (paper-era KernelBench check)."""

import json
from pathlib import Path

import pandas as pd

from lethe import provenance
from lethe.hand_audit import labels, sample
from lethe.kernelbench import differential as diff

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

audit = pd.read_parquet(snakemake.input.rows)
if "profile" in audit.columns:
    audit = audit[audit["profile"] == snakemake.params.profile]
pairs, _ = diff.join(audit.to_dict("records"), pd.read_parquet(snakemake.input.kb_rows).to_dict("records"), "paper")
disputed = [p["row"] for p in pairs if p["ext_pass"] and not p["our_pass"]]
sel = sample.select(disputed, seed=int(snakemake.params.seed), per_stratum=int(snakemake.params.per_stratum))
corpus = snakemake.wildcards.corpus
Path(snakemake.output.labels).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.output.labels).write_text(labels.dumps(labels.from_selection(sel, corpus)))
Path(snakemake.output.selection).write_text(json.dumps(sel, indent=1, sort_keys=True) + "\n")
provenance.write(snakemake.output.provenance, seed=int(snakemake.params.seed))
