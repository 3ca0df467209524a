# Render rules of the verifier stage: the gate calibration table (expected vs observed status of every
# calibration fixture, per profile) from the committed results/verifier/calibration.parquet.
# Registered only once the committed result exists, so the DAG stays valid before the first compute run.
if os.path.exists(os.path.join(workflow.basedir, "results/verifier/calibration.parquet")):
    RENDER_TARGETS.extend(
        [
            "paper/tables/verifier_calibration.md",
            "paper/tables/verifier_calibration.tex",
        ]
    )


rule verifier_calibration_table:
    conda:
        CONDA_ENV
    input:
        rows="results/verifier/calibration.parquet",
    output:
        md="paper/tables/verifier_calibration.md",
        tex="paper/tables/verifier_calibration.tex",
    log:
        "logs/verifier/calibration_table.log",
    script:
        "../scripts/verifier_render.py"
