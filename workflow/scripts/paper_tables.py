"""Snakemake script: render the published-record tables nobody else owns (lethe.render.published_tables)."""

import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821, SIM115

from lethe.render.published_tables import render_all  # noqa: E402

done = render_all(snakemake.params.published, snakemake.params.outdir)  # noqa: F821
print(f"rendered {done}", file=sys.stderr)
