"""Snakemake script: the GPU run's audit table by candidate origin (lethe.audit.gpu_run)."""

from pathlib import Path

from lethe.audit.gpu_run import render_from

smk = snakemake  # noqa: F821 - injected by Snakemake
render_from(Path(smk.input.rows).parent, smk.params.corpus, smk.output.md, smk.output.tex)
