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


# The tiered check (lethe.verifier.tiers): what its quick tier alone lets through, computed from committed
# full-battery rows (the red team on the CPU; the H200 mixed run), and the committed per-tier timing.
TIER_ROWS = {"red team (CPU)": "results/red_team/rows.parquet", "mixed run (H200)": "results/audit/mixed/rows.parquet"}
RENDER_TARGETS.extend(["paper/tables/verifier_tiers.md", "paper/tables/verifier_tiers.tex"])


rule verifier_tiers_table:
    conda:
        CONDA_ENV
    input:
        rows=list(TIER_ROWS.values()),
        timing="results/verifier/tier_timing.json",
    output:
        json="results/verifier/tiers.json",
        md="paper/tables/verifier_tiers.md",
        tex="paper/tables/verifier_tiers.tex",
    params:
        names=list(TIER_ROWS),
    log:
        "logs/verifier/tiers_table.log",
    script:
        "../scripts/verifier_tiers_render.py"
