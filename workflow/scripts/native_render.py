"""Render rule script: native K1 tables from committed results/native/{bench,aot}.json (byte-deterministic)."""

import json
from pathlib import Path

from kernels.gdn.native.render import aot_table, bench_table

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

kind = snakemake.params.kind
result = json.loads(Path(snakemake.input.result).read_text())
md, tex = (bench_table if kind == "bench" else aot_table)(result)
Path(snakemake.output.md).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.output.md).write_text(md)
Path(snakemake.output.tex).write_text(tex)
