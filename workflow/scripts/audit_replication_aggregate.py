"""results/audit/<corpus>/aggregates.json from the corpus's committed GPU rows and KernelBench's real check."""

import json
from pathlib import Path

from lethe.audit import published
from lethe.audit.replication import corpus_aggregates
from lethe.verifier.records import read_rows

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

kb = [json.loads(x) for x in Path(snakemake.input.kb).read_text().splitlines() if x.strip()]
classes = {e["id"]: e["op_class"] for e in map(json.loads, Path(snakemake.input.manifest).read_text().splitlines())
           if e.get("id") and e.get("op_class")}
result = corpus_aggregates(read_rows(snakemake.input.rows), kb, snakemake.params.corpus, classes)
Path(snakemake.output.aggregates).write_text(published.dumps(result))
