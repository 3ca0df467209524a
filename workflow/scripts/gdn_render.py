"""Render rule script: the GDN ladder / family-training tables from the committed results/gdn/*.json."""

import json
from pathlib import Path

from kernels.gdn import tables

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

out = snakemake.output
if snakemake.params.table == "ladder":
    ladder = json.loads(Path(snakemake.input.ladder).read_text())
    fla = json.loads(Path(snakemake.input.fla[0]).read_text()) if snakemake.input.fla else None
    tables.render_ladder(ladder, fla, out.md, out.tex)
else:
    tables.render_training(json.loads(Path(snakemake.input.train).read_text()), out.md, out.tex)
