"""Render rule script: the mamba#904 AOT tables from the committed results/aot/mamba904.json."""

import json
from pathlib import Path

from lethe.aot import tables

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

result = json.loads(Path(snakemake.input.result).read_text())
Path(snakemake.output.md).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.output.md).write_text(tables.render_markdown(result))
Path(snakemake.output.tex).write_text(tables.render_latex(result))
