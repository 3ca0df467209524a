"""Join the audit's verdict rows with the KernelBench check rows into the 2x2 differential of one corpus."""

import json
from pathlib import Path

import pandas as pd

from lethe import provenance
from lethe.kernelbench import differential as diff

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

audit = pd.read_parquet(snakemake.input.rows)
if "profile" in audit.columns:
    audit = audit[audit["profile"] == snakemake.params.profile]
kb_rows = pd.read_parquet(snakemake.input.kb_rows).to_dict("records")
result = diff.differential(audit.to_dict("records"), kb_rows)
Path(snakemake.output.differential).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
provenance.write(snakemake.output.provenance, profile=snakemake.params.profile)
