"""Render the real-vs-replica agreement of one corpus (2x2 and disagreement classes) from its agreement JSON."""

from pathlib import Path

from lethe.kernelbench import tables

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

tables.render_real_agreement(snakemake.input.agreement, snakemake.wildcards.corpus, Path(snakemake.output.md).parent)
