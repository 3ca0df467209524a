"""Render rule script: the backward kernel-profile table from committed results/native/profile/<call>/."""

from pathlib import Path

from lethe.kernels.gdn.native.render import load_profile_calls, profile_table

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

md, tex = profile_table(load_profile_calls(snakemake.input.profiles))
Path(snakemake.output.md).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.output.md).write_text(md)
Path(snakemake.output.tex).write_text(tex)
