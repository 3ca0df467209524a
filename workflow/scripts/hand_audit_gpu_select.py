"""Select the hand-audit sample of the GPU corpora's disputed cells and merge it into their label file.

Writes the selection (cell sizes per stratum, the selected kernels with their failing channels under every
profile) and the label file the auditor works on next: every verdict already in data/hand_audit/gpu_disputed.csv
kept, each newly selected kernel appended unlabelled. Copy that file over the data one to label the new rows."""

import json
from pathlib import Path

from lethe.corpora.classify import classify
from lethe.hand_audit import labels, sample
from lethe.verifier.records import read_rows

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

corpora = list(snakemake.params.corpora)
# Operator class per KernelBench problem: the leaderboard manifest's, else the label file's, else the classifier
# on the problem file.
classes = {}
for line in Path(snakemake.input.manifest).read_text().splitlines():
    m = json.loads(line)
    classes[(int(m["level"]), int(m["problem"]))] = m["op_class"]
labelled = labels.read(snakemake.input.labels)
# Problems already labelled keep the class they were labelled under, so a checkout without KernelBench (a fresh
# clone rendering the committed results) needs the problem files only for problems new to the label file.
for r in labelled:
    lp = sample.problem_of(r["id"])
    if lp is not None and r["op_class"]:
        classes.setdefault(lp, r["op_class"])
kb = Path(snakemake.params.kb_root) / "KernelBench"
cells = {}
for c, cell, rows in zip(corpora, snakemake.input.cells, snakemake.input.rows, strict=True):
    ids = json.loads(Path(cell).read_text())["paper"]["money_cell"]["ids"]
    for lp in {sample.problem_of(i) for i in ids} - set(classes) - {None}:
        ref = sorted(kb.glob(f"level{lp[0]}/{lp[1]}_*.py"))
        if not ref:  # an unclassed kernel would land in another stratum: refuse rather than guess
            raise FileNotFoundError(f"no KernelBench problem level{lp[0]}/{lp[1]}_*.py under {kb}")
        classes[lp] = classify(ref[0].read_text(encoding="utf-8"))
    cells[c] = (ids, sample.with_op_class(read_rows(rows), classes))
sel = sample.select_cells(cells, profile=snakemake.params.profile, seed=int(snakemake.params.seed),
                          target=int(snakemake.params.target))
fresh = [r for c in corpora for r in labels.from_selection(sel["corpora"][c], c)]
merged = labels.merge(labelled, fresh)
Path(snakemake.output.selection).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.output.selection).write_text(json.dumps(sel, indent=1, sort_keys=True) + "\n")
Path(snakemake.output.labels).write_text(labels.dumps(merged))
