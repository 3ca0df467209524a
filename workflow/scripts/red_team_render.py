"""Snakemake script: render paper/tables/{red_team,positive_control}.{md,tex} from committed results."""

import json
from pathlib import Path

from lethe.redteam.manifest import load_suite
from lethe.redteam.run import read_loose
from lethe.redteam.tables import render
from lethe.verifier.records import read_rows

smk = snakemake  # noqa: F821 - injected by Snakemake
suite = smk.params.suite
summary = json.loads(Path(smk.input.summary).read_text())
render(suite, load_suite(suite), read_rows(smk.input.rows), read_loose(smk.input.loose),
       smk.output.md, smk.output.tex, run_info=summary.get("run"), label_suffix=smk.params.get("label_suffix", ""))
