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
# full-battery rows (the red team on the CPU and on the H200; the H200 mixed run), and the committed per-tier timing.
# The hostile suite (data/hostile) has the quick tier run on its own beside the full battery (python -m
# lethe.verifier.tiers --rows): a containment status in a full-battery row does not say what the quick gates would do.
TIER_ROWS = {"red team (CPU)": "results/red_team/rows.parquet", "red team (H200)": "results/red_team/h200/rows.parquet",
             "mixed run (H200)": "results/audit/mixed/rows.parquet",
             "hostile suite (CPU)": "results/verifier/hostile/rows.parquet"}
TIER_QUICK_ROWS = {"hostile suite (CPU)": "results/verifier/hostile/quick_rows.parquet"}
RENDER_TARGETS.extend(["paper/tables/verifier_tiers.md", "paper/tables/verifier_tiers.tex"])


rule verifier_tiers_table:
    conda:
        CONDA_ENV
    input:
        rows=list(TIER_ROWS.values()),
        quick=list(TIER_QUICK_ROWS.values()),
        quick_provenance=[os.path.join(os.path.dirname(p), "provenance.json") for p in TIER_QUICK_ROWS.values()],
        timing="results/verifier/tier_timing.json",
    output:
        json="results/verifier/tiers.json",
        md="paper/tables/verifier_tiers.md",
        tex="paper/tables/verifier_tiers.tex",
    params:
        names=list(TIER_ROWS),
        quick_names=list(TIER_QUICK_ROWS),
    log:
        "logs/verifier/tiers_table.log",
    script:
        "../scripts/verifier_tiers_render.py"


# Root causes (lethe.verifier.causes): how the failing rows of the red team (CPU and H200) and the mixed run
# collapse from failed gates into causes, and whether the first cause is the defect a red-team member was built with.
CAUSE_ROWS = {"red team (CPU)": "results/red_team/rows.parquet", "red team (H200)": "results/red_team/h200/rows.parquet",
              "mixed run (H200)": "results/audit/mixed/rows.parquet"}
RENDER_TARGETS.extend(["paper/tables/verifier_causes.md", "paper/tables/verifier_causes.tex"])


rule verifier_causes_table:
    conda:
        CONDA_ENV
    input:
        rows=list(CAUSE_ROWS.values()),
    output:
        json="results/verifier/causes.json",
        md="paper/tables/verifier_causes.md",
        tex="paper/tables/verifier_causes.tex",
    params:
        names=list(CAUSE_ROWS),
    log:
        "logs/verifier/causes_table.log",
    script:
        "../scripts/verifier_causes_render.py"


# Portability (lethe.audit.portability): the same kernels across machines, AOT targets and launch configurations,
# from the committed results listed in config portability.comparisons.
from lethe.audit.portability import input_files as _portability_inputs

RENDER_TARGETS.extend(["paper/tables/portability.md", "paper/tables/portability.tex",
                       "paper/tables/portability_changes.md", "paper/tables/portability_changes.tex"])


rule portability_table:
    conda:
        CONDA_ENV
    input:
        _portability_inputs(config["portability"]["comparisons"]),
    output:
        json="results/portability/report.json",
        md="paper/tables/portability.md",
        tex="paper/tables/portability.tex",
        md_changes="paper/tables/portability_changes.md",
        tex_changes="paper/tables/portability_changes.tex",
    params:
        comparisons=config["portability"]["comparisons"],
    log:
        "logs/portability/table.log",
    script:
        "../scripts/portability_render.py"
