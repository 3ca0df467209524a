"""Snakemake script: render paper/tables/repro.{md,tex} from the committed repro measurement."""

from lethe.repro.tables import render

smk = snakemake  # noqa: F821 - injected by Snakemake
render(smk.input.summary, smk.output.md, smk.output.tex)
