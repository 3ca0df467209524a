"""The audited kernels' sources (id, ref_src, cand_src): what the KernelBench differential re-checks."""

import sys

import pyarrow as pa
import pyarrow.parquet as pq

from lethe.corpora.items import load_items

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive
sys.stderr = open(snakemake.log[0], "w", buffering=1)
items = [i for i in load_items(snakemake.input.corpus, snakemake.params.corpus) if i.get("candidate")]
table = pa.table({"id": [str(i["id"]) for i in items], "ref_src": [i["reference"] for i in items],
                  "cand_src": [i["candidate"] for i in items]})
pq.write_table(table, snakemake.output[0])
