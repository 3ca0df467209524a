"""Render rule script: hybrid-tc / ours / fla per cell (table and figure) from the current kernel-profile result."""

from pathlib import Path

from lethe.kernels.gdn.native.render import versus_fla_figure, versus_fla_table

from lethe.results import load_runs

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

calls = load_runs(snakemake.input.profile)
md, tex = versus_fla_table(calls)
Path(snakemake.output.md).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.output.md).write_text(md)
Path(snakemake.output.tex).write_text(tex)
versus_fla_figure(calls, outdir=Path(snakemake.output.png).parent, stem=Path(snakemake.output.png).stem)
