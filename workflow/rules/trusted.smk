# Render rules of the trusted stage: the false-fail table of the verifier on correct kernels (per gate, CPU and
# H200) and the list of every failure with its explanation, from the committed results/trusted/ (CPU) and
# results/trusted/h200/ (when that run is committed) plus data/trusted/explanations.yaml.
# Registered only once the committed CPU result exists, so the DAG never needs the compute rule.
TRUSTED_TABLES = [
    "paper/tables/trusted_false_fail.md",
    "paper/tables/trusted_false_fail.tex",
    "paper/tables/trusted_failures.md",
    "paper/tables/trusted_failures.tex",
]
if os.path.exists(os.path.join(workflow.basedir, "results", "trusted", "rows.parquet")):
    RENDER_TARGETS.extend(TRUSTED_TABLES)
TRUSTED_H200_ROWS = "results/trusted/h200/rows.parquet"


rule trusted_table:
    conda:
        CONDA_ENV
    input:
        rows="results/trusted/rows.parquet",
        summary="results/trusted/summary.json",
        explanations="data/trusted/explanations.yaml",
        h200=lambda wc: (
            [TRUSTED_H200_ROWS] if os.path.exists(os.path.join(workflow.basedir, TRUSTED_H200_ROWS)) else []
        ),
    output:
        md="paper/tables/trusted_false_fail.md",
        tex="paper/tables/trusted_false_fail.tex",
        failures_md="paper/tables/trusted_failures.md",
        failures_tex="paper/tables/trusted_failures.tex",
    log:
        "logs/trusted/table.log",
    script:
        "../scripts/trusted_render.py"
