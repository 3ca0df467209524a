"""Snakemake script: render the trusted fix-check table (the kernels a fixed verifier defect explained, before
and after) from committed results."""

import json
from pathlib import Path

from lethe.trusted.table import load_explanations, render_fix_check
from lethe.verifier.records import read_rows

smk = snakemake  # noqa: F821 - injected by Snakemake
cols = [("CPU", read_rows(smk.input.cpu_before), read_rows(smk.input.cpu_after)),
        ("H200", read_rows(smk.input.h200_before), read_rows(smk.input.h200_after))]
commits = {"before": json.loads(Path(smk.input.prov_before).read_text()).get("git_sha", "?"),
           "after": json.loads(Path(smk.input.prov_after).read_text()).get("git_sha", "?")}
render_fix_check(cols, load_explanations(smk.input.explanations), commits, smk.output.md, smk.output.tex)
