# Render rules of the paper stage: figures and tables from the authors' released records that no other stage
# renders, the claims ledger (paper/claims.csv) and the results book (paper/book.md). All CPU, seconds.
# This file is included last (see config "stages"), so RENDER_TARGETS already holds every other stage's outputs.

PUBLISHED = "data/published"
PAPER_FIGURES = {
    # stem: released files it is drawn from (lethe.render.figures.FIGURES keeps the same list)
    "published_gate_failures": ["audit_drkernel.json"],
    "published_class_floor": ["audit_tolerance_free.json"],
    "published_differential": ["crossval_kernelbench.json"],
    "published_elapsed": ["audit_rows.jsonl.gz"],
}
PAPER_TABLES = {
    "published_gate_counts": ["audit_drkernel.json"],
    "published_second_corpus": ["audit_sakana.json"],
}


def _published_present(files):
    return all(os.path.exists(os.path.join(PUBLISHED, f)) for f in files)


# Only stems whose released records are present join the DAG, so a checkout without data/published/ still
# has a valid DAG; the book then lists them as not rendered.
FIGURE_STEMS = sorted(s for s, f in PAPER_FIGURES.items() if _published_present(f))
TABLE_STEMS = sorted(s for s, f in PAPER_TABLES.items() if _published_present(f))
OTHER_TARGETS = list(RENDER_TARGETS)  # snapshot before our own: what the book embeds

RENDER_TARGETS.extend(
    expand("figures/{stem}.{ext}", stem=FIGURE_STEMS, ext=["png", "pdf"])
    + expand("paper/tables/{stem}.{ext}", stem=TABLE_STEMS, ext=["md", "tex"])
    + ["paper/claims.csv", "paper/book.md"]
)


def claims_inputs(wildcards):
    """Every intermediate the ledger spec names that exists now; absent ones become not-reproducible-here."""
    import yaml

    with open("paper/claims_spec.yaml", encoding="utf-8") as fh:
        spec = yaml.safe_load(fh)
    paths = {s["path"] for c in spec["claims"] for s in c["sources"]}
    return sorted(p for p in paths if os.path.exists(p))


if FIGURE_STEMS:

    rule paper_figures:
        input:
            sorted({os.path.join(PUBLISHED, f) for s in FIGURE_STEMS for f in PAPER_FIGURES[s]}),
        output:
            [
                report(
                    f"figures/{stem}.png",
                    caption=f"../report/{stem}.rst",
                    category="Figures",
                    subcategory="published records",
                )
                for stem in FIGURE_STEMS
            ],
            expand("figures/{stem}.pdf", stem=FIGURE_STEMS),
        params:
            published=PUBLISHED,
            outdir="figures",
            stems=FIGURE_STEMS,
        log:
            "logs/paper/figures.log",
        script:
            "../scripts/paper_figures.py"


if TABLE_STEMS:

    rule paper_tables:
        input:
            sorted({os.path.join(PUBLISHED, f) for s in TABLE_STEMS for f in PAPER_TABLES[s]}),
        output:
            [
                report(
                    f"paper/tables/{stem}.md",
                    caption=f"../report/{stem}.rst",
                    category="Tables",
                    subcategory="published records",
                )
                for stem in TABLE_STEMS
            ],
            expand("paper/tables/{stem}.tex", stem=TABLE_STEMS),
        params:
            published=PUBLISHED,
            outdir="paper/tables",
        log:
            "logs/paper/tables.log",
        script:
            "../scripts/paper_tables.py"


rule paper_claims:
    input:
        spec="paper/claims_spec.yaml",
        sources=claims_inputs,
    output:
        csv=report("paper/claims.csv", caption="../report/claims.rst", category="Claims ledger"),
    params:
        root=".",
    log:
        "logs/paper/claims.log",
    script:
        "../scripts/paper_claims.py"


rule paper_book:
    input:
        claims="paper/claims.csv",
        order="paper/templates/book.yaml",
        template="paper/templates/book.md.j2",
        rendered=[t for t in OTHER_TARGETS if t != "paper/book.md"]
        + expand("figures/{stem}.png", stem=FIGURE_STEMS)
        + expand("paper/tables/{stem}.md", stem=TABLE_STEMS),
    output:
        book=report("paper/book.md", caption="../report/book.rst", category="Results book"),
    params:
        root=".",
        rendered=[t for t in OTHER_TARGETS if t != "paper/book.md"]
        + expand("figures/{stem}.png", stem=FIGURE_STEMS)
        + expand("paper/tables/{stem}.md", stem=TABLE_STEMS),
    log:
        "logs/paper/book.log",
    script:
        "../scripts/paper_book.py"
