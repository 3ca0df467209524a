"""Snakemake script: run (or resume) the trusted corpus through the verifier; see lethe.trusted.run."""

import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from lethe.trusted.run import main  # noqa: E402

smk = snakemake  # noqa: F821 - injected by Snakemake
p = smk.params
# A relative kb_root is relative to the repository root, the workflow's working directory.
argv = ["--kb-root", str(Path(p.kb_root)), "--out", str(Path(smk.output.rows).parent), "--device", p.device,
        "--profiles", ",".join(p.profiles), "--seed", str(p.seed), "--budget-s", str(p.budget_s),
        "--max-numel", str(p.max_numel), "--max-flops", str(p.max_flops)]
if p.stop_after_s:
    argv += ["--stop-after-s", str(p.stop_after_s)]
Path(smk.log[0]).parent.mkdir(parents=True, exist_ok=True)
with open(smk.log[0], "w") as log:
    sys.stderr = log
    raise SystemExit(main(argv))
