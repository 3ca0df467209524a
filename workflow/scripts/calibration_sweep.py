"""Run the threshold-calibration sweep (CPU, seconds) and write results/calibration/sweep.json + provenance."""

import json
from pathlib import Path

from lethe import provenance
from lethe.calibration import sweep
from lethe.verifier import tolerance

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

seed = int(snakemake.params.seed)
rows = sweep.sweep(seed=seed)
out = {"seed": seed, "n_native": sweep.N_NATIVE, "held_out": list(sweep.HELD_OUT), "thin_below": sweep.THIN,
       "constants": tolerance.as_dict(), "rows": rows}
Path(snakemake.output.sweep).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.output.sweep).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
provenance.write(snakemake.output.provenance, seed=seed)
