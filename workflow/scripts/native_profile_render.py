"""Render rule script: the backward kernel-profile table from the current result (config results.native_profile)."""

from pathlib import Path

from lethe.kernels.gdn.native.render import profile_table

from lethe.results import load_runs

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

md, tex = profile_table(load_runs(snakemake.input.profile))
Path(snakemake.output.md).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.output.md).write_text(md)
Path(snakemake.output.tex).write_text(tex)
