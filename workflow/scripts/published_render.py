"""Render the funnel / floor / per-class table of an aggregates.json into Markdown and LaTeX."""

import json
from pathlib import Path

from lethe.audit import tables

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

agg = json.loads(Path(snakemake.input.aggregates).read_text())
p = snakemake.params
Path(snakemake.output.md).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.output.md).write_text(tables.render_markdown(agg, p.title, p.note))
Path(snakemake.output.tex).write_text(tables.render_latex(agg, p.caption, p.label))
