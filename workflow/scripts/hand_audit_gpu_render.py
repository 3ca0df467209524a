"""Render the hand-audit summary of the GPU corpora's disputed cells (labels merged with the current selection)."""

import json
from pathlib import Path

from lethe.hand_audit import labels, render

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

sel = json.loads(Path(snakemake.input.selection).read_text())
fresh = [r for c in sorted(sel["corpora"]) for r in labels.from_selection(sel["corpora"][c], c)]
# A kernel selected since the label file was last merged counts as unlabelled until someone labels it.
rows = labels.merge(labels.read(snakemake.input.labels), fresh)
render.render_summary(
    snakemake.input.labels, snakemake.output.md, snakemake.output.tex,
    caption=("Hand-audit of the GPU disputed cells (KernelBench's own check at 48642c5c accepts, the battery "
             f"rejects under the {sel['profile']} profile) on the H200 corpora {', '.join(sorted(sel['corpora']))}: "
             "per corpus and stratum (first failing channel, tolerance-free channels first), the cell, the "
             "kernels audited and their verdicts, as recorded in data/hand_audit/gpu_disputed.csv."),
    label="tab:hand-audit-gpu", bucket_sizes=sel["bucket_sizes"], rows=rows, key=render.corpus_stratum_key,
    columns=render.GPU_COLUMNS,
    notes=["defect: the kernel gets something wrong that no accepted semantics allows; convention: it implements "
           "a recognised different semantics exactly (NaN-ignoring max, flush-to-zero, TF32), which the contract "
           "forbids; false alarm: the kernel is correct and the battery is wrong. A kernel with several failing "
           "gates takes the most severe verdict. The mixed corpus copies some leaderboard kernels, so a kernel can "
           "be counted in both corpora's rows.",
           f"Cells smaller than {sel['target']} kernels are audited whole; larger ones are sampled by stratum and "
           "operator class (seeded)."],
)
