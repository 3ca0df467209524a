"""Snakemake script: the tiered check's table (lethe.verifier.tiers) from committed full-battery rows, and for
the corpora that have them, committed rows of the quick tier run on its own."""

import json
from pathlib import Path

from lethe.verifier import tiers
from lethe.verifier.records import read_rows

smk = snakemake  # noqa: F821 - injected by Snakemake


def strict(path):
    return [r for r in read_rows(path) if r["profile"] == "strict"]


corpora = {name: strict(path) for name, path in zip(smk.params.names, smk.input.rows, strict=True)}
quick = {name: strict(path) for name, path in zip(smk.params.quick_names, smk.input.quick, strict=True)}
notes = {}
for name, path in zip(smk.params.quick_names, smk.input.quick_provenance, strict=True):
    prov = json.loads(Path(path).read_text())
    notes[name] = tiers.run_note(prov, corpora[name])
doc = tiers.measure(corpora, quick_rows_by_corpus=quick, notes_by_corpus=notes)
Path(smk.output.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
tiers.render(doc, json.loads(Path(smk.input.timing).read_text()), smk.output.md, smk.output.tex)
