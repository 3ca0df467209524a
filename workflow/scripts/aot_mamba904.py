"""Compute rule script: AOT reproduction of mamba#904 (see lethe.aot.mamba904)."""

from lethe.aot.mamba904 import main

snakemake = globals()["snakemake"]
main([
    "run",
    "--out", str(snakemake.output.result),
    "--provenance", str(snakemake.output.provenance),
    "--versions", *snakemake.params.versions,
    "--targets", *snakemake.params.targets,
    "--context-targets-for", *snakemake.params.context_targets_for,
])
