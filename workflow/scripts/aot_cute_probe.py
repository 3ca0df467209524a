"""Compute rule script: CuTe DSL sm_100a compile check (see lethe.aot.cute_dsl). Compiled, not executed."""

import sys

from lethe.aot.cute_dsl import main

snakemake = globals()["snakemake"]
rc = main(["--out", str(snakemake.output.result), "--provenance", str(snakemake.output.provenance)])
if rc != 0:
    sys.exit(rc)
