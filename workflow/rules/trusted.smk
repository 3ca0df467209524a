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


# The fix check: the trusted kernels that fixed verifier defects explained, re-verified at the fixing commit
# (results/trusted/fix_check/{cpu,h200}/), against the committed corpus rows. Registered once committed.
if os.path.exists(os.path.join(workflow.basedir, "results", "trusted", "fix_check", "cpu", "rows.parquet")):
    RENDER_TARGETS.extend(["paper/tables/trusted_fix_check.md", "paper/tables/trusted_fix_check.tex"])


rule trusted_fix_check_table:
    conda:
        CONDA_ENV
    input:
        cpu_before="results/trusted/rows.parquet",
        h200_before=TRUSTED_H200_ROWS,
        cpu_after="results/trusted/fix_check/cpu/rows.parquet",
        h200_after="results/trusted/fix_check/h200/rows.parquet",
        prov_before="results/trusted/provenance.json",
        prov_after="results/trusted/fix_check/cpu/provenance.json",
        explanations="data/trusted/explanations.yaml",
    output:
        md="paper/tables/trusted_fix_check.md",
        tex="paper/tables/trusted_fix_check.tex",
    log:
        "logs/trusted/fix_check_table.log",
    script:
        "../scripts/trusted_fix_check_render.py"
