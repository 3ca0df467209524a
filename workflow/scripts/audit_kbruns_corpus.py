"""One KernelBench run corpus's summary (corpus.json) and kernel manifest (manifest.jsonl: ids, hashes, flags,
upstream verdicts, no source) from its pinned, verified files."""

import json
import sys
from pathlib import Path

from lethe.corpora import hzeng_backends, kbruns, technoabsurdist_runs, yenhao_runs

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive
sys.stderr = open(snakemake.log[0], "w", buffering=1)
spec = {s.name: s for s in (hzeng_backends.SPEC, technoabsurdist_runs.SPEC, yenhao_runs.SPEC)}[
    snakemake.wildcards.corpus]
root = kbruns.resolve(spec, snakemake.params.src, snakemake.params.cache_dir)
entries = kbruns.pair(spec, root)
out = Path(snakemake.output.corpus)
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps(kbruns.summary(spec, entries), sort_keys=True, indent=1) + "\n", encoding="utf-8")
kbruns.write_manifest(entries, snakemake.output.manifest)
