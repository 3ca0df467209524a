"""Render rule script: native K1 tables from committed results/native/{bench,aot}.json (byte-deterministic)."""

import json
from pathlib import Path

from lethe.kernels.gdn.native.render import aot_table, bench_table

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

kind = snakemake.params.kind
if kind == "bench":
    md, tex = bench_table(json.loads(Path(snakemake.input.result).read_text()))
else:  # every AOT report's rows in one table
    rows = [r for p in snakemake.input.results for r in json.loads(Path(p).read_text())["rows"]]
    md, tex = aot_table({"rows": rows})
Path(snakemake.output.md).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.output.md).write_text(md)
Path(snakemake.output.tex).write_text(tex)
