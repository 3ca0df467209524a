"""Compute rule script: fold a new device run into an experiment's current result (lethe.results.fold). The new
run becomes the current result; the runs it replaces go to history.jsonl with the commit whose tree holds them."""

import os
import subprocess
from pathlib import Path

from lethe.results import fold

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

run = Path(snakemake.input.run)
commit = os.environ.get("LETHE_GIT_SHA") or subprocess.run(
    ["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() or None
fold(Path(snakemake.output.result).parent, Path(snakemake.output.result).name, snakemake.params.experiment,
     [(snakemake.params.run, run)], commit=commit)
