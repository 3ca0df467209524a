"""Snakemake script: render the claims ledger paper/claims.csv from paper/claims_spec.yaml."""

import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821, SIM115

from lethe.render.ledger import status_counts, write_ledger  # noqa: E402

rows = write_ledger(snakemake.input.spec, snakemake.params.root, snakemake.output.csv)  # noqa: F821
claims = len({r["claim_id"] for r in rows})
print(f"{claims} claims, {len(rows)} lines: {status_counts(rows)}", file=sys.stderr)
