# Render rules of the aot stage: the mamba#904 ahead-of-time tables (compiled, not executed: no B200 here).
# Registered only once the committed result exists, so the DAG stays valid before the first compute run.
if os.path.exists(os.path.join(workflow.basedir, "results/aot/mamba904.json")):
    RENDER_TARGETS.extend(
        [
            "paper/tables/aot_mamba904.md",
            "paper/tables/aot_mamba904.tex",
        ]
    )


rule aot_mamba904_table:
    conda:
        CONDA_ENV
    input:
        result="results/aot/mamba904.json",
    output:
        md="paper/tables/aot_mamba904.md",
        tex="paper/tables/aot_mamba904.tex",
    log:
        "logs/aot/mamba904_table.log",
    script:
        "../scripts/aot_render.py"
