"""The leaderboard corpus summary (corpus.json) and kernel manifest (manifest.jsonl: ids, hashes, flags, no
source) from the pinned, verified inputs."""

import json
import sys
from pathlib import Path

from lethe.corpora import leaderboard as LB

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive
sys.stderr = open(snakemake.log[0], "w", buffering=1)
raw = LB.resolve_raw(snakemake.input.raw, snakemake.params.cache_dir)
kb = LB.resolve_kernelbench(snakemake.params.kernelbench, snakemake.params.cache_dir)
rows = LB.load_rows(raw)
entries = LB.pair(rows, kb)
pairing = LB.pairing_check(rows, LB.resolve_data(snakemake.input.data, snakemake.params.cache_dir))
out = Path(snakemake.output.corpus)
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps(LB.summary(entries, raw, kb, pairing), sort_keys=True, indent=1) + "\n", encoding="utf-8")
LB.write_manifest(entries, snakemake.output.manifest)
