# Render rules of the hand-audit stage: the summary of each committed label file in data/hand_audit/.
RENDER_TARGETS.extend(
    [
        "paper/tables/hand_audit_published.md",
        "paper/tables/hand_audit_published.tex",
    ]
)


rule hand_audit_published_summary:
    conda:
        CONDA_ENV
    input:
        labels="data/hand_audit/published_sample.csv",
        buckets="data/hand_audit/published_sample.buckets.json",
    output:
        md="paper/tables/hand_audit_published.md",
        tex="paper/tables/hand_audit_published.tex",
    log:
        "logs/hand_audit/published_summary.log",
    script:
        "../scripts/hand_audit_render.py"
