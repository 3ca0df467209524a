"""Render the fla #640 tables from the committed H200 results (the current result named in config results.fla640)."""

import sys
from pathlib import Path

from lethe.foreign.fla640_render import render

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive
sys.stderr = open(snakemake.log[0], "w", buffering=1)
render(Path(snakemake.input[0]), Path(snakemake.output.md).parent)  # input[0]: the current result (fla640.json)
