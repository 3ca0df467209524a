"""Snakemake script: draw the figures of the paper's released records (lethe.render.figures)."""

import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821, SIM115

from lethe.render.figures import render_all  # noqa: E402

drawn = render_all(snakemake.params.published, snakemake.params.outdir, tuple(snakemake.params.stems))  # noqa: F821
missing = sorted(set(snakemake.params.stems) - set(drawn))  # noqa: F821
if missing:
    raise SystemExit(f"figures not drawn (inputs missing): {missing}")
print(f"drew {drawn}", file=sys.stderr)
