"""Snakemake script: render the published-record tables nobody else owns (lethe.render.published_tables)."""

import os
import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821, SIM115

from lethe.render.published_tables import render_all  # noqa: E402

stems = tuple(snakemake.params.stems)  # noqa: F821
published = os.path.dirname(snakemake.input[0])  # noqa: F821
outdir = os.path.dirname(snakemake.output[0])  # noqa: F821
done = render_all(published, outdir, stems)
missing = sorted(set(stems) - set(done))
if missing:
    raise SystemExit(f"tables not rendered (inputs missing): {missing}")
print(f"rendered {done}", file=sys.stderr)
