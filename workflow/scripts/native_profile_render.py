"""Render rule script: the backward kernel-profile table from committed results/native/profile/<call>/."""

import json
from pathlib import Path

from kernels.gdn.native.render import profile_table

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

docs = list(snakemake.input.profiles)
calls = []
for p in docs:
    folder = Path(p).parent
    calls.append((folder.name, json.loads(Path(p).read_text()), json.loads((folder / "provenance.json").read_text())))
md, tex = profile_table(calls)
Path(snakemake.output.md).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.output.md).write_text(md)
Path(snakemake.output.tex).write_text(tex)
