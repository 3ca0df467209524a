# Render rules of the audit stage: the funnel / floor / per-class table of every corpus whose audit
# aggregates are committed under results/audit/<corpus>/ (render rules read committed files only).

AUDITED_CORPORA = sorted(
    c
    for c in ("fixture", "sakana-subset", "drkernel", "sakana")
    if os.path.exists(os.path.join(workflow.basedir, "results", "audit", c, "aggregates.json"))
)

RENDER_TARGETS.extend(
    [f"paper/tables/audit_{c}_floor.{ext}" for c in AUDITED_CORPORA for ext in ("md", "tex")]
)


rule audit_floor_table:
    conda:
        CONDA_ENV
    input:
        aggregates="results/audit/{corpus}/aggregates.json",
    output:
        md="paper/tables/audit_{corpus}_floor.md",
        tex="paper/tables/audit_{corpus}_floor.tex",
    wildcard_constraints:
        corpus="|".join(AUDITED_CORPORA) or "__none__",
    params:
        title=lambda wc: f"Audit of the {wc.corpus} corpus: funnel and tolerance-free floor",
        note=lambda wc: (
            f"Computed by this project's audit pipeline (results/audit/{wc.corpus}/). "
            "The verifier that produced the rows is named in aggregates.json (key: verifier)."
        ),
        caption=lambda wc: f"Audit of the {wc.corpus} corpus: funnel, floor and per-class sensitivity.",
        label=lambda wc: f"tab:audit-{wc.corpus}",
    log:
        "logs/audit/floor_table_{corpus}.log",
    script:
        "../scripts/published_render.py"
