"""Snakemake script: the tiered check's table (lethe.verifier.tiers) from committed full-battery rows."""

import json
from pathlib import Path

from lethe.verifier import tiers
from lethe.verifier.records import read_rows

smk = snakemake  # noqa: F821 - injected by Snakemake
corpora = {name: [r for r in read_rows(path) if r["profile"] == "strict"]
           for name, path in zip(smk.params.names, smk.input.rows, strict=True)}
doc = tiers.measure(corpora)
Path(smk.output.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
tiers.render(doc, json.loads(Path(smk.input.timing).read_text()), smk.output.md, smk.output.tex)
