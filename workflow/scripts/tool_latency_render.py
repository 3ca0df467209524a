"""Snakemake script: the latency table of lethe verify (lethe.audit.latency.render)."""

import json
from pathlib import Path

from lethe.audit.latency import render

smk = snakemake  # noqa: F821 - injected by Snakemake
render(json.loads(Path(smk.input.latency).read_text()), smk.output.md, smk.output.tex)
