"""Snakemake script: verify + loose-check one suite (red_team or positive_control) and write its results."""

import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from lethe.redteam.run import run_suite  # noqa: E402
from lethe.verifier.api import resolve_device  # noqa: E402

smk = snakemake  # noqa: F821 - injected by Snakemake
log_path = Path(smk.log[0])
log_path.parent.mkdir(parents=True, exist_ok=True)
with open(log_path, "w") as log:
    def say(msg):
        print(msg, file=log, flush=True)
        print(msg, file=sys.stderr, flush=True)

    out_dir = Path(smk.output.rows).parent
    summary = run_suite(smk.params.suite, out_dir, profile=smk.params.profile,
                        device=resolve_device(smk.params.device), seed=int(smk.params.seed), log=say)
    say(f"done: {summary['n_kernels']} kernels")
