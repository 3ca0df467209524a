"""Snakemake script: draw the figures of the paper's released records (lethe.render.figures)."""

import os
import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821, SIM115

from lethe.render.figures import render_all  # noqa: E402

stems = tuple(snakemake.params.stems)  # noqa: F821
published = os.path.dirname(snakemake.input[0])  # noqa: F821
outdir = os.path.dirname(snakemake.output[0])  # noqa: F821
drawn = render_all(published, outdir, stems)
missing = sorted(set(stems) - set(drawn))
if missing:
    raise SystemExit(f"figures not drawn (inputs missing): {missing}")
print(f"drew {drawn}", file=sys.stderr)
