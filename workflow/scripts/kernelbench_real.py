"""Thin wrapper: the kernelbench_real rule (judge one corpus with one implementation) or kernelbench_real_agreement.

The judge runs as ``python -m lethe.kernelbench.real judge ...`` in a child process: its workers are spawned, and
a spawned worker re-imports the parent's main module, which must not be this script.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

log = open(snakemake.log[0], "w")
if "theirs" in snakemake.input.keys():
    from lethe.kernelbench import real

    res = real.agree(real.read_rows(snakemake.input.theirs), real.read_rows(snakemake.input.ours))
    Path(snakemake.output.agreement).write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    print(f"agreement {res['agreement_rate']} on {res['joined_rows']} kernels; classes {res['classes']}", file=log)
    sys.exit(0)

p = snakemake.params
impl = snakemake.wildcards.impl
out = Path(snakemake.output.rows).parent
cmd = [sys.executable, "-m", "lethe.kernelbench.real", "judge", str(snakemake.input.run_dir), "--out", str(out),
       "--work", p.work, "--build-root", p.build_root, "--impl", impl, "--problems", str(snakemake.input.problems), "--problem-base", str(p.problem_base),
       "--workers", str(p.workers), "--timeout", str(p.timeout_s), "--kernels-per-worker", str(p.kernels_per_worker),
       "--device", p.device]
if impl == "real":
    cmd += ["--checkout", str(snakemake.input.checkout)]
if p.build_dir_map:
    cmd += ["--build-dir-map", str(p.build_dir_map)]
for e in p.extra_paths:
    cmd += ["--extra-path", str(e)]
if p.ids:
    cmd += ["--ids", str(p.ids)]
print(" ".join(cmd), file=log, flush=True)
# The child imports the package from this checkout's src/ (Snakemake runs in the repository root), as the
# workflow itself does (common.smk).
src = str(Path.cwd() / "src")
env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])]))
sys.exit(subprocess.run(cmd, stdout=log, stderr=log, env=env, check=False).returncode)
