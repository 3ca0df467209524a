"""Verify one shard of the configured corpus, resuming from its row checkpoint."""

import sys

from lethe.audit import shard as S
from lethe.corpora.items import load_items
from lethe.corpora.items import shard as take_shard

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

p = snakemake.params
verifier = {"": None, "lethe": None, "fake": "lethe.audit.testing:fake_verify"}.get(p.verifier, p.verifier)
i = int(snakemake.wildcards.i)
items = take_shard(load_items(snakemake.input.corpus, p.corpus), i, int(p.shards))
with open(snakemake.log[0], "w") as log:
    sys.stderr = log  # the tqdm bar and verifier warnings go to the shard's log
    rows = S.run_shard(items, p.checkpoint, verify_fn=S.resolve(verifier), profiles=list(p.profiles),
                       device=p.device, seed=int(p.seed), timeout_s=float(p.timeout_s), corpus=p.corpus,
                       shard_label=f"{i + 1}/{p.shards}")
S.write_parquet(rows, snakemake.output[0])
