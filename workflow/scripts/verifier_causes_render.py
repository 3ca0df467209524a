"""Snakemake script: how failing verdicts collapse into root causes (lethe.verifier.causes) on committed rows."""

import json
from pathlib import Path

from lethe.verifier import causes
from lethe.verifier.records import read_rows

smk = snakemake  # noqa: F821 - injected by Snakemake
doc = causes.measure_corpora({name: [r for r in read_rows(path) if r["profile"] == "strict"]
                              for name, path in zip(smk.params.names, smk.input.rows, strict=True)})
Path(smk.output.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
causes.render(doc, smk.output.md, smk.output.tex)
