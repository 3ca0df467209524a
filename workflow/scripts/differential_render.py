"""Render the differential tables: the published ones, or one corpus's from its differential.json."""

from pathlib import Path

from lethe.kernelbench import tables

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

out_dir = Path(snakemake.output.md).parent
if "crossval" in snakemake.input.keys():
    tables.render_published_differential(snakemake.input.crossval, out_dir)
    tables.render_published_agreement(snakemake.input.agreement, out_dir)
else:
    tables.render_computed_differential(snakemake.input.differential, snakemake.wildcards.corpus, out_dir)
