"""Snakemake script: render the trusted fix-check table (the kernels a verifier fix should clear, before and
after) from committed results: the CPU column, and the GPU column when its fix check was run."""

import json
from pathlib import Path

from lethe.trusted.table import load_explanations, render_fix_check
from lethe.verifier.records import read_rows

smk = snakemake  # noqa: F821 - injected by Snakemake
cols = [("CPU", read_rows(smk.input.cpu_before), read_rows(smk.input.cpu_after))]
if smk.input.gpu:
    cols.append(("GPU", read_rows(smk.input.gpu[0]), read_rows(smk.input.gpu[1])))
after = json.loads(Path(smk.input.prov_after).read_text())
commits = {"before": json.loads(Path(smk.input.prov_before).read_text()).get("git_sha", "?"),
           "after": after.get("git_sha", "?"), "after_machine": after.get("tree") or after.get("host")}
render_fix_check(cols, load_explanations(smk.input.explanations), commits, smk.output.md, smk.output.tex)
