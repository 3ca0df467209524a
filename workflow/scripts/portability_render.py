"""Snakemake script: the portability report (lethe.audit.portability) from the committed results the config
names, and its two tables."""

import json
from pathlib import Path

from lethe.audit import portability

smk = snakemake  # noqa: F821 - injected by Snakemake
report = portability.build_report(smk.params.comparisons)
Path(smk.output.json).parent.mkdir(parents=True, exist_ok=True)
Path(smk.output.json).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
portability.render(report, smk.output.md, smk.output.tex, smk.output.md_changes, smk.output.tex_changes)
