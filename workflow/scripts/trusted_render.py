"""Snakemake script: render the trusted-corpus false-fail table and failure list from committed results."""

import json
from pathlib import Path

from lethe.trusted.table import gpu_label, load_explanations, render
from lethe.verifier.records import read_rows

smk = snakemake  # noqa: F821 - injected by Snakemake
gpu = read_rows(smk.input.gpu[0]) if smk.input.gpu else None
label = gpu_label(json.loads(Path(smk.input.gpu_provenance[0]).read_text())) if smk.input.gpu else "GPU"
machine = json.loads(Path(smk.input.gpu_summary[0]).read_text()).get("machine") if smk.input.gpu else None
render(read_rows(smk.input.rows), json.loads(Path(smk.input.summary).read_text()),
       load_explanations(smk.input.explanations), smk.output.md, smk.output.tex, smk.output.failures_md,
       smk.output.failures_tex, gpu_rows=gpu, gpu_label=label, gpu_machine=machine)
