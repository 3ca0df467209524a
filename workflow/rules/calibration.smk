# Render rules of the calibration stage: this project's sweep (table + figure, from the committed
# results/calibration/sweep.json) and the paper's published calibration (data/published/).
RENDER_TARGETS.extend(
    [
        "paper/tables/calibration.md",
        "paper/tables/calibration.tex",
        "figures/calibration.png",
        "figures/calibration.pdf",
        "paper/tables/calibration_published.md",
        "paper/tables/calibration_published.tex",
    ]
)


rule calibration_render:
    conda:
        CONDA_ENV
    input:
        sweep="results/calibration/sweep.json",
    output:
        md="paper/tables/calibration.md",
        tex="paper/tables/calibration.tex",
        png="figures/calibration.png",
        pdf="figures/calibration.pdf",
    log:
        "logs/calibration/render.log",
    script:
        "../scripts/calibration_render.py"


rule calibration_published_table:
    conda:
        CONDA_ENV
    input:
        published="data/published/threshold_calibration.json",
    output:
        md="paper/tables/calibration_published.md",
        tex="paper/tables/calibration_published.tex",
    log:
        "logs/calibration/published_table.log",
    script:
        "../scripts/calibration_render.py"
