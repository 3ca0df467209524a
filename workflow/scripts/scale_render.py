"""Snakemake script: paper/tables/scale_run.{md,tex} and figures/scale_curve.{png,pdf} from a committed run."""

from pathlib import Path

from lethe.scale.report import render

smk = snakemake  # noqa: F821 - injected by Snakemake
render(Path(smk.input.log).parent, smk.output.md, smk.output.tex, Path(smk.output.png).parent)
