"""Render the second-corpus tables and the throughput figure from committed H200 results."""

import sys
from pathlib import Path

from lethe.foreign.render import render

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive
sys.stderr = open(snakemake.log[0], "w", buffering=1)
render(Path(snakemake.input.rows).parent, Path(snakemake.output.gates_md).parent,
       Path(snakemake.output.png).parent, published_sakana=snakemake.input.published_sakana)
