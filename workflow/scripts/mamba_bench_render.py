"""Render rule script of the mamba stage: the benchmark table (kind "bench") or the positive-control table
(kind "positive_control") from the committed files named in the rule's inputs."""

import json
from pathlib import Path

from lethe.kernels.mamba.render import bench_table, positive_control_table
from lethe.results import load_runs

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive
inp, out = snakemake.input, snakemake.output
if snakemake.params.kind == "bench":
    runs = load_runs(inp.result) if "result" in inp.keys() else None
    bench_table(runs, Path(inp.published_c1).parent, Path(out.md), Path(out.tex))
else:
    results = {label: json.loads(Path(p).read_text()) for label, p in zip(snakemake.params.labels, inp.results)}
    positive_control_table(results, json.loads(Path(inp.published).read_text()), Path(out.md), Path(out.tex))
