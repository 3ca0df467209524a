# Render rules of the published stage: tables drawn from the committed re-aggregation of the paper's records.
RENDER_TARGETS.extend(
    [
        "paper/tables/published_floor.md",
        "paper/tables/published_floor.tex",
    ]
)


rule published_floor_table:
    conda:
        CONDA_ENV
    input:
        aggregates="results/published/aggregates.json",
    output:
        md="paper/tables/published_floor.md",
        tex="paper/tables/published_floor.tex",
    params:
        title="Denominator funnel and tolerance-free floor (paper's published records)",
        note=(
            "Re-aggregated by lethe.audit.aggregate from the paper authors' published per-row records "
            "(data/published/audit_rows.jsonl.gz, audited on a B200); these are the paper's figures, "
            "not this project's measurement. Every figure is checked against the published JSON in "
            "results/published/aggregates.json (key: checks)."
        ),
        caption=(
            "Dr. Kernel cold-start audit, paper's published records re-aggregated: funnel, tolerance-free "
            "floor (EXC-01, ORD-02, aliasing, crash, failure to run), and per-class sensitivity."
        ),
        label="tab:published-floor",
    log:
        "logs/published/floor_table.log",
    script:
        "../scripts/published_render.py"
