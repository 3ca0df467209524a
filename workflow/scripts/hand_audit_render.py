"""Render the hand-audit summary of a label file (with the stratum sizes of its disputed cell)."""

import json
from pathlib import Path

from lethe.hand_audit import render

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

meta = json.loads(Path(snakemake.input.buckets).read_text())
render.render_summary(
    snakemake.input.labels, snakemake.output.md, snakemake.output.tex,
    caption=(f"Hand-audit sample of the disputed cell (KernelBench accepts, battery rejects) on {meta['corpus']}: "
             f"{meta['n_selected']} kernels stratified over gate x operator class -- selection and machine "
             "verdicts from the paper authors' release; human verdicts as recorded in "
             "data/hand_audit/published_sample.csv."),
    label="tab:hand-audit-published", bucket_sizes=meta["bucket_sizes"],
    notes=["The release publishes no per-kernel human verdicts, so every row is 'unlabelled' until an auditor "
           "labels it; stratum sizes are the authors' (their disputed cell had "
           f"{meta['money_cell_size']:,} kernels when the sample was drawn)."],
)
