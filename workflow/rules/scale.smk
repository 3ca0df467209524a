# The scale run (issue 27; docs/scale.md). The render rule reads the committed run folder (results/scale/<run>/,
# written from a device call's output); the compute rules are in scale_compute.smk.
import os

SCALE_DIR = "results/scale/mamba-1b"
SCALE_INPUTS = ["log.jsonl", "reference_check.json", "provenance.json"]
if all(os.path.exists(os.path.join(workflow.basedir, SCALE_DIR, f)) for f in SCALE_INPUTS):
    RENDER_TARGETS.extend(["paper/tables/scale_run.md", "paper/tables/scale_run.tex",
                           "figures/scale_curve.png", "figures/scale_curve.pdf"])


rule scale_render:
    conda:
        CONDA_ENV
    input:
        log=f"{SCALE_DIR}/log.jsonl",
        ref=f"{SCALE_DIR}/reference_check.json",
        provenance=f"{SCALE_DIR}/provenance.json",
    output:
        md="paper/tables/scale_run.md",
        tex="paper/tables/scale_run.tex",
        png=report("figures/scale_curve.png", caption="../report/scale_curve.rst", category="Figures",
                   subcategory="scale run (H200)"),
        pdf="figures/scale_curve.pdf",
    log:
        "logs/scale/render.log",
    script:
        "../scripts/scale_render.py"
