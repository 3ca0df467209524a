# Render rules of the red_team stage: the red-team table (targets, gates that fired, loose-check verdict) and the
# positive-control table (gate statuses per trusted kernel), from committed results/{red_team,positive_control}/.
# A table joins the default target only once its results are committed, so the DAG never needs a compute rule.
import glob
import os

RED_TEAM_SUITES = [
    s
    for s in ("red_team", "positive_control")
    if os.path.exists(os.path.join(workflow.basedir, "results", s, "rows.parquet"))
]
for _s in RED_TEAM_SUITES:
    RENDER_TARGETS.extend([f"paper/tables/{_s}.md", f"paper/tables/{_s}.tex"])
# The same tables from the H200 run (results/<suite>/h200/), committed separately from the CPU run.
for _s in ("red_team", "positive_control"):
    if os.path.exists(os.path.join(workflow.basedir, "results", _s, "h200", "rows.parquet")):
        RENDER_TARGETS.extend([f"paper/tables/{_s}_h200.md", f"paper/tables/{_s}_h200.tex"])


rule red_team_table:
    conda:
        CONDA_ENV
    input:
        rows="results/{suite}/rows.parquet",
        loose="results/{suite}/loose.parquet",
        summary="results/{suite}/summary.json",
        manifests=lambda wc: sorted(
            glob.glob(os.path.join(workflow.basedir, "data", wc.suite, "*", "manifest.yaml"))
        ),
    output:
        md="paper/tables/{suite}.md",
        tex="paper/tables/{suite}.tex",
    wildcard_constraints:
        suite="red_team|positive_control",
    params:
        suite=lambda wc: wc.suite,
    log:
        "logs/red_team/{suite}_table.log",
    script:
        "../scripts/red_team_render.py"


rule red_team_table_h200:
    conda:
        CONDA_ENV
    input:
        rows="results/{suite}/h200/rows.parquet",
        loose="results/{suite}/h200/loose.parquet",
        summary="results/{suite}/h200/summary.json",
        manifests=lambda wc: sorted(
            glob.glob(os.path.join(workflow.basedir, "data", wc.suite, "*", "manifest.yaml"))
        ),
    output:
        md="paper/tables/{suite}_h200.md",
        tex="paper/tables/{suite}_h200.tex",
    wildcard_constraints:
        suite="red_team|positive_control",
    params:
        suite=lambda wc: wc.suite,
        label_suffix="-h200",
    log:
        "logs/red_team/{suite}_h200_table.log",
    script:
        "../scripts/red_team_render.py"
