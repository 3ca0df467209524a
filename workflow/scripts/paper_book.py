"""Snakemake script: render the results book paper/book.md (lethe.render.book)."""

import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821, SIM115

import csv  # noqa: E402

from lethe.render.book import render_book  # noqa: E402

with open(snakemake.input.claims, encoding="utf-8", newline="") as fh:  # noqa: F821
    ledger = list(csv.DictReader(fh))
render_book(snakemake.params.root, snakemake.params.rendered, ledger, snakemake.output.book)  # noqa: F821
print(f"book written with {len(snakemake.params.rendered)} rendered targets", file=sys.stderr)  # noqa: F821
