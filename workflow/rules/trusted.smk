# Render rules of the trusted stage: the false-fail table of the verifier on correct kernels (per gate, CPU and
# GPU) and the list of every failure with its explanation, from the committed results/trusted/ (CPU) and
# results/trusted/gpu/ (when that run is committed; the column is named by the card in its provenance) plus
# data/trusted/explanations.yaml.
# Registered only once the committed CPU result exists, so the DAG never needs the compute rule.
TRUSTED_TABLES = [
    "paper/tables/trusted_false_fail.md",
    "paper/tables/trusted_false_fail.tex",
    "paper/tables/trusted_failures.md",
    "paper/tables/trusted_failures.tex",
]
if os.path.exists(os.path.join(workflow.basedir, "results", "trusted", "rows.parquet")):
    RENDER_TARGETS.extend(TRUSTED_TABLES)
TRUSTED_GPU_ROWS = "results/trusted/gpu/rows.parquet"
TRUSTED_GPU_PROVENANCE = "results/trusted/gpu/provenance.json"
TRUSTED_GPU_SUMMARY = "results/trusted/gpu/summary.json"


rule trusted_table:
    conda:
        CONDA_ENV
    input:
        rows="results/trusted/rows.parquet",
        summary="results/trusted/summary.json",
        explanations="data/trusted/explanations.yaml",
        gpu=lambda wc: (
            [TRUSTED_GPU_ROWS] if os.path.exists(os.path.join(workflow.basedir, TRUSTED_GPU_ROWS)) else []
        ),
        gpu_provenance=lambda wc: (
            [TRUSTED_GPU_PROVENANCE] if os.path.exists(os.path.join(workflow.basedir, TRUSTED_GPU_ROWS)) else []
        ),
        gpu_summary=lambda wc: (
            [TRUSTED_GPU_SUMMARY] if os.path.exists(os.path.join(workflow.basedir, TRUSTED_GPU_ROWS)) else []
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


# The fix check: the trusted kernels whose failures a verifier fix made after the corpus run should clear,
# re-verified at the fixing commit (results/trusted/fix_check/cpu/, and gpu/ when run on a GPU), against the
# committed corpus rows. Registered once a fix check is committed.
TRUSTED_FIX_GPU_ROWS = "results/trusted/fix_check/gpu/rows.parquet"
if os.path.exists(os.path.join(workflow.basedir, "results", "trusted", "fix_check", "cpu", "rows.parquet")):
    RENDER_TARGETS.extend(["paper/tables/trusted_fix_check.md", "paper/tables/trusted_fix_check.tex"])


rule trusted_fix_check_table:
    conda:
        CONDA_ENV
    input:
        cpu_before="results/trusted/rows.parquet",
        cpu_after="results/trusted/fix_check/cpu/rows.parquet",
        gpu=lambda wc: (
            [TRUSTED_GPU_ROWS, TRUSTED_FIX_GPU_ROWS]
            if os.path.exists(os.path.join(workflow.basedir, TRUSTED_FIX_GPU_ROWS)) else []
        ),
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
