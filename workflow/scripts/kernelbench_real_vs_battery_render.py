"""Render KernelBench's own check vs the battery on one corpus (lethe.kernelbench.tables.render_real_vs_battery)."""

from pathlib import Path

from lethe.kernelbench import tables

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

tables.render_real_vs_battery(snakemake.input.differential, snakemake.wildcards.corpus,
                              Path(snakemake.output.md).parent)
