"""Render rule script: the verifier calibration table from the committed verdict rows."""

from pathlib import Path

from lethe.verifier import records, report

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

table = report.calibration_table(records.read_rows(snakemake.input.rows))
Path(snakemake.output.md).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.output.md).write_text(report.render_markdown(table))
Path(snakemake.output.tex).write_text(report.render_latex(table))
