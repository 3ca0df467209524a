# Render rule of the repro stage: the standalone-repro measurement (shrink factor, reproduced, bit for bit) from
# the committed results/repro/summary.json named in config (results: repro).
import os

REPRO_SUMMARY = config.get("results", {}).get("repro", "results/repro/summary.json")
if os.path.exists(os.path.join(workflow.basedir, REPRO_SUMMARY)):
    RENDER_TARGETS.extend(["paper/tables/repro.md", "paper/tables/repro.tex"])


rule repro_table:
    conda:
        CONDA_ENV
    input:
        summary=REPRO_SUMMARY,
    output:
        md="paper/tables/repro.md",
        tex="paper/tables/repro.tex",
    log:
        "logs/repro/table.log",
    script:
        "../scripts/repro_render.py"
