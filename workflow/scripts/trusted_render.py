"""Snakemake script: render the trusted-corpus false-fail table and failure list from committed results."""

import json
from pathlib import Path

from lethe.trusted.table import load_explanations, render
from lethe.verifier.records import read_rows

smk = snakemake  # noqa: F821 - injected by Snakemake
h200 = read_rows(smk.input.h200[0]) if smk.input.h200 else None
render(read_rows(smk.input.rows), json.loads(Path(smk.input.summary).read_text()),
       load_explanations(smk.input.explanations), smk.output.md, smk.output.tex, smk.output.failures_md,
       smk.output.failures_tex, h200_rows=h200)
