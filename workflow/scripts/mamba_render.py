"""Render rule script: C1's launch-search table (this project's H200 result) and the authors' published records of
the same study (scan-mode boundary, launch-knob cost model, LLM-policy runs), via lethe.render.mamba_launch."""

import json
from pathlib import Path

from lethe.render import mamba_launch

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

out, inp = snakemake.output, snakemake.input
read = lambda p: json.loads(Path(p).read_text())
if snakemake.params.table == "launch_search":
    from lethe.results import load_runs

    # the newest current run is the measurement; earlier current runs would be partial re-measurements
    _, doc, prov = load_runs(inp.result)[-1]
    mamba_launch.render_launch_search(doc, prov, out.md, out.tex)
elif snakemake.params.table == "scan_mode_published":
    mamba_launch.render_published_scan_mode(read(inp.boundary), out.md, out.tex)
elif snakemake.params.table == "launch_published":
    mamba_launch.render_published_launch(read(inp.cost_model), out.md, out.tex)
else:
    mamba_launch.render_published_rl(read(inp.config_rl), read(inp.serial_seed), read(inp.edit_rl), out.md, out.tex)
