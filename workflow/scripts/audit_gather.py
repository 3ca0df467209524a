"""Gather shard rows into results/audit/<corpus>/rows.parquet, aggregate them, record provenance."""

import json
from pathlib import Path

from lethe import provenance
from lethe.audit import aggregate as agg
from lethe.audit import published
from lethe.audit import shard as S

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive


def _fake(row):
    try:
        return bool(json.loads(row.get("environment") or "{}").get("fake_verifier"))
    except (TypeError, ValueError):
        return False


rows = S.gather(list(snakemake.input), snakemake.output.rows)
result = agg.aggregate(rows)
result["corpus"] = snakemake.params.corpus
# A run with the stand-in verifier exercises the pipeline only; its figures must never pass for measurements.
result["verifier"] = ("FAKE: lethe.audit.testing.fake_verify (pipeline check, not a measurement)"
                      if any(_fake(r) for r in rows) else "lethe.verifier.api.verify")
Path(snakemake.output.aggregates).write_text(published.dumps(result))
provenance.write(snakemake.output.provenance, command="snakemake --config compute=audit (rule audit_gather)",
                 corpus=snakemake.params.corpus, rows=len(rows), verifier=result["verifier"],
                 config=snakemake.params.config)
