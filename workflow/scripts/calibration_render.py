"""Render the calibration table and figure from the committed sweep, and the published calibration table."""

from pathlib import Path

from lethe.calibration import render

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

if "published" in snakemake.input.keys():
    render.render_published(snakemake.input.published, snakemake.output.md, snakemake.output.tex)
else:
    render.render_table_files(snakemake.input.sweep, snakemake.output.md, snakemake.output.tex)
    render.render_figure(snakemake.input.sweep, Path(snakemake.output.png).parent, Path(snakemake.output.png).stem)
